"""Hooks named in a run's config file, `hooks: {from: "package.module:factory", with: {...}}`: imported by
name, so the paper's training path imports nothing of what plugs into it.

A config file is data (people download them with papers), and importing a module or calling a factory runs
code: `from: "subprocess:run", with: {args: [...]}` would run a command. So reading or validating a config
only checks the entry's shape; `build()` imports and calls it, and `run_training` calls `build()` only when
the user opted in (`orchlib train --trust-code`, `run_training(cfg, trust_code=True)`), as transformers'
`trust_remote_code` does. Without it, a config with hooks is an `UntrustedCodeError` naming the field.
"""

from __future__ import annotations

import importlib
import math
from typing import Any, Callable

from pydantic import ConfigDict, Field, ValidationError, field_validator

from orchlib.settings import Settings, UntrustedCodeError
from orchlib.train.hooks import Hooks

__all__ = ["HooksPlugin", "HooksError", "require_trust"]


class HooksError(ValueError):
    """The hooks a config names could not be built (import, options, result); one line naming the field."""


def require_trust(plugin: HooksPlugin | None, trust_code: bool) -> None:
    """UntrustedCodeError when `plugin` names code and the user did not opt in to running it."""
    if plugin is not None and not trust_code:
        raise UntrustedCodeError(f"hooks: {plugin.factory!r} would be imported and run; a config file is data, so "
                                 "pass --trust-code (orchlib train) or trust_code=True (run_training) if you "
                                 "trust its code")


class HooksPlugin(Settings):
    """Training hooks from outside the paper's path: the factory `from` names, called with `with` as keyword
    arguments, returns a `Hooks` or an object whose `.hooks()` does (a config such as
    `orchlib.experiments.variants:VariantConfig`). Reading the file checks only the shape (an import path,
    options of plain data): nothing is imported or run until `build()`, which `run_training` calls only
    with `trust_code=True`."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    factory: str = Field(alias="from", description="import path 'package.module:factory' (or "
                         "'package.module:Class.method') of what builds the hooks; imported only when the run "
                         "starts with trust_code (--trust-code)")
    options: dict[str, Any] = Field(default_factory=dict, alias="with", description="keyword arguments the "
                                    "factory is called with: plain data (text, numbers, true/false, null, "
                                    "lists and mappings of them)")

    @field_validator("factory")
    @classmethod
    def _import_path(cls, path: str) -> str:
        module, sep, name = path.partition(":")
        if not sep or not all(p.isidentifier() for p in module.split(".")) \
                or not all(p.isidentifier() for p in name.split(".")):
            raise ValueError(f"expected 'package.module:factory', got {path!r}")
        return path

    @field_validator("options")
    @classmethod
    def _plain_data(cls, options: dict[str, Any]) -> dict[str, Any]:
        stack: list[tuple[str, Any]] = [(str(k), v) for k, v in options.items()]
        while stack:  # a loop, not recursion: a deeply nested mapping cannot exhaust the stack
            where, value = stack.pop()
            if isinstance(value, dict):
                for k, v in value.items():
                    if not isinstance(k, str):
                        raise ValueError(f"{where}: keys must be text, got {k!r}")
                    stack.append((f"{where}.{k}", v))
            elif isinstance(value, list):
                stack.extend((f"{where}[{i}]", v) for i, v in enumerate(value))
            elif isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{where}: expected a finite number, got {value}")
            elif value is not None and not isinstance(value, (str, int, float)):
                raise ValueError(f"{where}: expected plain data (text, number, true/false, null, list, "
                                 f"mapping), got {type(value).__name__}")
        return options

    def build(self) -> Hooks:
        """Import the factory and call it with the options (this runs the code the config names: see the
        module's docstring); a result with `.hooks()` is asked for its hooks."""
        try:
            factory = _import(self.factory)
        except ValueError as e:
            raise HooksError(f"hooks.from: {e}") from None
        try:
            made = factory(**self.options)
        except ValidationError as e:  # a config factory: name the option, in one line
            err = e.errors()[0]
            where = "".join(f"{part}: " for part in err["loc"])
            raise HooksError(f"hooks.with: {where}{err['msg'].removeprefix('Value error, ')}") from None
        except (TypeError, ValueError) as e:
            raise HooksError(f"hooks: {self.factory}(**with) failed: {_first_line(e)}") from None
        hooks = made.hooks() if not isinstance(made, Hooks) and callable(getattr(made, "hooks", None)) else made
        if not isinstance(hooks, Hooks):
            raise HooksError(f"hooks: {self.factory} returned {type(hooks).__name__}, not Hooks (nor an object "
                             "whose .hooks() returns Hooks)")
        return hooks


def _import(path: str) -> Callable[..., Any]:
    """`package.module:attr.attr` -> the object, or a ValueError of one line saying what is missing."""
    module, _, name = path.partition(":")
    if not module or not name:
        raise ValueError(f"expected 'package.module:factory', got {path!r}")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as e:
        raise ValueError(f"cannot import {module}: {_first_line(e)}") from None
    for part in name.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{module} has no attribute {name}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{path} is {type(obj).__name__}, not callable")
    return obj


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
