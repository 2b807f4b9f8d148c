"""Near-duplicate tasks: by text (token Jaccard) and by golden action sequence (the same calls)."""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

__all__ = ["tokens", "jaccard", "action_key"]


def tokens(text: str) -> frozenset[str]:
    """The lower-cased word tokens of a text."""
    return frozenset(re.findall(r"\w+", text.lower()))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a ∩ b| / |a ∪ b| (1.0 for two empty sets: nothing tells them apart)."""
    return len(a & b) / len(a | b) if a | b else 1.0


def action_key(calls: Sequence[Any]) -> str:
    """One text per action sequence: names and arguments in order, arguments with sorted keys."""
    return json.dumps([[c.name, c.arguments] for c in calls], sort_keys=True, separators=(",", ":"))
