"""The numbers of a set of trajectories (accuracy, cost, latency, calls per tool, errors, how episodes
ended), overall, per category and per preference profile; `TrajectoryFigures` is all they read of each."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from orchlib.evaluate.by_configuration import configuration_groups
from orchlib.trajectory import Trajectory

__all__ = ["TrajectoryFigures", "summarize", "compute_metrics"]


def summarize(trajectories: Sequence[Trajectory | TrajectoryFigures], rewards: Sequence[float] | None = None
              ) -> dict[str, Any]:
    """The numbers of one set of trajectories, or of their TrajectoryFigures (means are per trajectory)."""
    n = len(trajectories)
    if n == 0:
        return {"n": 0}
    calls: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    by_tool: Counter[str] = Counter()
    finish: Counter[str] = Counter()
    for t in trajectories:
        calls.update(t.calls)
        kinds.update(t.errors)
        finish[t.finish_reason or "unfinished"] += 1
        by_tool.update(_error_tools(t))
    total_calls = sum(calls.values())
    n_err = sum(kinds.values())
    out: dict[str, Any] = {
        "n": n,
        "accuracy": float(np.mean([t.outcome for t in trajectories])),
        "cost_usd": float(np.mean([t.cost_usd for t in trajectories])),
        "latency_s": float(np.mean([t.latency_s for t in trajectories])),
        "turns": float(np.mean([t.num_turns for t in trajectories])),
        "calls_per_task": total_calls / n,
        "calls": {tool: {"count": c, "mean": c / n, "share": c / total_calls} for tool, c in sorted(calls.items())},
        "errors": {"total": n_err, "per_task": n_err / n,
                   "tasks_with_errors": sum(1 for t in trajectories if t.errors) / n,
                   "by_kind": dict(sorted(kinds.items())), "by_tool": dict(sorted(by_tool.items()))},
        "finish": dict(sorted(finish.items())),
        "reward": None,
    }
    if rewards is not None:
        if len(rewards) != n:
            raise ValueError(f"{len(rewards)} rewards for {n} trajectories")
        out["reward"] = float(np.mean(rewards))
    return out


def _error_tools(t: Trajectory | TrajectoryFigures) -> tuple[str, ...]:
    """The tool of each error observation, in order ("(policy)": rejected before a tool was found)."""
    if isinstance(t, TrajectoryFigures):
        return t.error_tools
    # by backend where the tool wore an episode's alias, as Trajectory.calls counts them
    return tuple(obs.meta.get("backend") or obs.tool or "(policy)" for turn in t.turns for obs in turn.observations
                 if obs.error_kind)


def _profile(t: Trajectory | TrajectoryFigures) -> str:
    return str(t.preference.get("name") or "default")


@dataclass(frozen=True)
class TrajectoryFigures:
    """What the metrics read of one trajectory: all `evaluate` keeps of it when the trajectories are
    written to a file as they come (`trajectories_to`). `summarize` and `compute_metrics` take these
    or trajectories alike."""

    task_id: str
    category: str
    preference: dict[str, Any]
    outcome: float
    cost_usd: float
    latency_s: float
    num_turns: int
    calls: dict[str, int]
    errors: dict[str, int]
    finish_reason: str
    error_tools: tuple[str, ...]
    configuration: Any = None  # the episode's tool configuration, if it had one

    @classmethod
    def of(cls, t: Trajectory) -> TrajectoryFigures:
        return cls(t.task_id, t.category, t.preference, t.outcome, t.cost_usd, t.latency_s, t.num_turns,
                   t.calls, t.errors, t.finish_reason, _error_tools(t), t.configuration)


def compute_metrics(trajectories: Sequence[Trajectory | TrajectoryFigures], rewards: Sequence[float] | None = None
                    ) -> dict[str, Any]:
    """`summarize` overall, per category and per preference profile; where episodes ran under tool
    configurations, also per configuration feature (`by_configuration`: space, held-out, price band,
    backend offered; orchlib.evaluate.by_configuration)."""
    groups: dict[str, dict[str, list[int]]] = {"by_category": defaultdict(list), "by_profile": defaultdict(list)}
    for i, t in enumerate(trajectories):
        groups["by_category"][t.category or "general"].append(i)
        groups["by_profile"][_profile(t)].append(i)

    def part(idx: list[int]) -> dict[str, Any]:
        return summarize([trajectories[i] for i in idx], None if rewards is None else [rewards[i] for i in idx])

    out: dict[str, Any] = {"overall": summarize(trajectories, rewards)}
    for key, by in groups.items():
        out[key] = {name: part(idx) for name, idx in sorted(by.items())}
    features = configuration_groups(trajectories)
    if features:
        out["by_configuration"] = {f: {v: part(idx) for v, idx in by.items()} for f, by in features.items()}
    return out
