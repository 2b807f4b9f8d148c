"""Every route of every task run once through the rollout, in batches: all trajectories
(`run_routes`) or only each run's outcome, cost and latency (`try_routes`), and their means (`route_stats`)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from orchlib.baselines.gc_pause import paused_batches
from orchlib.baselines.routing import EVAL_ROLLOUT, RouteEngine, routes
from orchlib.baselines.tokenize_memo import TokenizeMemo
from orchlib.env import Environment
from orchlib.rollout import RolloutConfig, rollout
from orchlib.tasks import Task
from orchlib.trajectory import ToolCall, Trajectory

__all__ = ["ROUTE_BATCH", "CUT_SHORT", "RouteResult", "Trials", "run_routes", "try_routes", "route_stats",
           "warn_cut_short"]

# Tasks per rollout when routes are tried: few enough that a batch's trajectories (each holds its
# prompt's ids three times over) stay small for the garbage collector, many enough to batch the engine.
ROUTE_BATCH = 128


# How a run ends when the rollout's limits, not the route, stopped it: its outcome (0) and cost (what was
# spent before the cut, often $0) are not the route's, and a baseline ranked on them would be wrong.
CUT_SHORT = ("token_budget", "length")


@dataclass(frozen=True)
class RouteResult:
    outcome: float
    cost_usd: float
    latency_s: float
    finish_reason: str = ""  # the trajectory's; in CUT_SHORT: the route did not run as planned

    @property
    def cut_short(self) -> bool:
        return self.finish_reason in CUT_SHORT


@dataclass
class Trials:
    """Every route of every task, run once: `results[task_id][label]`. `tokenizer` is the TokenizeMemo
    the routes ran with; baselines built on these trials reuse its rendered prompts."""

    tasks: list[Task]
    routes: dict[str, dict[str, list[ToolCall]]]
    results: dict[str, dict[str, RouteResult]]
    tokenizer: Any = field(default=None, repr=False)

    def cut_short(self) -> dict[str, dict[str, str]]:
        """task id → route label → finish reason, of every run the rollout's limits cut short."""
        out: dict[str, dict[str, str]] = {}
        for task_id, by_label in self.results.items():
            for label, res in by_label.items():
                if res.cut_short:
                    out.setdefault(task_id, {})[label] = res.finish_reason
        return out


def warn_cut_short(trials: Trials, who: str, config: RolloutConfig | None = None, stacklevel: int = 3) -> int:
    """Warn, with a count and the tasks named, when runs of `trials` were cut short by the rollout's
    limits (each is scored as it ended: an outcome of 0 and the cost spent before the cut); the count."""
    cut = trials.cut_short()
    n = sum(len(v) for v in cut.values())
    if n:
        config = config or EVAL_ROLLOUT
        reasons: dict[str, int] = {}
        for by_label in cut.values():
            for reason in by_label.values():
                reasons[reason] = reasons.get(reason, 0) + 1
        limits = {"token_budget": f"the token budget (max_total_tokens={config.max_total_tokens})",
                  "length": f"max_new_tokens={config.max_new_tokens}"}
        why = ", ".join(f"{k} on {limits[r]}" for r, k in sorted(reasons.items()))
        shown = "; ".join(f"{t}: {', '.join(sorted(v))}" for t, v in sorted(cut.items())[:10])
        more = f"; … and {len(cut) - 10} more task(s)" if len(cut) > 10 else ""
        total = sum(len(v) for v in trials.results.values())
        warnings.warn(f"{who}: {n} of {total} route runs were cut short by the rollout's limits ({why}) and are "
                      f"scored as they ended (outcome 0, only the cost spent before the cut) — task: route(s) "
                      f"{shown}{more}; raise the limits or shorten the prompt", stacklevel=stacklevel)
    return n


