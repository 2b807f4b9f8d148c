"""Tool schemas as real files write them, brought to JSON Schema (draft 2020-12), saying what changed.

Function-calling data sets and hand-written tool lists name types the way their authors' languages do:
`dict`, `float`, `tuple`, `any`, `String`, `List[int]`, `Optional[str]`. JSON Schema has seven type
names, so these fail validation as written. `normalize` maps them by the table below and returns the
list of changes, one line each (`properties.x.type: 'float' -> 'number'`), so an import can show them.

| written (any case)                                   | JSON Schema                           |
|------------------------------------------------------|---------------------------------------|
| dict, map, mapping, hash, struct, Dict[K, V]         | object (V: additionalProperties)      |
| float, double, decimal, real, number                 | number                                |
| int, integer, long, int32, int64, short              | integer                               |
| str, string, text, char                              | string                                |
| bool, boolean                                        | boolean                               |
| list, array, tuple, set, sequence, List[X], Set[X]   | array (X: items)                      |
| Tuple[X, Y]                                          | array with prefixItems, exactly 2     |
| null, none, nonetype                                 | null                                  |
| any, anytype, object? none of the above: `any` only  | no type: any value                    |
| Optional[X], Union[X, Y], [X, "None"] (a type list)  | the types of X (and Y), plus null     |

Other repairs: an object schema's properties marked `required: true` (draft 3) move to the object's
`required` list; `items` written as a list (draft 4 tuples) becomes `prefixItems`; the top level gets
`type: object` when it has none. A type name outside the table is an error naming its path.
"""

from __future__ import annotations

import copy
import re
from typing import Any

__all__ = ["TYPE_NAMES", "LooseSchemaError", "normalize"]

TYPE_NAMES: dict[str, str | None] = {
    **dict.fromkeys(["dict", "map", "mapping", "hash", "struct", "object"], "object"),
    **dict.fromkeys(["float", "double", "decimal", "real", "number"], "number"),
    **dict.fromkeys(["int", "integer", "long", "int32", "int64", "short"], "integer"),
    **dict.fromkeys(["str", "string", "text", "char"], "string"),
    **dict.fromkeys(["bool", "boolean"], "boolean"),
    **dict.fromkeys(["list", "array", "tuple", "set", "sequence"], "array"),
    **dict.fromkeys(["null", "none", "nonetype"], "null"),
    **dict.fromkeys(["any", "anytype"], None),
}
JSON_TYPES = ("object", "number", "integer", "string", "boolean", "array", "null")

# Keywords whose value is a schema, a list of schemas, or a {name: schema} map (2020-12 and earlier).
_ONE = ("items", "additionalProperties", "additionalItems", "contains", "not", "if", "then", "else",
        "propertyNames", "unevaluatedItems", "unevaluatedProperties")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")

_GENERIC = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(?:\[(.*)\])?\s*$", re.S)


class LooseSchemaError(ValueError):
    """A schema that cannot be brought to JSON Schema; `path` is where, inside the schema."""

    def __init__(self, path: tuple[Any, ...], problem: str):
        self.path, self.problem = path, problem
        super().__init__(f"{'.'.join(map(str, path)) or '(schema)'}: {problem}")


def normalize(schema: Any, *, top: bool = True) -> tuple[dict[str, Any], list[str]]:
    """(a JSON Schema, the changes made) for a loosely written one; the input is not modified.
    `top`: the schema is a tool's arguments, so it is an object schema."""
    if schema is None:
        schema = {}
    if not isinstance(schema, dict):
        raise LooseSchemaError((), f"a schema is a JSON object, got {type(schema).__name__}")
    out = copy.deepcopy(schema)
    changes: list[str] = []
    _walk(out, (), changes)
    if top and "type" not in out:
        out["type"] = "object"
        changes.append("type: (none) -> 'object'")
    if top and "properties" not in out and out.get("type") == "object":
        out["properties"] = {}
    return out, changes


