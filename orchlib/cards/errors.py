"""CardError and where a card problem is: file, 1-based line and dotted field path, found in the
round-trip YAML tree, from a pydantic error or a field path."""

from __future__ import annotations

import os
from typing import Any, Iterable

from pydantic import ValidationError
from ruamel.yaml.comments import CommentedMap, CommentedSeq

__all__ = ["CardError", "pydantic_problems", "dotted", "line_of"]


class CardError(ValueError):
    """A card problem: `"{file}:{line}: {field.path}: {problem}"`. `line` is 1-based (0 when unknown)."""

    def __init__(self, file: str | os.PathLike, line: int, field: str, problem: str):
        self.file, self.line, self.field, self.problem = str(file), int(line), field, problem
        super().__init__(f"{self.file}:{self.line}: {field}: {problem}")


def pydantic_problems(exc: ValidationError) -> list[tuple[tuple[Any, ...], str]]:
    """(field path, message) of each error in `exc`, worded for a card's author: a JSON Schema problem
    points inside the schema, an unknown or missing field says so plainly."""
    out = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        ctx = err.get("ctx") or {}
        if err["type"] == "json_schema":
            loc += tuple(ctx.get("path", ()))
            msg = err["msg"].rstrip(": ")
        elif err["type"] == "extra_forbidden":
            msg = "unknown field"
        elif err["type"] == "missing":
            msg = "required field is missing"
        else:
            msg = err["msg"]
        out.append((loc, msg))
    return out


def dotted(loc: Iterable[Any]) -> str:
    """A field path as a message shows it: `price.per_second`, or `(card)` for the card as a whole."""
    return ".".join(str(x) for x in loc) or "(card)"


def line_of(tree: Any, loc: tuple[Any, ...]) -> int:
    """1-based line of the deepest part of `loc` that exists in the YAML tree."""
    line = 0 if not hasattr(tree, "lc") else tree.lc.line
    node = tree
    for part in loc:
        if isinstance(node, CommentedMap) and part in node:
            line = node.lc.key(part)[0]
            node = node[part]
        elif isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
            line = node.lc.item(part)[0]
            node = node[part]
        else:
            break
    return line + 1
