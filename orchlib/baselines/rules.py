"""The four baselines' rules (strongest, cheapest, random, oracle): which route each picks per task,
and `make_baselines`, their engines."""

from __future__ import annotations

import math
import random
from typing import Mapping, Sequence

from orchlib.baselines.routing import RouteEngine, routes
from orchlib.baselines.tokenize_memo import TokenizeMemo
from orchlib.baselines.trials import RouteResult, Trials, route_stats, try_routes, warn_cut_short
from orchlib.rollout import RolloutConfig
from orchlib.tasks import Task

__all__ = ["BASELINES", "choose", "make_baselines"]

BASELINES: tuple[str, ...] = ("strongest", "cheapest", "random", "oracle")


def choose(name: str, task: Task, labels: Sequence[str], stats: Mapping[str, Mapping[str, Mapping[str, float]]],
           trial: Mapping[str, RouteResult] | None = None, seed: int = 0) -> str:
    """The label baseline `name` picks for `task` among `labels` (see `orchlib.baselines`)."""
    labels = sorted(labels)
    if not labels:
        raise ValueError(f"task {task.id} has no route (no golden calls and no final model tool offered)")
    cat = stats.get(task.category, {})
    unknown = {"accuracy": -math.inf, "cost_usd": math.inf}

    def s(label: str) -> Mapping[str, float]:
        return cat.get(label, unknown)

    if name == "strongest":
        return min(labels, key=lambda x: (-s(x)["accuracy"], s(x)["cost_usd"], x))
    if name == "cheapest":
        return min(labels, key=lambda x: (s(x)["cost_usd"], -s(x)["accuracy"], x))
    if name == "random":
        return random.Random(f"{seed}:{task.id}").choice(labels)
    if name == "oracle":
        if trial is None:
            raise ValueError("the oracle needs the trial of every route on this task")
        best = max(trial[x].outcome for x in labels)
        return min((x for x in labels if trial[x].outcome == best),
                   key=lambda x: (trial[x].cost_usd, trial[x].latency_s, x))
    raise KeyError(f"unknown baseline {name!r}; known: {BASELINES}")


def make_baselines(tasks: Sequence[Task], toolbox, tokenizer, names: Sequence[str] = BASELINES,
                   calibration: Sequence[Task] | Trials | None = None, trials: Trials | None = None,
                   config: RolloutConfig | None = None, seed: int = 0) -> dict[str, RouteEngine]:
    """Baseline engines for `tasks`. `strongest`/`cheapest` rank routes on `calibration` (tasks, or
    their Trials; default: `tasks` themselves); the oracle runs every route on `tasks` (`trials`). Runs
    the rollout's limits cut short, in trials run here or given, are warned about with their tasks."""
    tasks = list(tasks)
    for given, what in ((trials, "trials"), (calibration, "calibration")):
        if isinstance(given, Trials):
            warn_cut_short(given, f"make_baselines ({what} given)", config)
    need_own = "oracle" in names or calibration is None
    own = trials or (try_routes(tasks, toolbox, tokenizer, config) if need_own else None)
    if isinstance(calibration, Trials):
        cal = calibration
    elif calibration is not None:
        cal = try_routes(calibration, toolbox, tokenizer, config)
    else:
        cal = own
    stats = route_stats(cal) if cal is not None else {}
    task_routes = own.routes if own is not None else {t.id: routes(t, toolbox.cards) for t in tasks}
    # The engines share one memo (the trials' when they ran these tasks): every baseline renders the
    # same prompts as the routes did.
    memo = own.tokenizer if own is not None and own.tokenizer is not None and tokenizer in (
        own.tokenizer, own.tokenizer.tokenizer) else TokenizeMemo.of(tokenizer)
    out = {}
    for name in names:
        plan = {t.id: choose(name, t, list(task_routes[t.id]), stats,
                             own.results[t.id] if own is not None else None, seed) for t in tasks}
        out[name] = RouteEngine(memo, tasks, plan, task_routes, name=name, config=config)
    return out
