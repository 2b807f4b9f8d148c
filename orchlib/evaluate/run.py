"""`evaluate`: a policy over tasks, batch by batch, its trajectories kept in memory or written to a JSONL file
as they come, with a warning when episodes end on a limit before any tool call."""

from __future__ import annotations

import contextlib
import os
import tempfile
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np

from orchlib.baselines import EVAL_ROLLOUT, collector_paused
from orchlib.env import Environment, RewardFunction, as_reward
from orchlib.evaluate.metrics import TrajectoryFigures, compute_metrics
from orchlib.evaluate.report import EvalReport
from orchlib.configurations import reward_preference
from orchlib.rollout import RolloutConfig, rollout
from orchlib.tasks import Task
from orchlib.trajectory import Trajectory, to_json_line

__all__ = ["evaluate"]


def evaluate(policy, env: Environment, *, config: RolloutConfig | None = None, group_size: int = 1,
             name: str | None = None, seed: int | None = 0, tasks: Sequence[Task] | None = None,
             reward: RewardFunction | None = None, batch_size: int | None = None,
             trajectories_to: str | os.PathLike | None = None, configurations=None, episode: int = 0) -> EvalReport:
    """Run `policy` (an Engine: a trained orchestrator or a baseline) on every task of `env`'s test split
    (or `tasks`), `group_size` times, with the environment's toolbox and reward (`config`: EVAL_ROLLOUT
    unless given; `reward` replaces the environment's). Tasks and tools of one's own:
    `evaluate(policy, Environment(test=tasks, tools=toolbox, reward=reward))`.

    The reward is any `RewardFunction` (an `orchlib.reward.Reward`, or any `fn(group, P=...) -> array`);
    rewards are computed per task group under the task's own P, so with `group_size=1` group-normalised
    terms are degenerate. Without a reward the report has no reward column.

    At scale: `batch_size` runs the tasks `batch_size` at a time (one rollout each; None: all at once),
    with automatic garbage collection paused while a batch runs (`orchlib.baselines.collector_paused`).
    A written policy (a baseline) gives the same trajectories either way; a sampling one draws per batch,
    so its samples depend on the batch size. `trajectories_to` writes the trajectories to that JSONL file
    batch by batch (it appears whole, or not at all) and keeps only what the metrics need of each
    (`TrajectoryFigures`): the report's `trajectories` is then empty and `trajectories_path` says where
    they are.

    Tool configurations: each test task runs under the configuration its environment's space draws for
    (`task.id`, `episode`; `env.configuration_space`), or `configurations` (a ConfigurationSpace, or a
    function task → space) where given; `report.metrics["by_configuration"]` breaks the numbers down.
    """
    if not isinstance(env, Environment):
        raise TypeError(f"evaluate(policy, env, ...): env is an orchlib.Environment (e.g. Environment(test=tasks, "
                        f"tools=toolbox, reward=reward)), not {type(env).__name__}")
    if tasks is None and not env.test:
        raise ValueError(f"environment {env.name!r} has no test tasks: pass tasks= (e.g. env.train)")
    tasks = env.test if tasks is None else tasks
    reward = env.reward if reward is None else as_reward(reward)
    configurations = env.configuration_space if configurations is None else configurations
    tasks = list(tasks)
    config = config or EVAL_ROLLOUT
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    label = name or getattr(policy, "name", None) or type(policy).__name__
    step = batch_size or max(len(tasks), 1)
    kept: list[Trajectory | TrajectoryFigures] = []
    rewards: list[float] | None = [] if reward is not None else None
    paused = collector_paused if batch_size is not None else contextlib.nullcontext
    cut_short: dict[str, list[str]] = {"token_budget": [], "length": []}  # reason → task ids, one per episode
    with _JsonlSink(trajectories_to) as sink:
        for start in range(0, len(tasks), step):
            batch = tasks[start:start + step]
            with paused():
                trajectories = rollout(env, policy, config=config, group_size=group_size, seed=seed, tasks=batch,
                                       configurations=configurations, episode=episode)
                if rewards is not None:
                    rewards += _group_rewards(trajectories, batch, group_size, reward)
                for reason, task_id in _cut_before_any_call(trajectories):
                    cut_short[reason].append(task_id)
                if sink is None:
                    kept += trajectories
                else:
                    sink.write(trajectories)
                    kept += [TrajectoryFigures.of(t) for t in trajectories]
                del trajectories
    _warn_cut_short(cut_short, len(kept), label, config)
    metrics = compute_metrics(kept, rewards)
    if trajectories_to is None:
        return EvalReport(label, metrics, kept, rewards)  # type: ignore[arg-type]  (trajectories, all)
    return EvalReport(label, metrics, [], rewards, trajectories_path=Path(trajectories_to))


