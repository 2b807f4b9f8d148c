"""A learning curve that can rise: each GRPO step's rollouts scored against fixed reference runs.

The ToolOrchestra reward min-max normalises every term within a task's group, so a group whose
rollouts agree scores 0 whatever they chose: as the policy settles, its training reward falls even
when it improves. Here each group is scored together with one fixed-routing run of every route of
its task (the calculator, the generalist, Mixtral: no policy involved), and only the rollouts' own
rewards are kept. The references fix each term's range, so the number moves only with what the
policy did. Duplicating a group member changes no minimum or maximum, which the tests use.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import numpy as np

from orchlib.tasks import Preference, Task
from orchlib.trajectory import Trajectory

__all__ = ["reference_runs", "anchored_reward"]


def reference_runs(tasks: Sequence[Task], toolbox, tokenizer, config) -> dict[str, list[Trajectory]]:
    """task id → one run of each of its routes (`orchlib.baselines.routes`), under the task's own P."""
    from orchlib.baselines import RouteEngine, routes
    from orchlib.rollout import rollout

    tasks = list(tasks)
    task_routes = {t.id: routes(t, toolbox.cards) for t in tasks}
    out: dict[str, list[Trajectory]] = defaultdict(list)
    for r in range(max((len(v) for v in task_routes.values()), default=0)):
        batch = [t for t in tasks if len(task_routes[t.id]) > r]
        plan = {t.id: list(task_routes[t.id])[r] for t in batch}
        engine = RouteEngine(tokenizer, batch, plan, task_routes, name=f"reference#{r}")
        for t, traj in zip(batch, rollout(batch, toolbox, engine, config, seed=0)):
            out[t.id].append(traj)
    return dict(out)


def anchored_reward(groups: Sequence[Sequence[Trajectory]], references: dict[str, list[Trajectory]],
                    reward, key=lambda t: t.task_id) -> float:
    """Mean reward of the groups' rollouts, each group scored with its task's references (found by
    `key(first rollout)`) under the P the rollouts were shown."""
    values: list[float] = []
    for group in groups:
        group = list(group)
        P = Preference.model_validate(group[0].preference)
        scored = np.asarray(reward(group + list(references[key(group[0])]), P=P), dtype=float)
        values += scored[:len(group)].tolist()
    return float(np.mean(values)) if values else float("nan")
