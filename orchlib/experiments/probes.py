"""Probes of a policy's choice: how far P moves the first choice (`choice_gap`), how much of an update
to it moves both profiles' choice alike (`profile_gradient_cosine`), and a training reward scored against
fixed-routing reference runs (`reference_runs`, `anchored_reward`)."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from orchlib.baselines import run_routes
from orchlib.chat import CALL_OPENING
from orchlib.prompting import render_prompt, tool_schemas
from orchlib.rollout import RolloutConfig
from orchlib.tasks import Preference, Task, under_profiles
from orchlib.trajectory import Trajectory

__all__ = ["choice_gap", "profile_gradient_cosine", "reference_runs", "anchored_reward"]


def choice_gap(model, tokenizer, tasks: Sequence[Task], toolbox, config: RolloutConfig, tool: str,
               profiles: tuple[str | Preference, str | Preference]) -> float:
    """How far P moves the choice, exactly: the mean over `tasks` offering `tool` of
    p(first call names `tool` | profiles[0]) - p(same | profiles[1]), in percentage points, each
    probability from one forward pass over the prompt and the call's opening (no sampling noise).
    0 means the policy is blind to P at the moment it chooses. A local (transformers) policy only."""
    import torch  # only the weight probes need torch

    gaps, device = [], _device(model)
    for task in (t for t in tasks if t.tools is None or tool in t.tools):
        with torch.no_grad():
            p = [float(_name_logprob(model, tokenizer, shown, toolbox, config, tool, device).exp())
                 for shown in under_profiles([task], profiles)]
        gaps.append(p[0] - p[1])
    return 100 * sum(gaps) / len(gaps) if gaps else float("nan")


def profile_gradient_cosine(model, tokenizer, tasks: Sequence[Task], toolbox, config: RolloutConfig,
                            tools: tuple[str, str], profiles: tuple[str | Preference, str | Preference]) -> list[float]:
    """Per task offering both `tools`: the cosine between the gradients, over the model's trainable
    weights, of log p(first call names tools[0]) - log p(it names tools[1]) under profiles[0] and under
    profiles[1] (one forward and backward pass each; no sampling, the weights and their .grad untouched).

    It says how much of an update to the choice under one profile moves the choice under the other as
    well. Near 1, nearly every policy-gradient step moves both profiles' choice together, and only the
    1 - cos part of it can make the choice follow P: the reward's P-blind part is then learned long
    before its P-dependent part. 1 exactly when P is not shown. A local (transformers) policy only."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    device, was_training, out = _device(model), model.training, []
    zero = torch.zeros((), dtype=torch.float64)
    model.eval()  # dropout would make the two passes differ by its draw, not by P
    try:
        for task in (t for t in tasks if t.tools is None or set(tools) <= set(t.tools)):
            grads = []
            for shown in under_profiles([task], profiles):
                margin = (_name_logprob(model, tokenizer, shown, toolbox, config, tools[0], device)
                          - _name_logprob(model, tokenizer, shown, toolbox, config, tools[1], device))
                grads.append(torch.autograd.grad(margin, params, allow_unused=True))
            dot = na = nb = 0.0
            for a, b in zip(*grads):  # float64 sums: a 135 M-entry dot product in float32 drifts past 1
                a, b = (zero if g is None else g.double() for g in (a, b))  # None: a weight the choice skips
                dot, na, nb = dot + float((a * b).sum()), na + float((a * a).sum()), nb + float((b * b).sum())
            out.append(dot / (na * nb) ** 0.5 if na > 0 and nb > 0 else float("nan"))
    finally:
        model.train(was_training)
    return out


def _device(model):
    import torch

    # where the weights are: on a GPU machine, training left the model there
    return next((p.device for p in model.parameters()), torch.device("cpu"))


def _name_logprob(model, tokenizer, task: Task, toolbox, config: RolloutConfig, tool: str, device):
    """log p(the first call names `tool`) for `task`'s first prompt: the name's ids after the call's opening."""
    import torch

    head = render_prompt(task, tool_schemas(toolbox, task, config.tool_schema), tokenizer, config) + CALL_OPENING
    ids = tokenizer.encode(head + tool, add_special_tokens=False)
    n = len(tokenizer.encode(head, add_special_tokens=False))
    logp = torch.log_softmax(model(torch.tensor([ids], device=device)).logits[0].float(), -1)
    return sum(logp[i - 1, ids[i]] for i in range(n, len(ids)))


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