def _group_rewards(trajectories: Sequence[Trajectory], tasks: Sequence[Task], group_size: int, reward) -> list[float]:
    """The reward of every trajectory, computed per group (the G rollouts of one task) under its task's P."""
    out: list[float] = []
    for i, task in enumerate(tasks):
        group = list(trajectories[i * group_size:(i + 1) * group_size])
        values = np.asarray(reward(group, P=reward_preference(task, group)), dtype=float)
        if values.shape != (len(group),):
            raise ValueError(f"reward gave shape {values.shape} for a group of {len(group)} (task {task.id})")
        out += values.tolist()
    return out


def _cut_before_any_call(trajectories: Sequence[Trajectory]) -> list[tuple[str, str]]:
    """(reason, task id) of each episode that ended on a limit (the token budget, or max_new_tokens
    mid-turn) without one tool call."""
    return [(t.finish_reason, t.task_id) for t in trajectories
            if t.finish_reason in ("token_budget", "length") and not any(t.calls.values())]


def _tasks_named(task_ids: list[str]) -> str:
    """The tasks of some episodes, each once, at most ten shown."""
    ids = list(dict.fromkeys(task_ids))
    return ", ".join(ids[:10]) + (f", … and {len(ids) - 10} more" if len(ids) > 10 else "")


def _warn_cut_short(cut: dict[str, list[str]], total: int, label: str, config: RolloutConfig) -> None:
    """Say so, naming the tasks, when episodes were scored 0 at $0 because the rollout's limits left no
    room to call a tool."""
    if cut["token_budget"]:
        warnings.warn(f"{label}: {len(cut['token_budget'])} of {total} episodes ended on the token budget before "
                      f"any tool call (scored 0 at $0; tasks: {_tasks_named(cut['token_budget'])}): the prompt "
                      f"leaves no room within max_total_tokens={config.max_total_tokens}; raise it, or shorten the "
                      "prompt (fewer or shorter tool schemas)", stacklevel=3)
    if cut["length"]:
        warnings.warn(f"{label}: {len(cut['length'])} of {total} episodes were cut at max_new_tokens="
                      f"{config.max_new_tokens} before any tool call (scored 0 at $0; tasks: "
                      f"{_tasks_named(cut['length'])}): a call with several arguments may need more tokens than "
                      "that", stacklevel=3)


class _JsonlSink:
    """Trajectories appended to a temporary file beside `path`, renamed over it on success and removed
    on failure, so a reader never sees half a run. `None`: no file (the context gives None)."""

    def __init__(self, path: str | os.PathLike | None):
        self.path = None if path is None else Path(path)

    def __enter__(self) -> _JsonlSink | None:
        if self.path is None:
            return None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        self.tmp = Path(tmp)
        self.file = os.fdopen(fd, "w", encoding="utf-8")
        return self

    def write(self, trajectories: Sequence[Trajectory]) -> None:
        self.file.write("".join(to_json_line(t) + "\n" for t in trajectories))

    def __exit__(self, kind, error, tb) -> None:
        if self.path is None:
            return
        self.file.close()
        if kind is None:
            os.replace(self.tmp, self.path)
        else:  # remove the partial file; the error reaches the caller unchanged
            self.tmp.unlink(missing_ok=True)