def _walk(node: Any, path: tuple[Any, ...], changes: list[str]) -> None:
    if not isinstance(node, dict):
        return
    if "type" in node:
        _fix_type(node, path, changes)
    if isinstance(node.get("items"), list):  # draft 4 tuple form
        node["prefixItems"] = node.pop("items")
        changes.append(f"{_dotted(path + ('items',))}: a list -> prefixItems")
    props = node.get("properties")
    if isinstance(props, dict):
        lifted = [k for k, v in props.items() if isinstance(v, dict) and isinstance(v.get("required"), bool)]
        for key in lifted:
            if props[key].pop("required"):
                req = node.setdefault("required", [])
                if isinstance(req, list) and key not in req:
                    req.append(key)
            changes.append(f"{_dotted(path + ('properties', key, 'required'))}: a boolean -> the object's "
                           "required list")
    for key in _ONE:
        if isinstance(node.get(key), dict):
            _walk(node[key], path + (key,), changes)
    for key in _MANY:
        if isinstance(node.get(key), list):
            for i, sub in enumerate(node[key]):
                _walk(sub, path + (key, i), changes)
    for key in _MAP:
        if isinstance(node.get(key), dict):
            for name, sub in node[key].items():
                _walk(sub, path + (key, name), changes)


def _fix_type(node: dict[str, Any], path: tuple[Any, ...], changes: list[str]) -> None:
    written = node["type"]
    where = path + ("type",)
    names = written if isinstance(written, list) else [written]
    types: list[str] = []
    extra: dict[str, Any] = {}
    anything = False
    for name in names:
        if not isinstance(name, str):
            raise LooseSchemaError(where, f"a type is a string, got {name!r}")
        kind, more = _parse_type(name, where)
        if kind is None:
            anything = True
            continue
        kind_list = kind if isinstance(kind, list) else [kind]
        types += [k for k in kind_list if k not in types]
        for key, value in more.items():
            extra.setdefault(key, value)
    if anything:
        new: Any = None
    elif len(types) == 1 and not isinstance(written, list):
        new = types[0]
    else:
        new = types[0] if len(types) == 1 else types
    if new == written and not extra:
        return
    if new is None:
        del node["type"]
    else:
        node["type"] = new
    for key, value in extra.items():
        node.setdefault(key, value)
    note = f"{_dotted(where)}: {written!r} -> " + ("(any value)" if new is None else repr(new))
    if extra:
        note += " with " + ", ".join(sorted(extra))
    changes.append(note)


def _parse_type(text: str, where: tuple[Any, ...]) -> tuple[str | list[str] | None, dict[str, Any]]:
    """('array', {'items': {...}}) for 'List[int]'; None for any value."""
    m = _GENERIC.match(text)
    if not m:
        raise LooseSchemaError(where, f"unknown type {text!r}")
    head, inner = m.group(1).split(".")[-1].lower(), m.group(2)  # typing.List -> list
    if inner is None or not inner.strip():
        if head in JSON_TYPES:
            return head, {}
        if head not in TYPE_NAMES:
            raise LooseSchemaError(where, f"unknown type {text!r} (known: {', '.join(sorted(TYPE_NAMES))})")
        return TYPE_NAMES[head], {}
    args = [_sub_schema(a, where) for a in _split_args(inner)]
    if head in ("optional", "union"):
        kinds: list[str] = []
        for sub in args + ([{"type": "null"}] if head == "optional" else []):
            if "type" not in sub:
                return None, {}
            for k in sub["type"] if isinstance(sub["type"], list) else [sub["type"]]:
                if k not in kinds:
                    kinds.append(k)
        return kinds, {}
    kind = TYPE_NAMES.get(head, "unknown") if head not in JSON_TYPES else head
    if kind == "array":
        if head == "tuple" and not (len(args) == 2 and args[1] == {"$ellipsis": True}):
            return "array", {"prefixItems": args, "minItems": len(args), "maxItems": len(args)}
        return "array", {"items": args[0]} if args else {}
    if kind == "object":
        return "object", {"additionalProperties": args[-1]} if args else {}
    raise LooseSchemaError(where, f"unknown type {text!r}: {head} takes no arguments")


def _sub_schema(text: str, where: tuple[Any, ...]) -> dict[str, Any]:
    if text.strip() == "...":
        return {"$ellipsis": True}
    kind, more = _parse_type(text, where)
    return {**({} if kind is None else {"type": kind}), **more}


def _split_args(inner: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    parts.append(inner[start:])
    return [p for p in (x.strip() for x in parts) if p]


def _dotted(path: tuple[Any, ...]) -> str:
    return ".".join(map(str, path)) or "(schema)"
