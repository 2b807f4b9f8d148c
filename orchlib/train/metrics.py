"""What a GRPO step reports: the metrics of its trajectories, rewards and update, over every process.

`step_metrics` turns one step's rollouts into the flat dict a `StepReport` carries (and a tracker logs):
reward, accuracy, USD, seconds, tokens, turns and errors per rollout; each tool's calls and share; the
same per preference profile, with the mean advantage of the rollouts that called each tool (where the
update pushes, under that P); each reward term's mean contribution (`term_means`); the groups kept and
left out; and the update's own numbers. Nothing here changes what the step learns.

Under several processes each function is a collective call: every process makes it, in the same order.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from orchlib.env import reward_terms
from orchlib.configurations import reward_preference

__all__ = ["step_metrics", "term_means", "gather_dicts", "sum_dicts", "summaries", "tool_advantages", "flat"]


def step_metrics(trajs, rewards: list[float], terms: dict[str, float], keep, upd: dict[str, float],
                 advantages: list[float], group_size: int, step: int, num_processes: int = 1) -> dict[str, float]:
    """The metrics of step `step`: `trajs` (this process's, task-major, `group_size` per group) with their
    `rewards` and `advantages`, `keep` [n_groups] bool, `terms` (`term_means`) and the update's `upd`."""
    from accelerate.utils import gather_object

    G = group_size
    rows = [{"reward": r, "outcome": t.outcome, "cost": t.cost_usd, "latency": t.latency_s,
             "tokens": t.num_tokens, "turns": t.num_turns, "calls": t.calls, "errors": t.errors,
             "profile": t.preference.get("name", ""), "kept": bool(k), "advantage": a if k else 0.0}
            for t, r, k, a in zip(trajs, rewards, np.repeat(keep.numpy(), G), advantages)]
    if num_processes > 1:
        rows = gather_object(rows)
    kept = sum(r["kept"] for r in rows) / G  # every group is G rows, each marked with its group's keep
    m: dict[str, float] = {"step": float(step)}
    m.update(summaries(rows))
    for prof in sorted({r["profile"] for r in rows if r["profile"]}):
        sub = summaries([r for r in rows if r["profile"] == prof])
        m.update({f"profile/{prof}/{k}": v for k, v in sub.items() if not k.startswith(("calls/", "errors/"))})
        # groups of this profile that carried a learning signal: a group whose rewards are all equal
        # teaches nothing, and under some P (outcome only, every tool right) most groups are like that
        m[f"profile/{prof}/groups_kept"] = sum(r["kept"] for r in rows if r["profile"] == prof) / G
        # where this profile's update pushes: the mean advantage of its rollouts that called each tool
        # (0 for groups left out). If these differ by profile while the tool shares do not, the
        # reward carries P's signal and the policy is not (yet) reading P.
        m.update({f"profile/{prof}/advantage/{tool}": v for tool, v in tool_advantages(
            [r for r in rows if r["profile"] == prof]).items()})
    m.update({f"reward/{k}": v for k, v in terms.items()})
    m["groups_kept"], m["groups_filtered"] = float(kept), len(rows) / G - kept
    m.update({k: float(v) for k, v in upd.items()})
    return m


def term_means(reward, groups, tasks, num_processes: int = 1) -> dict[str, float]:
    """Mean contribution of each term of `reward` (one that can `explain` itself; {} otherwise), over the
    trajectories of every process, each group under the P its task's prompt showed."""
    sums: dict[str, float] = Counter()
    for g, t in zip(groups, tasks):
        for name, values in reward_terms(reward, g, reward_preference(t, g)).items():
            values = np.asarray(values, dtype=float)
            sums[name] += float(values.sum())
            sums["_n/" + name] += float(values.size)
    if num_processes > 1:
        sums = sum_dicts(gather_dicts(dict(sums)))
    return {k: sums[k] / max(sums["_n/" + k], 1.0) for k in sums if not k.startswith("_n/")}


def gather_dicts(d: dict[str, float]) -> list[dict[str, float]]:
    """Every process's copy of `d` (a collective call: all processes must make it together)."""
    from accelerate.utils import gather_object

    return gather_object([d])


def sum_dicts(ds: list[dict[str, float]]) -> dict[str, float]:
    """Key-wise sums of `ds`."""
    total: Counter[str] = Counter()
    for d in ds:
        total.update(d)
    return dict(total)


def tool_advantages(rows: list[dict]) -> dict[str, float]:
    """tool → mean advantage of the rows whose trajectory called it at least once."""
    sums: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for r in rows:
        for tool, n in r["calls"].items():
            if n:
                sums[tool] += r["advantage"]
                counts[tool] += 1
    return {tool: sums[tool] / counts[tool] for tool in sorted(counts)}


def summaries(rows: list[dict]) -> dict[str, float]:
    """Means per rollout of `rows` (step_metrics' rows), and each tool's calls and share of calls."""
    if not rows:
        return {}
    n = len(rows)
    out = {"reward": sum(r["reward"] for r in rows) / n, "accuracy": sum(r["outcome"] for r in rows) / n,
           "cost_usd": sum(r["cost"] for r in rows) / n, "latency_s": sum(r["latency"] for r in rows) / n,
           "tokens": sum(r["tokens"] for r in rows) / n, "turns": sum(r["turns"] for r in rows) / n,
           "errors": sum(sum(r["errors"].values()) for r in rows) / n}
    calls: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for r in rows:
        calls.update(r["calls"])
        errors.update(r["errors"])
    total = sum(calls.values())
    for tool, c in sorted(calls.items()):
        out[f"calls/{tool}"] = c / n
        out[f"share/{tool}"] = c / total if total else 0.0
    for kind, c in sorted(errors.items()):
        out[f"errors/{kind}"] = c / n
    return out


def flat(d: dict, prefix: str = "") -> dict[str, Any]:
    """A nested config dump as one level of dotted keys with plain values (what trackers take)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v if isinstance(v, (int, float, str, bool)) else str(v)
    return out
