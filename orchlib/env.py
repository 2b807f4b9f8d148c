"""The Environment: one task world — train and test tasks, the toolbox, the reward, the users its tasks
carry — the one object `rollout`, `evaluate`, `Trainer` and `run_training` take.

    env = Environment(train=tasks, test=held_out, tools=[lookup, answer], reward="rewards/toolorchestra.yaml")
    trajectories = rollout(env, engine, group_size=4)     # env.train (tasks= for others)
    report = evaluate(engine, env)                        # env.test
    trainer = Trainer("tiny", env, GRPOConfig())

An environment is verifiers' triple (a dataset, a rollout protocol, a rubric) with orchlib's one
rollout loop as the protocol: what differs between worlds is data — tasks (each with its checker, its
P, its database factory and its user), tools and reward — so an environment holds data and no loop.

How a task becomes the policy's prompt (the system prompt, the tool-schema style, whether, how and
where P is shown) is the run's: `RolloutConfig`, rendered by `orchlib.prompting`. A world holds data;
the settings of how it is read live in one place.

This module sits below the loop (`orchlib.rollout` imports it, not the other way round).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Iterable, Protocol, Sequence, runtime_checkable

from orchlib.cards import ToolCard
from orchlib.configurations import bind_spaces, for_task
from orchlib.tasks import Task, UserSpec
from orchlib.tools import FunctionTool, Tool, Toolbox, build_tool

__all__ = ["Environment", "RewardFunction", "as_reward", "as_toolbox", "reward_terms"]


@runtime_checkable
class RewardFunction(Protocol):
    """What training and evaluation accept as a reward: one value per rollout of one task's group,
    under the P that task's prompt showed. The DSL's `orchlib.reward.Reward` is one; so is any plain
    function `fn(group, P=None) -> array of shape (G,)`. `explain(group, P=...)` is optional: where a
    reward has it (the DSL's does), training also logs each term's mean contribution."""

    def __call__(self, group: Sequence[Any], P: Any = None) -> Any: ...


def as_reward(reward: RewardFunction | str | os.PathLike) -> RewardFunction:
    """A reward as given (any callable), or a reward file loaded by path (`orchlib.reward.Reward.load`)."""
    if isinstance(reward, (str, os.PathLike)):
        from orchlib.reward import Reward  # sympy loads only when a file is named

        return Reward.load(reward)
    if not callable(reward):
        raise TypeError(f"a reward is a reward file's path or a callable `fn(group, P=None) -> values`, not "
                        f"{type(reward).__name__}")
    return reward


def reward_terms(reward: RewardFunction, group: Sequence[Any], P: Any) -> dict[str, Any]:
    """term name → contribution per rollout, for a reward that can `explain` itself; {} otherwise."""
    explain = getattr(reward, "explain", None)
    return dict(explain(group, P=P).contributions) if callable(explain) else {}


def as_toolbox(tools: Toolbox | str | os.PathLike | Iterable[ToolCard | Tool | Callable[..., Any]]) -> Toolbox:
    """A Toolbox as given; a folder or file of tool cards, loaded; or a list of cards, tools and typed,
    documented functions (each function's card derived from its signature and docstring)."""
    if isinstance(tools, Toolbox):
        return tools
    if isinstance(tools, (str, os.PathLike)):
        return Toolbox.load(tools)
    built: list[Tool] = []
    for i, t in enumerate(tools):
        if isinstance(t, Tool):
            built.append(t)
        elif isinstance(t, ToolCard):
            built.append(build_tool(t))
        elif callable(t):
            built.append(FunctionTool.from_function(t))
        else:
            raise TypeError(f"tools[{i}]: a ToolCard, a Tool or a function, not {type(t).__name__}")
    return Toolbox(built)


def _tasks(tasks: Iterable[Task], split: str, name: str) -> tuple[Task, ...]:
    if isinstance(tasks, (str, bytes)) or not isinstance(tasks, Iterable):
        raise TypeError(f"environment {name!r}: {split} is a list of Tasks, not {type(tasks).__name__}")
    out = tuple(tasks)
    for i, t in enumerate(out):
        if not isinstance(t, Task):
            raise TypeError(f"environment {name!r}: {split}[{i}] is a {type(t).__name__}, not a Task")
    return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class Environment:
    """A task world. `train`/`test`: the splits (one may be empty); `tools`: a Toolbox, a folder of
    cards, or a list of cards, tools and functions; `reward`: a reward file's path or any
    `RewardFunction` (None: rollouts and evaluations without a reward; training needs one); `name`: for
    reports; `configurations` / `test_configurations`: ConfigurationSpaces (orchlib.configurations) each
    episode's offered tools, aliases, prices and P are drawn from (train tasks / test tasks).
    Frozen: `env.replace(reward=...)` gives a changed copy."""

    train: Sequence[Task] = ()
    test: Sequence[Task] = ()
    tools: Any = ()
    reward: Any = None
    name: str = "custom"
    # per-episode tool configurations (orchlib.configurations): drawn for train tasks (and test ones without
    # a test space), and for test tasks; None: the tools as they are
    configurations: Any = None
    test_configurations: Any = None

    def __post_init__(self) -> None:
        name = self.name
        set_ = lambda field, value: object.__setattr__(self, field, value)  # noqa: E731  (frozen)
        set_("train", _tasks(self.train, "train", name))
        set_("test", _tasks(self.test, "test", name))
        if not self.train and not self.test:
            raise ValueError(f"environment {name!r} has no tasks: give train= or test=")
        set_("tools", as_toolbox(self.tools))
        if self.reward is not None:
            set_("reward", as_reward(self.reward))
        spaces = bind_spaces(self.configurations, self.test_configurations, self.tools, name)
        set_("configurations", spaces[0])
        set_("test_configurations", spaces[1])
        set_("_test_ids", frozenset(t.id for t in self.test))

    @property
    def tasks(self) -> tuple[Task, ...]:
        """Every task, train then test."""
        return tuple(self.train) + tuple(self.test)

    @property
    def users(self) -> dict[str, UserSpec | str | Callable[[Any], Any]]:
        """task id → the user who answers that task's turns without calls (tasks without one left out)."""
        return {t.id: t.user for t in self.tasks if t.user is not None}

    def configuration_space(self, task: Task):
        """The ConfigurationSpace `task`'s episodes draw from: the test space for a test task (when there is
        one), else the training space; None: the tools as they are."""
        if self.test_configurations is not None and task.id in self._test_ids:  # type: ignore[attr-defined]
            return self.test_configurations
        return self.configurations

    def configuration(self, task: Task, episode: int = 0):
        """The Configuration `task`'s `episode` runs under (None without a space): `draw(space, space.seed,
        task.id, episode)`, less the tools the task does not offer (`for_task`)."""
        space = self.configuration_space(task)
        return None if space is None or space.identity else for_task(space.configuration(task.id, episode), task)

    def replace(self, **changes: Any) -> Environment:
        """A copy with `changes` (checked as a new environment is)."""
        return dataclasses.replace(self, **changes)

    def __repr__(self) -> str:
        reward = getattr(self.reward, "name", None) or (type(self.reward).__name__ if self.reward else None)
        return (f"Environment({self.name!r}: {len(self.train)} train, {len(self.test)} test tasks, "
                f"tools {self.tools.names}, reward {reward!r})")

