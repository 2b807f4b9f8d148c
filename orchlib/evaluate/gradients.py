"""How much of an update to a policy's choice moves the choice under every P alike: the profile gradient
cosine, with and without tool configurations.

    cos = profile_gradient_cosine(model, tok, tasks, toolbox, config, ("generalist", "mixtral"),
                                  ("accuracy", "thrifty"))
    cos = configured_profile_cosine(model, tok, env, tasks, config, ("generalist", "mixtral"))

A local (transformers) policy only: each number is a forward and backward pass, no sampling.
"""

from __future__ import annotations

from typing import Sequence

from orchlib.chat import CALL_OPENING
from orchlib.configurations import episode_view
from orchlib.prompting import render_prompt, tool_schemas
from orchlib.tasks import Preference, Task, under_profiles

__all__ = ["profile_gradient_cosine", "configured_profile_cosine", "name_logprob", "model_device"]


def profile_gradient_cosine(model, tokenizer, tasks: Sequence[Task], toolbox, config,
                            tools: tuple[str, str], profiles: tuple[str | Preference, str | Preference]) -> list[float]:
    """Per task offering both `tools`: the cosine between the gradients, over the model's trainable
    weights, of log p(first call names tools[0]) - log p(it names tools[1]) under profiles[0] and under
    profiles[1] (one forward and backward pass each; no sampling, the weights and their .grad untouched).

    It says how much of an update to the choice under one profile moves the choice under the other as
    well. Near 1, nearly every policy-gradient step moves both profiles' choice together, and only the
    1 - cos part of it can make the choice follow P: the reward's P-blind part is then learned long
    before its P-dependent part. 1 exactly when P is not shown. `config`: the RolloutConfig the prompt
    renders with."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    device, was_training, out = model_device(model), model.training, []
    zero = torch.zeros((), dtype=torch.float64)
    model.eval()  # dropout would make the two passes differ by its draw, not by P
    try:
        for task in (t for t in tasks if t.tools is None or set(tools) <= set(t.tools)):
            grads = []
            for shown in under_profiles([task], profiles):
                margin = (name_logprob(model, tokenizer, shown, toolbox, config, tools[0], device)
                          - name_logprob(model, tokenizer, shown, toolbox, config, tools[1], device))
                grads.append(torch.autograd.grad(margin, params, allow_unused=True))
            dot = na = nb = 0.0
            for a, b in zip(*grads):  # float64 sums: a 135 M-entry dot product in float32 drifts past 1
                a, b = (zero if g is None else g.double() for g in (a, b))  # None: a weight the choice skips
                dot, na, nb = dot + float((a * b).sum()), na + float((a * a).sum()), nb + float((b * b).sum())
            out.append(dot / (na * nb) ** 0.5 if na > 0 and nb > 0 else float("nan"))
    finally:
        model.train(was_training)
    return out


def configured_profile_cosine(model, tokenizer, env, tasks: Sequence[Task], config, backends: tuple[str, str],
                              profiles: tuple[str | Preference, str | Preference] = ("accuracy", "thrifty"),
                              episode: int = 0) -> list[float]:
    """`profile_gradient_cosine` in a world with tool configurations: per task of `tasks` that offers both
    `backends` in its `episode`'s configuration (`env.configuration`; an environment without one: the task
    as it is), the cosine of the choice between the aliases the two backends wear there. Only P differs
    between the two passes; names, order and prices are the episode's."""
    out: list[float] = []
    for task in tasks:
        c = env.configuration(task, episode)
        if c is None:
            out += profile_gradient_cosine(model, tokenizer, [task], env.tools, config, backends, profiles)
            continue
        view = episode_view(c, task, env.tools)
        alias = {t.backend: t.alias for t in view.configuration.tools}
        if all(b in alias for b in backends):
            out += profile_gradient_cosine(model, tokenizer, [view.task], view.toolbox, config,
                                           (alias[backends[0]], alias[backends[1]]), profiles)
    return out


def model_device(model):
    """Where the weights are: on a GPU machine, training left the model there."""
    import torch

    return next((p.device for p in model.parameters()), torch.device("cpu"))


def name_logprob(model, tokenizer, task: Task, toolbox, config, tool: str, device):
    """log p(the first call names `tool`) for `task`'s first prompt: the name's ids after the call's opening."""
    import torch

    head = render_prompt(task, tool_schemas(toolbox, task, config.tool_schema), tokenizer, config) + CALL_OPENING
    ids = tokenizer.encode(head + tool, add_special_tokens=False)
    n = len(tokenizer.encode(head, add_special_tokens=False))
    logp = torch.log_softmax(model(torch.tensor([ids], device=device)).logits[0].float(), -1)
    return sum(logp[i - 1, ids[i]] for i in range(n, len(ids)))
