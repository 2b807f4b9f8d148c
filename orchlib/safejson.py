"""Reading JSON from outside (a model's tool calls, task files) into values the rest of orchlib can carry.

`json.loads` accepts what later steps cannot: nesting near Python's recursion limit (pydantic, `json.dumps`
and the JSONL writers recurse on it), integers past `sys.get_int_max_str_digits()` (a ValueError, not a
JSONDecodeError), lone surrogate escapes such as "\\ud800" (no UTF-8 encoding, so writing the
trajectory fails much later), and `NaN`, `Infinity` and `-Infinity` (not JSON at all, RFC 8259: a state
holding one has no canonical JSON, so its hash, and the checker, fail at the episode's end). `loads`
turns each into a `JSONInputError` at read time.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["MAX_DEPTH", "JSONInputError", "loads", "problem"]

MAX_DEPTH = 64  # tool arguments and task metadata nest a few levels; the C decoder fails near 1,000


class JSONInputError(ValueError):
    """Why a JSON text was refused; `pos` is the character offset (0 when the whole text is at fault)."""

    def __init__(self, message: str, pos: int = 0, colno: int = 0):
        self.message, self.pos, self.colno = message, pos, colno
        super().__init__(message)


def loads(text: str) -> Any:
    """`json.loads(text)` that raises only JSONInputError, and only returns values `problem` accepts."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise JSONInputError(f"invalid JSON: {e.msg} (column {e.colno})", e.pos, e.colno) from None
    except RecursionError:
        raise JSONInputError(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:  # an integer of more than 4,300 digits (sys.set_int_max_str_digits)
        raise JSONInputError(f"invalid JSON: {e}") from None
    why = problem(value)
    if why:
        raise JSONInputError(why)
    return value


def problem(value: Any, max_depth: int = MAX_DEPTH) -> str | None:
    """Why parsed JSON cannot be carried on, or None. Iterative, so no depth exhausts the stack here."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            return f"JSON nested deeper than {max_depth} levels"
        if isinstance(item, dict):
            stack.extend((k, depth) for k in item)
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, float) and not math.isfinite(item):
            return f"{json.dumps(item)} is not a JSON number (a number must be finite)"
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as e:
                return f"a string holds an unpaired surrogate (\\u{ord(item[e.start]):04x}), not valid Unicode"
    return None
