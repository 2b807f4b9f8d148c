"""A function's JSON Schema from its code: Google-style docstring sections (description, `Args:`) and
type hints turned into the schema of its arguments (`ToolCard.from_function`)."""

from __future__ import annotations

import json
import re
import typing
from enum import Enum
from typing import Any, Iterable, Literal

__all__ = ["parse_docstring", "json_type", "is_json"]


_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns|Return|Yields|Raises|Examples|Example|Notes|Note)"
                      r"\s*:\s*$")
_ARG = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(description, {arg: text}) from a Google-style docstring. The description is everything before
    the first section; an argument's text may continue on more-indented lines."""
    lines = doc.splitlines()
    desc: list[str] = []
    args: dict[str, str] = {}
    section, current, arg_indent = None, None, None
    for raw in lines:
        stripped = raw.strip()
        m = _SECTION.match(stripped)
        if m and (len(raw) - len(raw.lstrip())) == 0:
            section, current, arg_indent = m.group(1), None, None
            continue
        if section is None:
            desc.append(raw)
            continue
        if section not in ("Args", "Arguments", "Parameters") or not stripped:
            continue
        indent = len(raw) - len(raw.lstrip())
        am = _ARG.match(stripped)
        if am and (arg_indent is None or indent <= arg_indent):
            arg_indent, current = indent, am.group(1).lstrip("*")
            args[current] = am.group(2).strip()
        elif current is not None:
            args[current] = (args[current] + " " + stripped).strip()
    return "\n".join(desc).strip(), args


_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def json_type(hint: Any, where: str) -> dict[str, Any]:
    """JSON Schema of a type hint (the subset a tool argument needs)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return {}
    if hint in _SIMPLE:
        return {"type": _SIMPLE[hint]}
    if isinstance(hint, type) and issubclass(hint, Enum):
        values = [m.value for m in hint]
        return {"type": _SIMPLE.get(type(values[0]), "string"), "enum": values}
    if origin is Literal:
        types = sorted({_SIMPLE[type(a)] for a in args})
        return {"type": types[0] if len(types) == 1 else types, "enum": list(args)}
    if origin in (list, typing.List, set, frozenset, Iterable) or hint in (list, set):
        return {"type": "array", **({"items": json_type(args[0], where)} if args else {})}
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": json_type(args[0], where)}
        return {"type": "array", "prefixItems": [json_type(a, where) for a in args],
                "minItems": len(args), "maxItems": len(args)}
    if origin is dict or hint is dict:
        return {"type": "object", **({"additionalProperties": json_type(args[1], where)} if args else {})}
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        parts = [json_type(a, where) for a in args]
        if all(set(p) == {"type"} and isinstance(p["type"], str) for p in parts):
            return {"type": [p["type"] for p in parts]}
        nullable = [p for p in parts if p != {"type": "null"}]
        if len(nullable) == 1 and len(parts) == 2 and isinstance(nullable[0].get("type"), str):
            out = {**nullable[0], "type": [nullable[0]["type"], "null"]}
            if "enum" in out:
                out["enum"] = [*out["enum"], None]
            return out
        return {"anyOf": parts}
    raise TypeError(f"{where}: no JSON Schema for type hint {hint!r}")


def is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
