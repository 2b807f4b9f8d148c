"""Probes of a policy's choice: how far P moves the first choice (`choice_gap`), and a training reward
scored against fixed-routing reference runs (`reference_runs`, `anchored_reward`). How much of an update
to the choice moves both profiles' choice alike is `orchlib.evaluate.gradients.profile_gradient_cosine`."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from orchlib.baselines import run_routes
from orchlib.evaluate.gradients import model_device, name_logprob
from orchlib.rollout import RolloutConfig
from orchlib.tasks import Preference, Task, under_profiles
from orchlib.trajectory import Trajectory

__all__ = ["choice_gap", "reference_runs", "anchored_reward"]


def choice_gap(model, tokenizer, tasks: Sequence[Task], toolbox, config: RolloutConfig, tool: str,
               profiles: tuple[str | Preference, str | Preference]) -> float:
    """How far P moves the choice, exactly: the mean over `tasks` offering `tool` of
    p(first call names `tool` | profiles[0]) - p(same | profiles[1]), in percentage points, each
    probability from one forward pass over the prompt and the call's opening (no sampling noise).
    0 means the policy is blind to P at the moment it chooses. A local (transformers) policy only."""
    import torch  # only the weight probes need torch

    gaps, device = [], model_device(model)
    for task in (t for t in tasks if t.tools is None or tool in t.tools):
        with torch.no_grad():
            p = [float(name_logprob(model, tokenizer, shown, toolbox, config, tool, device).exp())
                 for shown in under_profiles([task], profiles)]
        gaps.append(p[0] - p[1])
    return 100 * sum(gaps) / len(gaps) if gaps else float("nan")


def reference_runs(tasks: Sequence[Task], toolbox, tokenizer, config) -> dict[str, list[Trajectory]]:
    """task id -> one fixed-routing run of each of its routes (`orchlib.baselines.run_routes`, no policy
    involved), under the task's own P: the anchors of `anchored_reward`."""
    return {tid: list(by_label.values()) for tid, by_label in run_routes(tasks, toolbox, tokenizer, config).items()}


def anchored_reward(groups: Sequence[Sequence[Trajectory]], references: Mapping[str, list[Trajectory]],
                    reward, key=lambda t: t.task_id) -> float:
    """A training curve that can rise: the mean reward of the groups' rollouts, each group scored together
    with its task's reference runs (found by `key(first rollout)`) under the P the rollouts were shown.

    A group-normalised reward (ToolOrchestra's min-max within a group) scores a group whose rollouts
    agree 0 whatever they chose, so the in-group reward falls as a policy settles even when it
    improves; the references fix each term's range, so this number moves only with what the policy did."""
    values: list[float] = []
    for group in groups:
        group = list(group)
        P = Preference.model_validate(group[0].preference)
        scored = np.asarray(reward(group + list(references[key(group[0])]), P=P), dtype=float)
        values += scored[:len(group)].tolist()
    return float(np.mean(values)) if values else float("nan")
