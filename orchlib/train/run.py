"""A whole training run from one config (what `orchlib train --config FILE` runs).

The file holds the same config objects as the Python API: `grpo:` is a GRPOConfig (with its
`rollout:`), `warm_start:` an SFTConfig, `evaluation:` a RunEvaluation, `hooks:` a HooksPlugin (hooks from
outside the paper's path, named by import path; empty = the paper's GRPO). `policy: Qwen/Qwen3-8B` with a
gpt-5 card in `cards:` is the real-scale path (see examples/qwen3_8b.yaml); examples/smollm2_choice.yaml
trains a real pretrained model on 2 CPU cores; the defaults train the tiny policy on a laptop.

With `evaluation:`, the run evaluates the policy on the suite's test split after the warm start
("before RL") and after GRPO ("after RL"), beside the baselines, and writes `evaluation.json` and
`evaluation.txt` into `out`.

From Python, `run_training(cfg, env=env)` runs the same recipe in an Environment of one's own (its
train and test tasks, tools, reward and prompt settings) instead of the one the file names.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

from pydantic import ConfigDict, Field

from orchlib.configurations import ConfigurationSpace
from orchlib.env import Environment
from orchlib.settings import Settings
from orchlib.train.config import GRPOConfig
from orchlib.train.evaluation import RunEvaluation
from orchlib.train.grpo import StepReport, Trainer
from orchlib.train.hooks import Hooks
from orchlib.train.plugin import HooksPlugin, require_trust
from orchlib.train.sft import SFTConfig

__all__ = ["RunConfig", "run_training", "warm_started_policy", "load_environment", "load_world"]


class RunConfig(Settings):
    model_config = ConfigDict(extra="forbid", frozen=True)
    policy: str = Field("tiny", description="'tiny' / 'small' (built offline), a Hugging Face id or short name "
                                            "('smollm2'), or a folder")
    cards: str | list[str] | None = Field(None, description="folder, file or list of files of tool cards; empty = "
                                          "the suite's own cards (with `tasks`: the shipped toolcards)")
    reward: str = Field("rewards/toolorchestra.yaml", description="reward file in the reward DSL")
    tasks: str | None = Field(None, description="tasks JSONL; empty = the train split of `suite`")
    suite: str = Field("orchestra-mini", description="a suite of orchlib.envs.SUITES, when `tasks` is empty")
    suite_seed: int = Field(0, description="seed of the suite when `tasks` is empty")
    suite_train: int | None = Field(None, ge=1, description="the suite's train questions (None: its default)")
    suite_test: int | None = Field(None, ge=1, description="the suite's test questions (None: its default)")
    steps: int = Field(20, ge=0, description="GRPO steps")
    warm_start: SFTConfig | None = Field(default_factory=SFTConfig, description="SFT on golden trajectories "
                                         "first; null to skip (a real instruction model needs none)")
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    hooks: HooksPlugin | None = Field(None, description="training hooks by import path, e.g. `{from: "
                                      "'orchlib.experiments.variants:VariantConfig', with: {paired_profiles: "
                                      "[accuracy, thrifty]}}`; empty = the paper's GRPO. Runs code, so only "
                                      "with trust_code (--trust-code)")
    evaluation: RunEvaluation | None = Field(None, description="evaluate before and after GRPO, beside the "
                                             "baselines, on the suite's test split (needs a suite, not `tasks`)")
    out: str = Field("runs/train", description="checkpoint and metrics folder; a rerun resumes from it")
    save_every: int = Field(10, ge=1, description="checkpoint every this many steps (and at the end)")
    configurations: ConfigurationSpace | None = Field(None, description="per-episode tool configurations of the "
                                                      "train tasks (docs/configurations.md); empty: the tools as "
                                                      "they are")
    test_configurations: ConfigurationSpace | None = Field(None, description="those of the test tasks (held-out "
                                                           "aliases, prices, backends); empty: `configurations`")


# RunConfig fields that name the run's world (an `env=` given to run_training replaces them)
WORLD_FIELDS = frozenset({"cards", "reward", "tasks", "suite", "suite_seed", "suite_train", "suite_test",
                          "configurations", "test_configurations"})


def load_environment(cfg: RunConfig) -> Environment:
    """The run's Environment: the tasks file with `cards` (default: the shipped toolcards), or the suite's
    train and test splits with its own cards (or `cards`); the reward file."""
    from orchlib.tasks import load_tasks

    spaces = {k: v for k, v in (("configurations", cfg.configurations),
                                ("test_configurations", cfg.test_configurations)) if v is not None}
    if cfg.tasks:
        return Environment(name=cfg.tasks, train=load_tasks(cfg.tasks), tools=cfg.cards or "toolcards",
                           reward=cfg.reward, **spaces)
    from orchlib.envs import SUITES

    if cfg.suite not in SUITES:
        raise ValueError(f"suite: {cfg.suite!r} is not one of {sorted(SUITES)}")
    sizes = {k: v for k, v in (("n_train", cfg.suite_train), ("n_test", cfg.suite_test)) if v is not None}
    suite = SUITES[cfg.suite](cfg.suite_seed, **sizes)
    env = suite.environment(cfg.reward)
    changes = {**({"tools": cfg.cards} if cfg.cards else {}), **spaces}
    return env.replace(**changes) if changes else env


def load_world(cfg: RunConfig):
    """(train tasks, test tasks or None, toolbox, reward) of a run: `load_environment`, unpacked."""
    env = load_environment(cfg)
    return list(env.train), list(env.test) or None, env.tools, env.reward


def run_training(cfg: RunConfig, progress: bool = True,
                 on_step: Callable[[Trainer, StepReport], None] | None = None, *,
                 env: Environment | None = None, trust_code: bool = False) -> Trainer:
    """Warm start (unless resuming), then GRPO for `cfg.steps`, checkpointing into `cfg.out`; with
    `cfg.evaluation`, the evaluations before and after RL. `on_step` sees every step's report. `env`:
    the Environment to train in, instead of the world `cfg` names (whose fields must then be left unset).
    `trust_code`: the user's opt-in to import and run the code `cfg.hooks` names (a config file is data;
    without it, a config with hooks is an UntrustedCodeError and nothing runs)."""
    from orchlib.train.checkpoint import find_checkpoint

    require_trust(cfg.hooks, trust_code)

    if env is None:
        if cfg.evaluation is not None and cfg.tasks:
            raise ValueError("evaluation: needs a suite's test split; leave `tasks` empty")
        env = load_environment(cfg)
    else:
        named = sorted(WORLD_FIELDS & cfg.model_fields_set)
        if named:
            raise ValueError(f"run_training(cfg, env=...): the environment replaces {named}; leave them unset")
        if env.reward is None:
            raise ValueError(f"run_training: environment {env.name!r} has no reward (Environment(reward=...))")
        if cfg.evaluation is not None and not env.test:
            raise ValueError(f"evaluation: needs test tasks; environment {env.name!r} has none")
    tasks, test, toolbox, reward = list(env.train), list(env.test), env.tools, env.reward
    rollout_config = env.rollout_config(cfg.grpo.rollout)  # the prompts as the environment renders them
    out = Path(cfg.out)
    ckpt = out / "checkpoint"
    hooks = cfg.hooks.build() if cfg.hooks is not None else Hooks()
    wall: dict[str, float] = {}
    reports: dict[str, Any] = {}
    if find_checkpoint(ckpt):
        trainer = Trainer.resume(ckpt, env, hooks=hooks)
    else:
        model, tok = warm_started_policy(cfg, env, progress, wall)
        trainer = Trainer((model, tok), env, cfg.grpo, hooks=hooks, policy_source=cfg.policy)
        if cfg.evaluation is not None:
            t0 = time.perf_counter()
            reports["before RL"] = _evaluate_policy(trainer, env, cfg, "before RL")
            wall["evaluate_before"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    while trainer.step_count < cfg.steps:
        n = min(cfg.save_every, cfg.steps - trainer.step_count)
        for _ in range(n):
            report = trainer.step()
            if on_step is not None:
                on_step(trainer, report)
        trainer.save(ckpt)
    wall["grpo"] = time.perf_counter() - t0
    if cfg.evaluation is not None:
        t0 = time.perf_counter()
        reports["after RL"] = _evaluate_policy(trainer, env, cfg, "after RL")
        reports.update(_baselines(tasks, test, toolbox, reward, trainer.tokenizer, rollout_config, cfg))
        wall["evaluate_after"] = time.perf_counter() - t0
        _write_evaluation(out, reports, reward, cfg, wall)
    return trainer


def warm_started_policy(cfg: RunConfig, env: Environment, progress: bool = True,
                        wall: dict[str, float] | None = None):
    """(model, tokenizer): the run's policy, loaded, after its SFT warm start (`cfg.warm_start`) on the
    golden trajectories of `env`'s train tasks, rendered as `env` renders its prompts. `wall`, if given,
    gets the seconds of "load" and "warm_start"."""
    from orchlib.models import build_default_policy, load_policy
    from orchlib.train.sft import golden_trajectories, sft_train

    wall = {} if wall is None else wall
    t0 = time.perf_counter()
    model, tok = build_default_policy(cfg.policy) if cfg.policy in ("tiny", "small") else load_policy(cfg.policy)
    wall["load"] = time.perf_counter() - t0
    if cfg.warm_start is not None:
        t0 = time.perf_counter()
        with_golden = [t for t in env.train if t.golden is not None]
        gold = golden_trajectories(with_golden, env.tools, tok, env.rollout_config(cfg.grpo.rollout),
                                   seed=cfg.warm_start.seed, configurations=env.configuration_space)
        sft_train(model, tok, gold, cfg.warm_start, progress=progress)
        wall["warm_start"] = time.perf_counter() - t0
    return model, tok


def _evaluate_policy(trainer: Trainer, env: Environment, cfg: RunConfig, name: str):
    from orchlib.evaluate import evaluate

    trainer.model.eval()
    try:
        return evaluate(trainer.engine, env, config=cfg.grpo.rollout, group_size=cfg.evaluation.samples, name=name,
                        seed=cfg.grpo.seed)
    finally:
        trainer.model.train()


def _baselines(train, test, toolbox, reward, tokenizer, rollout_config, cfg: RunConfig) -> dict[str, Any]:
    from orchlib.train.evaluation import baseline_reports

    return baseline_reports(test, toolbox, tokenizer, reward, rollout_config, cfg.evaluation.baselines,
                            calibration=train, seed=cfg.grpo.seed)


def _write_evaluation(out: Path, reports: dict[str, Any], reward, cfg: RunConfig, wall: dict[str, float]) -> None:
    from orchlib.atomic import write_text_atomic
    from orchlib.evaluate import compare
    from orchlib.train.evaluation import run_summary

    summary = run_summary(reports, reward, cfg.evaluation)
    summary["wall_s"] = {k: round(v, 1) for k, v in wall.items()}
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "evaluation.json", json.dumps(summary, indent=1, sort_keys=True) + "\n")
    write_text_atomic(out / "evaluation.txt", compare(reports) + "\n")