def _route_batches(tasks: list[Task], toolbox, tokenizer, config: RolloutConfig | None, seed: int | None,
                   task_routes: Mapping[str, Mapping[str, list[ToolCall]]],
                   ) -> Iterator[tuple[list[Task], dict[str, str], list[Trajectory]]]:
    """(tasks, task id → label, trajectories) of the r-th route of every task, in batches of at most
    ROUTE_BATCH tasks, so a caller can keep what it needs of a batch and let its trajectories go (a route
    is written, not sampled: how tasks are batched changes nothing in a trajectory)."""
    tokenizer = TokenizeMemo.of(tokenizer)  # the prompt of a task is the same on every route
    depth = max((len(r) for r in task_routes.values()), default=0)
    for r in range(depth):
        tasks_r = [t for t in tasks if len(task_routes[t.id]) > r]
        for start in range(0, len(tasks_r), ROUTE_BATCH):
            # Nothing of a batch stays in this frame: its trajectories go as soon as the caller drops them.
            yield _route_batch(tasks_r[start:start + ROUTE_BATCH], r, toolbox, tokenizer, config, seed, task_routes)


def _route_batch(batch: list[Task], r: int, toolbox, tokenizer, config: RolloutConfig | None, seed: int | None,
                 task_routes: Mapping[str, Mapping[str, list[ToolCall]]],
                 ) -> tuple[list[Task], dict[str, str], list[Trajectory]]:
    plan = {t.id: list(task_routes[t.id])[r] for t in batch}
    engine = RouteEngine(tokenizer, batch, plan, task_routes, name=f"route#{r}", config=config)
    return batch, plan, rollout(Environment(train=batch, tools=toolbox), engine, config=config or EVAL_ROLLOUT,
                                   seed=seed)


def run_routes(tasks: Sequence[Task], toolbox, tokenizer, config: RolloutConfig | None = None,
               seed: int | None = 0, task_routes: Mapping[str, Mapping[str, list[ToolCall]]] | None = None,
               ) -> dict[str, dict[str, Trajectory]]:
    """task id → route label → its trajectory: every route of every task (`task_routes`, default
    `routes(task, toolbox.cards)`) run once through the rollout, the r-th route of all tasks in one batch.
    Every trajectory is kept: for many tasks and routes, `try_routes` keeps only their results."""
    tasks = list(tasks)
    if task_routes is None:
        task_routes = {t.id: routes(t, toolbox.cards) for t in tasks}
    runs: dict[str, dict[str, Trajectory]] = {t.id: {} for t in tasks}
    for batch, plan, trajectories in _route_batches(tasks, toolbox, tokenizer, config, seed, task_routes):
        for t, traj in zip(batch, trajectories):
            runs[t.id][plan[t.id]] = traj
    return runs


def try_routes(tasks: Sequence[Task], toolbox, tokenizer, config: RolloutConfig | None = None,
               seed: int | None = 0) -> Trials:
    """Run every route of every task once and keep each run's outcome, cost and latency (the
    trajectories of one route at a time are held, then let go). Runs the rollout's limits cut short
    are warned about, tasks named (`Trials.cut_short()` lists them)."""
    tasks = list(tasks)
    task_routes = {t.id: routes(t, toolbox.cards) for t in tasks}
    memo = TokenizeMemo.of(tokenizer)
    results: dict[str, dict[str, RouteResult]] = {t.id: {} for t in tasks}
    for batch, plan, trajectories in paused_batches(_route_batches(tasks, toolbox, memo, config, seed,
                                                                    task_routes)):
        for t, tr in zip(batch, trajectories):
            results[t.id][plan[t.id]] = RouteResult(tr.outcome, tr.cost_usd, tr.latency_s, tr.finish_reason)
        tr = trajectories = None  # the batch goes before the collector runs again
    trials = Trials(tasks, task_routes, results, memo)
    warn_cut_short(trials, "try_routes", config)
    return trials


def route_stats(trials: Trials) -> dict[str, dict[str, dict[str, float]]]:
    """category → label → mean accuracy, cost and latency over the tasks that offer the route, and
    `cut_short`: how many of those runs the rollout's limits cut short (scored as they ended)."""
    acc: dict[tuple[str, str], list[RouteResult]] = {}
    for t in trials.tasks:
        for label, res in trials.results[t.id].items():
            acc.setdefault((t.category, label), []).append(res)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for (cat, label), rs in sorted(acc.items()):
        out.setdefault(cat, {})[label] = {"n": len(rs), "accuracy": float(np.mean([r.outcome for r in rs])),
                                          "cost_usd": float(np.mean([r.cost_usd for r in rs])),
                                          "latency_s": float(np.mean([r.latency_s for r in rs])),
                                          "cut_short": sum(r.cut_short for r in rs)}
    return out
