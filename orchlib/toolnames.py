"""Tool names across formats: what a card accepts, what each export allows, and the way back.

A card's name may use what OpenAI and MCP tool names use together: ASCII letters of both cases,
digits, `_`, `-` and `.`, 1 to 128 characters (MCP's limit; SEP-986). The Hermes/Qwen `<tool_call>`
format and transformers' chat templates take any such name as it is. The OpenAI API allows
`^[a-zA-Z0-9_-]{1,64}$`: no dot, 64 characters at most. An export to a format that forbids a name
maps it, and `ToolNames` maps a call the model wrote back to the card's name:

    names = ToolNames(["math.factorial", "fetch_DNA_sequence"], "openai")
    names.exported("math.factorial")   # 'math_factorial'
    names.internal("math_factorial")   # 'math.factorial'

A name that already fits is never changed. A mapped name replaces each forbidden character by `_`;
when that collides with another name of the set (or is too long) it is cut and given `_` plus six hex
digits of the SHA-256 of the original, so the mapping stays one-to-one within the set.
"""

from __future__ import annotations

import hashlib
import re
from typing import Iterable

__all__ = ["CARD_NAME", "MAX_NAME", "FORMAT_RULES", "fits", "export_name", "card_name", "ToolNames"]

MAX_NAME = 128
CARD_NAME = re.compile(r"[A-Za-z0-9_.-]{1,%d}" % MAX_NAME)

# format -> (characters allowed, as a regex class body; longest name). None: any card name as it is.
FORMAT_RULES: dict[str, tuple[str, int] | None] = {
    "openai": ("A-Za-z0-9_-", 64),      # platform.openai.com/docs/api-reference/chat/create (tools.function.name)
    "mcp": ("A-Za-z0-9_.-", MAX_NAME),  # modelcontextprotocol.io/specification (Tool names, SEP-986)
    "transformers": None,               # chat templates render the string; Hermes/Qwen parse it back
    "hermes": None,
}


def _rule(fmt: str) -> tuple[str, int] | None:
    if fmt not in FORMAT_RULES:
        raise ValueError(f"unknown name format {fmt!r} (have {', '.join(FORMAT_RULES)})")
    return FORMAT_RULES[fmt]


def fits(name: str, fmt: str) -> bool:
    """Whether `name` is allowed as it is in format `fmt`."""
    rule = _rule(fmt)
    if rule is None:
        return True
    chars, longest = rule
    return re.fullmatch(f"[{chars}]{{1,{longest}}}", name) is not None


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8")).hexdigest()[:6]


def _mapped(name: str, chars: str, longest: int, hashed: bool) -> str:
    text = re.sub(f"[^{chars}]", "_", name) or "_"
    if not hashed and len(text) <= longest:
        return text
    return text[:longest - 7] + "_" + _digest(name)


def export_name(name: str, fmt: str) -> str:
    """`name` as format `fmt` allows it, on its own (a set of names: `ToolNames`)."""
    rule = _rule(fmt)
    if rule is None or fits(name, fmt):
        return name
    return _mapped(name, rule[0], rule[1], hashed=False)


def card_name(name: str) -> str:
    """A name a card accepts, from a name some server or file used (spaces, slashes, 200 characters):
    unchanged when it is one already."""
    if CARD_NAME.fullmatch(name):
        return name
    return _mapped(name, "A-Za-z0-9_.-", MAX_NAME, hashed=len(re.sub(r"[^A-Za-z0-9_.-]", "_", name)) > MAX_NAME)


class ToolNames:
    """The names of a set of tools in one export format, one-to-one both ways."""

    def __init__(self, names: Iterable[str], fmt: str):
        self.format = fmt
        rule = _rule(fmt)
        names = list(dict.fromkeys(names))
        out: dict[str, str] = {n: n for n in names if rule is None or fits(n, fmt)}
        taken = set(out)
        for name in sorted(n for n in names if n not in out):  # sorted: the same set maps the same way
            assert rule is not None
            candidate = _mapped(name, rule[0], rule[1], hashed=False)
            if candidate in taken:
                candidate = _mapped(name, rule[0], rule[1], hashed=True)
            if candidate in taken:  # two names sharing 24 bits of SHA-256 and a prefix
                raise ValueError(f"cannot give {name!r} a distinct {fmt} name ({candidate!r} is taken)")
            out[name] = candidate
            taken.add(candidate)
        self._out = out
        self._back = {v: k for k, v in out.items()}

    def exported(self, name: str) -> str:
        """The name the export shows for card name `name` (KeyError for a name not in the set)."""
        return self._out[name]

    def internal(self, exported: str) -> str:
        """The card name for a name read back from the format; a name not in the set is returned as
        it is, so the toolbox reports it as an unknown tool."""
        return self._back.get(exported, exported)

    @property
    def changed(self) -> dict[str, str]:
        """{card name: exported name} for the names that differ."""
        return {k: v for k, v in self._out.items() if k != v}

    def __repr__(self) -> str:
        return f"ToolNames({self.format}, {len(self._out)} names, {len(self.changed)} mapped)"
