"""Open up a reward: what each term of the reward file gives each rollout, and which terms do nothing.

    from orchlib.reward.breakdown import breakdown
    b = breakdown(reward, trajectories)     # grouped by task, each group under its own P
    print(b.table()); b.warnings

Per rollout: the reward, and per term its value, its contribution (`Reward.explain`: the reward less
the reward with the term set to 0) and its share of the reward (contribution / reward; none where the
reward is 0). The warnings are the mistakes a reward file hides well:

- `unused`: a term that is computed but cannot affect the result: the reward's expression does not
  depend on it, directly or through other terms (never named, or only under a factor of 0: sympy
  simplifies `0*term` away when the file is read);
- `no_effect`: a term the reward reads, whose contribution is 0 in every rollout given (its weight in
  P is 0, or a gate closes it everywhere);
- `constant`: a term whose value never varies within a group: under a plain sum it shifts every
  rollout of a group alike, and GRPO's advantage (reward − group mean) cancels it (the message says
  whether its contribution varies, e.g. through a gate, all the same);
- `flat_group`: a group whose rewards barely vary (population std at most `min_spread`, the trainer's
  `GRPOConfig.min_reward_spread` default): every advantage is ~0 and GRPO drops it (ToolOrchestra does).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from orchlib.reward.features import PreferenceLike
from orchlib.reward.parse import parse
from orchlib.reward.reward import Explanation, Reward
from orchlib.tasks import Preference

__all__ = ["Breakdown", "BreakdownWarning", "breakdown", "unreachable_terms", "MIN_SPREAD"]

MIN_SPREAD = 1e-6  # orchlib.train.GRPOConfig.min_reward_spread's default: a std at most this is dropped


@dataclass(frozen=True)
class BreakdownWarning:
    kind: str          # unused, no_effect, constant, flat_group
    subject: str       # the term's name, or the group's label
    message: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.subject}: {self.message}"


@dataclass
class Breakdown:
    """Per group: its label (task id), the P it was scored under and `Reward.explain`'s result."""

    reward_name: str
    terms: list[str]
    groups: list[tuple[str, Preference | None, Explanation]]
    warnings: list[BreakdownWarning] = field(default_factory=list)

    def shares(self, group: int) -> dict[str, list[float | None]]:
        """term → each rollout's contribution / reward (None where the reward is 0)."""
        _, _, e = self.groups[group]
        return {t: [float(c / r) if r != 0 else None for c, r in zip(e.contributions[t], e.reward)]
                for t in self.terms}

    def rows(self) -> list[dict[str, Any]]:
        """Long format: one row per (group, rollout, term)."""
        out = []
        for g, (label, _, e) in enumerate(self.groups):
            shares = self.shares(g)
            for i in range(len(e.reward)):
                for t in self.terms:
                    out.append({"group": label, "rollout": i, "term": t, "value": float(e.values[t][i]),
                                "contribution": float(e.contributions[t][i]), "share": shares[t][i],
                                "reward": float(e.reward[i])})
        return out

    def table(self) -> str:
        """A plain table: one row per rollout, `value → contribution (share)` per term; then the warnings."""
        head = ["group", "#", "reward", *self.terms]
        body = []
        for g, (label, _, e) in enumerate(self.groups):
            shares = self.shares(g)
            for i in range(len(e.reward)):
                cells = [f"{e.values[t][i]:.4g} → {e.contributions[t][i]:.4g} ({_pct(shares[t][i])})"
                         for t in self.terms]
                body.append([label if i == 0 else "", str(i), f"{e.reward[i]:.4g}", *cells])
        widths = [max(len(r[c]) for r in [head, *body]) for c in range(len(head))]
        lines = ["  ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths)))
                 for r in [head, *body]]
        lines.insert(1, "  ".join("-" * w for w in widths))
        text = f"reward: {self.reward_name} · each term: value → contribution (share of the reward)\n"
        text += "\n".join(lines)
        return text + "".join(f"\nwarning: {w}" for w in self.warnings)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x + 0.0:.0%}"  # + 0.0: no "-0%"


