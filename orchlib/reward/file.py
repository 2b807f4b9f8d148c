"""Reward files: YAML in, a validated `RewardSpec` out, with the line of every field kept for errors.

    name: toolorchestra                  # required
    doc: what it rewards and why         # optional
    preference: {outcome: 1, cost: 0.5}  # optional default P (or a profile name from orchlib.tasks)
    terms:                               # optional named sub-terms, in order; later ones may use earlier
      thrift: P.cost * minmax(-cost)
    reward: where(outcome >= 1, thrift, 0)  # required

Any problem is a `RewardFileError` reading `FILE:LINE: field: problem`.
"""

from __future__ import annotations

import keyword
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.scalarstring import FoldedScalarString, LiteralScalarString

from orchlib import safeyaml
from orchlib.reward.errors import RewardFileError, RewardSyntaxError
from orchlib.reward.parse import RESERVED
from orchlib.tasks import PROFILES, Preference

__all__ = ["RewardSpec", "Located", "read_spec", "check_term_name"]


class RewardSpec(BaseModel):
    """The fields of a reward file."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1, description="short identifier shown in logs and reports")
    doc: str = Field("", description="what the reward pays for, and where it comes from")
    preference: Preference = Field(default_factory=Preference,
                                   description="P used when a task brings none (a task's own P replaces it)")
    terms: dict[str, str] = Field(default_factory=dict,
                                  description="named sub-terms, in order; each may use the ones before it")
    reward: str = Field(min_length=1, description="the reward expression; may use the terms by name")


def check_term_name(name: Any) -> str | None:
    """Why `name` cannot name a term, or None if it can."""
    if not isinstance(name, str) or not name.isidentifier():
        return f"a term name must be an identifier (got {name!r})"
    if keyword.iskeyword(name) or name in RESERVED or name.startswith("_"):
        return f"`{name}` is reserved and cannot name a term"
    return None


@dataclass(frozen=True)
class Located:
    """Where the parts of a reward file are, so an error can name a line."""

    path: str
    root: Any  # the ruamel CommentedMap (None when the text was one expression)

    def line(self, loc: tuple[Any, ...]) -> int:
        """1-based line of the deepest key of `loc` present in the file (1 if none)."""
        node, line = self.root, 1
        for key in loc:
            lc = getattr(node, "lc", None)
            if lc is None or not hasattr(node, "__contains__") or key not in node:
                break
            line = lc.key(key)[0] + 1
            node = node[key]
        return line

    def expression_line(self, loc: tuple[str, ...], error: RewardSyntaxError) -> int:
        """File line of a syntax error inside the expression at `loc` (`reward` or `terms`, name)."""
        parent = self.root
        for key in loc[:-1]:
            parent = parent[key] if parent is not None else None
        if parent is None or not hasattr(parent, "lc"):
            return error.position[0]
        first = parent.lc.value(loc[-1])[0] + 1
        # A `|` or `>` block starts on the line after its indicator.
        if isinstance(parent[loc[-1]], (LiteralScalarString, FoldedScalarString)):
            first += 1
        return first + error.position[0] - 1

    def error(self, loc: tuple[Any, ...], problem: str) -> RewardFileError:
        return RewardFileError(self.path, self.line(loc), ".".join(str(k) for k in loc) or "file", problem)


def _yaml() -> YAML:
    y = YAML(typ="rt")
    y.allow_duplicate_keys = False  # a second `reward:` must not silently win
    return y


def read_spec(text: str, path: str = "<string>") -> tuple[RewardSpec, Located]:
    """Parse and validate a reward file's text (expressions are parsed later, by Reward)."""
    try:
        data = safeyaml.load(_yaml(), text)  # bounded nesting (a RecursionError otherwise) and aliases
    except safeyaml.YAMLInputError as e:
        raise RewardFileError(path, e.line, "yaml", e.problem) from None
    where = Located(path, data)
    if not isinstance(data, dict):
        raise RewardFileError(path, 1, "file", "a reward file must be a mapping with at least "
                                                "`name` and `reward`")
    fields = dict(data)
    for key in ("reward",):
        if isinstance(fields.get(key), (int, float)) and not isinstance(fields.get(key), bool):
            fields[key] = str(fields[key])  # `reward: 1` is a constant reward, not a type error
    if isinstance(fields.get("terms"), dict):
        terms = {}
        for name, expr in fields["terms"].items():
            problem = check_term_name(name)
            if problem:
                raise where.error(("terms", name), problem)
            is_number = isinstance(expr, (int, float)) and not isinstance(expr, bool)
            terms[name] = str(expr) if is_number else expr
        fields["terms"] = terms
    if isinstance(fields.get("preference"), str):
        profile = fields["preference"]
        if profile not in PROFILES:
            raise where.error(("preference",), f"unknown profile `{profile}` (known: {', '.join(PROFILES)})")
        fields["preference"] = PROFILES[profile]
    elif isinstance(fields.get("preference"), dict):
        fields["preference"] = _plain(fields["preference"])
    try:
        spec = RewardSpec.model_validate(fields)
    except ValidationError as e:
        # A misspelt field ("rewrd") is the cause of the "reward: field required" that comes with it.
        first = sorted(e.errors(), key=lambda err: err["type"] != "extra_forbidden")[0]
        loc = tuple(first["loc"])
        raise where.error(loc, first["msg"]) from None
    return spec, where


def _plain(node: Any) -> Any:
    # ruamel's CommentedMap is a dict subclass, but pydantic should see plain data.
    if isinstance(node, dict):
        return {k: _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node
