"""A learning curve that can rise: each GRPO step's rollouts scored against fixed reference runs.

The ToolOrchestra reward min-max normalises every term within a task's group, so a group whose
rollouts agree scores 0 whatever they chose: as the policy settles, its training reward falls even
when it improves. Here each group is scored together with one fixed-routing run of every route of
its task (the calculator, the generalist, Mixtral: no policy involved), and only the rollouts' own
rewards are kept. The references fix each term's range, so the number moves only with what the
policy did. Duplicating a group member changes no minimum or maximum, which the tests use.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from orchlib.tasks import Preference, Task
from orchlib.trajectory import Trajectory

__all__ = ["reference_runs", "anchored_reward"]


def reference_runs(tasks: Sequence[Task], toolbox, tokenizer, config) -> dict[str, list[Trajectory]]:
    """task id → one run of each of its routes (`orchlib.baselines.run_routes`), under the task's own P."""
    from orchlib.baselines import run_routes

    return {tid: list(by_label.values()) for tid, by_label in run_routes(tasks, toolbox, tokenizer, config).items()}


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