def unreachable_terms(reward: Reward) -> list[str]:
    """Terms the reward's expression does not depend on, directly or through the terms it reads."""
    names = list(reward.term_sources)
    if not names:
        return []
    top = parse(reward.source, terms=names).expr  # terms kept as symbols (sums over tools unexpanded)
    exprs = reward.terms
    reached: set[str] = set()
    todo = [s.name for s in top.free_symbols if s.name in exprs]
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo += [s.name for s in exprs[name].free_symbols if s.name in exprs]
    return [t for t in names if t not in reached]


def _grouped(trajectories: Sequence[Any]) -> list[list[Any]]:
    """A list of groups as given, or a flat list of trajectories grouped by task id (first seen first)."""
    items = list(trajectories)
    if items and all(isinstance(g, (list, tuple)) for g in items):
        return [list(g) for g in items]
    by: OrderedDict[str, list[Any]] = OrderedDict()
    for t in items:
        by.setdefault(str(getattr(t, "task_id", "")), []).append(t)
    return list(by.values())


def _group_P(group: Sequence[Any], P: Any, index: int) -> PreferenceLike:
    if isinstance(P, (list, tuple)):
        return P[index]
    if P is not None:
        return P
    pref = getattr(group[0], "preference", None)  # what the rollouts were shown (evaluate does the same)
    return Preference.model_validate(pref) if pref else None


def breakdown(reward: Reward, trajectories: Sequence[Any], P: PreferenceLike | Sequence[PreferenceLike] = None, *,
              min_spread: float = MIN_SPREAD) -> Breakdown:
    """Each term's value, contribution and share per rollout, and the warnings (module docstring).

    `trajectories`: a list of groups, or a flat list grouped by task id. `P`: one P for every group, a
    list with one per group, or None: each group under the P its first rollout was shown (else the
    reward's default)."""
    groups = _grouped(trajectories)
    if not groups:
        raise ValueError("a breakdown needs at least one group")
    terms = list(reward.term_sources) or ["reward"]
    scored = []
    for g, group in enumerate(groups):
        pref = _group_P(group, P, g)
        label = str(getattr(group[0], "task_id", "") or f"group {g}")
        scored.append((label, pref if isinstance(pref, Preference) else None, reward.explain(group, P=pref)))
    out = Breakdown(reward.name, terms, scored)
    if reward.term_sources:
        unused = unreachable_terms(reward)
        sized = [s for s in scored if len(s[2].reward) > 1]  # a group of one never varies
        for t in unused:
            out.warnings.append(BreakdownWarning("unused", t, "computed but cannot affect the result: the reward's "
                                                              "expression does not depend on it"))
        for t in terms:
            if t in unused:
                continue
            if all(not np.any(e.contributions[t]) for _, _, e in scored):
                out.warnings.append(BreakdownWarning("no_effect", t, "contributes 0 to every rollout here (a weight "
                                                                     "of 0 in P, or a gate closed everywhere)"))
            elif sized and all(np.ptp(e.values[t]) == 0 for _, _, e in sized):
                moves = any(np.ptp(e.contributions[t]) > 0 for _, _, e in scored)
                tail = ("its contribution still differs within a group (through the expression around it)"
                        if moves else "so it shifts a group's rewards alike and GRPO's advantage cancels it")
                out.warnings.append(BreakdownWarning("constant", t, f"never varies within a group: {tail}"))
    for label, _, e in scored:
        spread = float(np.std(e.reward))
        if len(e.reward) > 1 and spread <= min_spread:
            out.warnings.append(BreakdownWarning(
                "flat_group", label, f"rewards {_few(e.reward)} have std {spread:.3g} ≤ {min_spread:g}: every "
                                     "advantage is 0 and GRPO drops the group"))
    return out


def _few(values: np.ndarray) -> str:
    shown = ", ".join(f"{v:.4g}" for v in values[:4])
    return f"[{shown}{', …' if len(values) > 4 else ''}]"
