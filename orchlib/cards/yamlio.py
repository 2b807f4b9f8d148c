"""Cards as YAML files: load and validate with file:line errors, check many without raising, and save
through ruamel's round trip, so a hand-written card keeps its comments and key order."""

from __future__ import annotations

import copy
import io
import math
import os
import re
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Iterable

from pydantic import ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, LiteralScalarString

from orchlib import safeyaml
from orchlib.atomic import write_text_atomic
from orchlib.cards.errors import CardError, dotted, line_of, pydantic_problems
from orchlib.cards.model import ToolCard, _Origin
from orchlib.shipped import shipped_path

__all__ = ["load_card", "load_cards", "save_card", "check_cards", "card_files"]


# ---------------------------------------------------------------------------------------------- load
def _yaml() -> YAML:
    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.width = 100
    y.indent(mapping=2, sequence=4, offset=2)
    y.representer.add_representer(float, _represent_float)
    return y


def _represent_float(representer: Any, value: float) -> Any:
    """Floats in positional notation (0.00001, not 1e-05): YAML 1.1 readers such as PyYAML take
    an exponent without a dot for a string."""
    text = repr(value)
    if "e" in text and math.isfinite(value):
        text = format(Decimal(text), "f")
        text = text if "." in text else text + ".0"
    return representer.represent_scalar("tag:yaml.org,2002:float", text)


