"""The `State` marker: which parameter of a function tool receives the episode's state
(`ToolContext.state`), and `state_parameter`, which finds it."""

from __future__ import annotations

import inspect
import typing
from typing import Annotated, Any, Callable

__all__ = ["STATE", "State", "state_parameter"]


class _StateMarker:
    """Marks the parameter of a function tool that receives the episode's state (`ToolContext.state`)."""

    def __repr__(self) -> str:
        return "orchlib.STATE"


STATE = _StateMarker()
# `def lookup(order_id: str, db: State)`, or `Annotated[MyDB, STATE]` to keep a type for the reader.
State = Annotated[Any, STATE]


def state_parameter(fn: Callable[..., Any], name: str | None = None) -> str | None:
    """The parameter of `fn` that receives the episode's state: `name` when given (it must exist),
    else the one annotated with `STATE` (`db: State`), else one named `env`, else None."""
    params = inspect.signature(fn).parameters
    where = getattr(fn, "__qualname__", repr(fn))
    if name is not None:
        if name not in params:
            raise TypeError(f"{where}: no parameter {name!r} to receive the episode's state "
                            f"(parameters: {', '.join(params) or 'none'})")
        return name
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # unresolvable string annotations, or a builtin: read what the signature holds
        hints = {n: p.annotation for n, p in params.items()}
    marked = [n for n in params if any(m is STATE for m in getattr(hints.get(n), "__metadata__", ()))]
    if len(marked) > 1:
        raise TypeError(f"{where}: parameters {marked} are all marked State; one receives the episode's state")
    if marked:
        return marked[0]
    return "env" if "env" in params else None
