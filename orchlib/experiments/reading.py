"""The profile gradient cosine (`probes.profile_gradient_cosine`) in a world with tool configurations: each
task probed under its episode's configuration, the two backends' choice read at their aliases.

    cos = configured_profile_cosine(model, tok, env, tasks, config, ("generalist", "mixtral"))

Where names and positions vary per episode, the gradient of the choice between two backends is the
gradient between whatever aliases they wear in that episode; only P differs between the two passes.
"""

from __future__ import annotations

from typing import Sequence

from orchlib.configurations import episode_view
from orchlib.experiments.probes import profile_gradient_cosine
from orchlib.tasks import Preference, Task

__all__ = ["configured_profile_cosine"]


def configured_profile_cosine(model, tokenizer, env, tasks: Sequence[Task], config, backends: tuple[str, str],
                              profiles: tuple[str | Preference, str | Preference] = ("accuracy", "thrifty"),
                              episode: int = 0) -> list[float]:
    """Per task of `tasks` that offers both `backends` in its `episode`'s configuration (`env.configuration`;
    an environment without one: the task as it is): `profile_gradient_cosine` of the two backends' aliases
    under `profiles`. `config`: the RolloutConfig the prompt renders with
    (orchestra-read's: `tool_schema="brief"`)."""
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