def _read_tree(path: Path) -> CommentedMap:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise CardError(path, 0, "(file)", f"cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:  # a ValueError, not an OSError: a binary or Latin-1 file
        line = e.object[:e.start].count(b"\n") + 1
        raise CardError(path, line, "(file)", f"not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset "
                                              f"{e.start})") from None
    try:
        tree = safeyaml.load(_yaml(), text)  # bounded nesting and aliases; the line of an unclosed quote
    except safeyaml.YAMLInputError as e:
        raise CardError(path, e.line, "(yaml)", e.problem) from None
    if not isinstance(tree, CommentedMap):
        raise CardError(path, 1, "(card)", f"a card is a YAML mapping, got {type(tree).__name__}")
    return tree


def _check_tree(path: Path, tree: CommentedMap) -> tuple[ToolCard | None, list[CardError]]:
    try:
        card = ToolCard.model_validate(_plain(tree))
    except ValidationError as e:
        return None, [CardError(path, line_of(tree, loc), dotted(loc), msg) for loc, msg in pydantic_problems(e)]
    card._origin = _Origin(path=path, tree=tree)
    return card, []


def load_card(path: str | os.PathLike) -> ToolCard:
    """Read and validate one card file; the first problem raises CardError (file:line: field: problem).
    `toolcards/NAME.yaml` falls back to the shipped card when no such file is here."""
    path = shipped_path(path)
    card, problems = _check_tree(path, _read_tree(path))
    if problems:
        first = problems[0]
        if len(problems) > 1:
            raise CardError(first.file, first.line, first.field,
                            f"{first.problem} (and {len(problems) - 1} more: orchlib cards validate {path})")
        raise first
    return card


def card_files(path_or_folder: str | os.PathLike) -> list[Path]:
    """The card files a path names: the file itself, or a folder's top-level *.yaml / *.yml (sub-folders,
    such as toolcards/examples/, are not read). `toolcards` is the shipped folder when none is here."""
    path = shipped_path(path_or_folder)
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    if not path.exists():
        raise CardError(path, 0, "(file)", "no such file or folder")
    return [path]


def load_cards(path_or_folder: str | os.PathLike | Iterable[str | os.PathLike]) -> list[ToolCard]:
    """Cards of a file, a folder (top level only) or a list of those, sorted by name; a name used
    twice is an error naming both files."""
    paths = [path_or_folder] if isinstance(path_or_folder, (str, os.PathLike)) else list(path_or_folder)
    cards = [load_card(f) for p in paths for f in card_files(p)]
    seen: dict[str, ToolCard] = {}
    for card in cards:
        if card.name in seen:
            raise card.error(("name",), f"duplicate tool name {card.name!r} (also in {seen[card.name].source})")
        seen[card.name] = card
    return sorted(cards, key=lambda c: c.name)


def check_cards(cards: Any, build: Callable[[ToolCard], list[CardError]] | None = None) -> list[CardError]:
    """Every problem of every card, without raising: YAML, fields, JSON Schema, duplicate names and
    whatever `build` finds in each valid card (`orchlib.tools.validate_cards` passes the backends'
    check; this module knows no backend). `cards` is one or a list of: a card file or folder, a
    `ToolCard`, or a card's fields as a dict (a card made in code is named `<card NAME>` in its
    messages, a dict `<card #i>` by its place in the list)."""
    items = [cards] if isinstance(cards, (str, os.PathLike, ToolCard, dict)) else list(cards)
    problems: list[CardError] = []
    seen: dict[str, ToolCard] = {}
    for i, item in enumerate(items):
        for card, found in _cards_of(item, i):
            problems += found
            if card is None:
                continue
            if card.name in seen:
                other = seen[card.name].source or f"<card {card.name}>"
                problems.append(card.error(("name",), f"duplicate tool name {card.name!r} (also in {other})"))
            seen[card.name] = card
            if build is not None:
                problems += build(card)
    return problems


def _cards_of(item: Any, index: int) -> Iterable[tuple[ToolCard | None, list[CardError]]]:
    """(card or None, its problems) for each card an item of validate_cards names."""
    if isinstance(item, ToolCard):
        yield item, []
        return
    if isinstance(item, dict):
        try:
            yield ToolCard.model_validate(item), []
        except ValidationError as e:
            name = item.get("name")
            where = f"<card {name}>" if isinstance(name, str) else f"<card #{index}>"
            yield None, [CardError(where, 0, dotted(loc), msg) for loc, msg in pydantic_problems(e)]
        return
    if not isinstance(item, (str, os.PathLike)):
        yield None, [CardError(f"<item #{index}>", 0, "(card)", "expected a card file or folder, a ToolCard or "
                                                               f"a dict, got {type(item).__name__}")]
        return
    try:
        files = card_files(item)
    except CardError as e:
        yield None, [e]
        return
    for f in files:
        try:
            yield _check_tree(f, _read_tree(f))
        except CardError as e:
            yield None, [e]


# ---------------------------------------------------------------------------------------------- save
def save_card(card: ToolCard, path: str | os.PathLike) -> Path:
    """Write a card as YAML, atomically (temporary file, then rename). A card that was read from a
    file keeps that file's comments and key order; only changed values are rewritten."""
    path = Path(path)
    full = card.model_dump(mode="json")
    sparse = card.model_dump(mode="json", exclude_defaults=True)
    if card._origin is not None:
        tree = copy.deepcopy(card._origin.tree)
        _merge(tree, full, sparse)
    else:
        tree = _fresh_tree(full, sparse)
    buf = io.StringIO()
    _yaml().dump(tree, buf)
    return write_text_atomic(path, buf.getvalue())


def _fresh_tree(full: dict[str, Any], sparse: dict[str, Any]) -> CommentedMap:
    tree = CommentedMap()
    for key in ToolCard.model_fields:  # field order: name and kind first, as a person would write it
        if key in ("name", "kind", "description") or key in sparse:
            tree[key] = _to_yaml(sparse.get(key, full[key]))
    return tree


# What YAML reads back unchanged in a block or plain scalar: tab, newline and the printable characters,
# less the ones YAML 1.1 counts as line breaks (NEL, U+2028, U+2029) and the byte-order mark. Anything
# else (CR, other control characters) is written double-quoted, where it is escaped (\r, \a, \L).
_PLAIN_SAFE = re.compile("[\t\n\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd"
                         "\U00010000-\U0010ffff]*")


def _to_yaml(value: Any) -> Any:
    if isinstance(value, dict):
        out = CommentedMap()
        for k, v in value.items():
            out[_to_yaml(k)] = _to_yaml(v)
        return out
    if isinstance(value, list):
        return CommentedSeq(_to_yaml(v) for v in value)
    if isinstance(value, str):
        if not _PLAIN_SAFE.fullmatch(value):
            return DoubleQuotedScalarString(value)  # escaped: any string comes back exactly
        if "\n" in value:
            return LiteralScalarString(value)  # block style keeps long descriptions readable
    return value


def _merge(tree: CommentedMap, full: dict[str, Any], sparse: dict[str, Any]) -> None:
    """Bring `tree` to the values of `full`, touching only what changed. Keys the tree lacks are added
    only when they differ from their default (they are in `sparse`)."""
    for key in [k for k in tree if k not in full]:
        del tree[key]
    for key, value in full.items():
        if key in tree:
            old = tree[key]
            if isinstance(old, CommentedMap) and isinstance(value, dict):
                _merge(old, value, sparse[key] if isinstance(sparse.get(key), dict) else {})
            elif _plain(old) != value or type(_plain(old)) is not type(value) and not _numbers(old, value):
                tree[key] = _to_yaml(value)
        elif key in sparse:
            tree[_to_yaml(key)] = _to_yaml(sparse[key])


def _numbers(a: Any, b: Any) -> bool:
    """1 and 1.0 are the same price: keep what the author wrote."""
    num = (int, float)
    return isinstance(a, num) and isinstance(b, num) and not isinstance(a, bool) and not isinstance(b, bool)


# ---------------------------------------------------------------------------------------------- helpers
def _plain(obj: Any) -> Any:
    """ruamel's round-trip types (CommentedMap, ScalarFloat, ...) as plain Python values."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, bool):
        return bool(obj)
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, str):
        return str(obj)
    return obj
