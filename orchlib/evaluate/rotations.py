"""A counterbalanced held-out test: every test task once under each rotation of its drawn tool list.

    tasks, configurations = rotated(env)      # env's test split, each task k times for k offered tools
    report = evaluate(policy, env, tasks=tasks, configurations=configurations)

A test episode's list order is drawn, so on a small test split the draw alone decides how often a tool
lands first: with 17 episodes a profile on an offer of three tools, a tool the policy prefers for what it
is may be first on 4 of them or on 8, and the first-listed share then mixes a preference for a backend with
one for a place. Rotated, each offered tool is shown first, second, ... exactly once per task (a Latin
square, not every permutation: k runs a task, not k!). A policy blind to the order then calls the
first-listed tool on exactly 1/k of a k-tool offer's calls, and a share above that is the order's pull;
the backend shares no longer depend on where the draw put each backend. Everything else the episode
shows (names, prices, P) is its drawn configuration's, unchanged.
"""

from __future__ import annotations

from typing import Callable, Sequence

from orchlib.configurations import Configuration
from orchlib.env import Environment
from orchlib.tasks import Task

__all__ = ["rotations", "rotated"]


def rotations(configuration: Configuration) -> list[Configuration]:
    """`configuration` under each rotation of its offered tools: the r-th starts at its r-th tool and
    wraps around (r = 0 is `configuration` itself)."""
    tools = configuration.tools
    return [configuration.model_copy(update={"tools": tools[r:] + tools[:r]}) for r in range(max(len(tools), 1))]


def rotated(env: Environment, tasks: Sequence[Task] | None = None, episode: int = 0
            ) -> tuple[list[Task], Callable[[Task], Configuration | None]]:
    """(tasks, configurations) for `orchlib.evaluate.evaluate`: each of `tasks` (default `env.test`) once per
    rotation of the list its `episode` draws (`env.configuration(task, episode)`, `rotations`), as a copy
    whose id ends in `#r` (`q7@thrifty#2`: the third rotation), and a function giving each copy its
    configuration. A task without a configuration (no space, or the identity one) stays once, as it is."""
    out: list[Task] = []
    shown: dict[str, Configuration | None] = {}
    for task in env.test if tasks is None else tasks:
        configuration = env.configuration(task, episode)
        if configuration is None:
            out.append(task)
            shown[task.id] = None
            continue
        for r, c in enumerate(rotations(configuration)):
            copy = task.model_copy(update={"id": f"{task.id}#{r}"})
            out.append(copy)
            shown[copy.id] = c
    if len(shown) != len(out):
        raise ValueError("rotated: two tasks share an id once rotated (a task id already ends in '#<n>'?)")

    def configuration_of(task: Task) -> Configuration | None:
        if task.id not in shown:
            raise KeyError(f"rotated: task {task.id!r} is not one of the rotated copies")
        return shown[task.id]

    return out, configuration_of
