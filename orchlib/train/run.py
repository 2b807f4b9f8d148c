"""A whole training run from one config (what `orchlib train --config FILE` runs).

The file holds the same config objects as the Python API: `grpo:` is a GRPOConfig (with its
`rollout:`), `warm_start:` an SFTConfig, `evaluation:` a RunEvaluation, `hooks:` a HooksPlugin (hooks from
outside the paper's path, named by import path; empty = the paper's GRPO). `policy: Qwen/Qwen3-8B` with a
gpt-5 card in `cards:` is the real-scale path (see examples/qwen3_8b.yaml); examples/smollm2_choice.yaml
trains a real pretrained model on 2 CPU cores; the defaults train the tiny policy on a laptop.

`env:` names the world (`orchlib.envs.config.EnvConfig`): a shipped one (`env: shop`, or
`env: {name: orchestra-choice, seed: 0, n_train: 40}`), task files of one's own (`env: {tasks: my.jsonl,
cards: mycards/, reward: rewards/outcome.yaml}`), or a factory of one's own (`env: {factory:
"mypkg.worlds:make"}`), which runs only with `trust_code=True` (`orchlib train --trust-code`).

With `evaluation:`, the run evaluates the policy on the world's test split after the warm start
("before RL") and after GRPO ("after RL"), beside the baselines, and writes `evaluation.json` and
`evaluation.txt` into `out`.

From Python, `run_training(cfg, env=env)` runs the same recipe in an Environment of one's own (its
train and test tasks, tools and reward) instead of the one the file names.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

from pydantic import ConfigDict, Field, model_validator

from orchlib.configurations import ConfigurationSpace
from orchlib.env import Environment
from orchlib.envs.config import EnvConfig
from orchlib.settings import Settings
from orchlib.train.accel import check_one_precision
from orchlib.train.config import GRPOConfig
from orchlib.train.evaluation import RunEvaluation
from orchlib.train.grpo import StepReport, Trainer
from orchlib.train.hooks import Hooks
from orchlib.train.plugin import HooksPlugin, require_trust
from orchlib.train.drills import OrderDrillConfig, drill_order
from orchlib.train.evidence import EvidenceDrillConfig, drill_evidence, shows_evidence, warm_start_drills
from orchlib.train.sft import SFTConfig

__all__ = ["RunConfig", "run_training", "warm_started_policy", "load_environment"]


class RunConfig(Settings):
    model_config = ConfigDict(extra="forbid", frozen=True)
    policy: str = Field("tiny", description="'tiny' / 'small' (built offline), a Hugging Face id or short name "
                                            "('smollm2'), or a folder")
    env: EnvConfig = Field(default_factory=EnvConfig, description="the world: a shipped one by name (`env: shop`, "
                           "`env: {name: orchestra-choice, n_train: 40}`), task files of one's own (`env: {tasks: "
                           "my.jsonl, cards: mycards/}`) or a factory (`env: {factory: 'pkg.mod:make'}`, run only "
                           "with --trust-code); its `reward` too. Default: orchestra-mini, the paper's reward")
    steps: int = Field(20, ge=0, description="GRPO steps")
    warm_start: SFTConfig | None = Field(default_factory=SFTConfig, description="SFT on golden trajectories "
                                         "first; null to skip (a real instruction model needs none)")
    order_drills: OrderDrillConfig | None = Field(None, description="before the warm start, drills that teach a "
                                                  "policy trained from scratch to copy the name P asks for from the "
                                                  "price-order line (`orchlib.train.drills`); null: none")
    evidence_drills: EvidenceDrillConfig | None = Field(None, description="after the order drills, drills that teach "
                                                        "a policy to call the tool whose description says it is most "
                                                        "often right on the question's kind (`orchlib.train.evidence`; "
                                                        "the rollout must show the evidence: tools listed `brief`, or "
                                                        "`evidence_order` on); null: none")
    warm_start_episodes: int = Field(1, ge=1, description="golden trajectories per train task, each under its own "
                                     "episode's configuration (more names, orders and prices to copy from)")
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    hooks: HooksPlugin | None = Field(None, description="training hooks by import path, e.g. `{from: "
                                      "'orchlib.experiments.variants:VariantConfig', with: {paired_profiles: "
                                      "[accuracy, thrifty]}}`; empty = the paper's GRPO. Runs code, so only "
                                      "with trust_code (--trust-code)")
    evaluation: RunEvaluation | None = Field(None, description="evaluate before and after GRPO, beside the "
                                             "baselines, on the world's test split (with `env.tasks`: needs "
                                             "`env.test_tasks`)")
    out: str = Field("runs/train", description="checkpoint and metrics folder; a rerun resumes from it")
    save_every: int = Field(10, ge=1, description="checkpoint every this many steps (and at the end)")
    configurations: ConfigurationSpace | None = Field(None, description="per-episode tool configurations of the "
                                                      "train tasks (docs/configurations.md); empty: the tools as "
                                                      "they are")
    test_configurations: ConfigurationSpace | None = Field(None, description="those of the test tasks (held-out "
                                                           "aliases, prices, backends); empty: `configurations`")

    @model_validator(mode="after")
    def _evidence_is_shown(self) -> RunConfig:
        r = self.grpo.rollout
        if self.evidence_drills is not None and not shows_evidence(r):
            raise ValueError(f"evidence_drills: the prompt shows no evidence to read: grpo.rollout.tool_schema is "
                             f"{r.tool_schema!r} and evidence_order is off; list the tools 'brief' (the "
                             f"descriptions) or set evidence_order: true (a line per kind of question)")
        if self.evidence_drills is not None and self.evidence_drills.in_warm_start and self.warm_start is None:
            raise ValueError(f"evidence_drills.in_warm_start: {self.evidence_drills.in_warm_start} drills to mix into "
                             f"the warm start, but warm_start is null; give a warm start or set in_warm_start: 0")
        return self

    @model_validator(mode="after")
    def _one_precision(self) -> RunConfig:
        phases = {"grpo.mixed_precision": self.grpo.mixed_precision}
        if self.warm_start is not None:
            phases["warm_start.mixed_precision"] = self.warm_start.mixed_precision
        for name in ("order_drills", "evidence_drills"):
            if getattr(self, name) is not None:
                phases[f"{name}.sft.mixed_precision"] = getattr(self, name).sft.mixed_precision
        check_one_precision(phases)
        return self


def load_environment(cfg: RunConfig, trust_code: bool = False) -> Environment:
    """The run's Environment, as `cfg.env` names it (a factory of one's own runs only with `trust_code`),
    with the config's configuration spaces, where given, laid over the world's own."""
    env = cfg.env.environment(trust_code=trust_code)
    spaces = {k: v for k, v in (("configurations", cfg.configurations),
                                ("test_configurations", cfg.test_configurations)) if v is not None}
    return env.replace(**spaces) if spaces else env


def run_training(cfg: RunConfig, progress: bool = True,
                 on_step: Callable[[Trainer, StepReport], None] | None = None, *,
                 env: Environment | None = None, trust_code: bool = False) -> Trainer:
    """Warm start (unless resuming), then GRPO for `cfg.steps`, checkpointing into `cfg.out`; with
    `cfg.evaluation`, the evaluations before and after RL. `on_step` sees every step's report. `env`:
    the Environment to train in, instead of the world `cfg.env` names (which must then be left unset).
    `trust_code`: the user's opt-in to import and run the code the config names (`hooks`, `env.factory`);
    a config file is data: without it such a config is an UntrustedCodeError and nothing runs."""
    from orchlib.train.checkpoint import find_checkpoint

    require_trust(cfg.hooks, trust_code)

    if env is None:
        if cfg.evaluation is not None and cfg.env.tasks is not None and cfg.env.test_tasks is None:
            raise ValueError("evaluation: needs a test split; give env.test_tasks beside env.tasks")
        env = load_environment(cfg, trust_code=trust_code)
    else:
        named = sorted({"env", "configurations", "test_configurations"} & cfg.model_fields_set)
        if named:
            raise ValueError(f"run_training(cfg, env=...): the environment replaces {named}; leave them unset")
        if env.reward is None:
            raise ValueError(f"run_training: environment {env.name!r} has no reward (Environment(reward=...))")
    if cfg.evaluation is not None and not env.test:
        raise ValueError(f"evaluation: needs test tasks; environment {env.name!r} has none")
    tasks, test, toolbox, reward = list(env.train), list(env.test), env.tools, env.reward
    shown = None  # the test's configurations, where the evaluation rotates each task's list
    if cfg.evaluation is not None and cfg.evaluation.rotations:
        from orchlib.evaluate.rotations import rotated

        test, shown = rotated(env)
    out = Path(cfg.out)
    ckpt = out / "checkpoint"
    hooks = cfg.hooks.build() if cfg.hooks is not None else Hooks()
    wall: dict[str, float] = {}
    reports: dict[str, Any] = {}
    cosines: dict[str, Any] = {}
    warm: dict[str, Any] = {}
    if find_checkpoint(ckpt):
        trainer = Trainer.resume(ckpt, env, hooks=hooks)
    else:
        model, tok = warm_started_policy(cfg, env, progress, wall, warm)
        if any(x is not None for x in (cfg.order_drills, cfg.evidence_drills, cfg.warm_start)):
            _write_warm_start(out, wall, warm)
        trainer = Trainer((model, tok), env, cfg.grpo, hooks=hooks, policy_source=cfg.policy)
        if cfg.evaluation is not None:
            t0 = time.perf_counter()
            reports["before RL"] = _evaluate_policy(trainer, env, cfg, "before RL", test, shown)
            if cfg.evaluation.cosine is not None:
                cosines["before RL"] = _cosine(trainer, env, cfg)
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
        reports["after RL"] = _evaluate_policy(trainer, env, cfg, "after RL", test, shown)
        if cfg.evaluation.cosine is not None:
            cosines["after RL"] = _cosine(trainer, env, cfg)
        reports.update(_baselines(tasks, test, toolbox, reward, trainer.tokenizer, cfg.grpo.rollout, cfg))
        wall["evaluate_after"] = time.perf_counter() - t0
        _write_evaluation(out, reports, reward, cfg, wall, cosines, warm)
    return trainer


def warm_started_policy(cfg: RunConfig, env: Environment, progress: bool = True,
                        wall: dict[str, float] | None = None, record: dict[str, Any] | None = None):
    """(model, tokenizer): the run's policy, loaded, after its order drills (`cfg.order_drills`), its evidence
    drills over `env`'s train questions (`cfg.evidence_drills`) and its SFT warm start (`cfg.warm_start`) on
    the golden trajectories of `env`'s train tasks (with `cfg.evidence_drills.in_warm_start` fresh drills among
    them), rendered as `cfg.grpo.rollout` renders prompts. `wall`, if given, gets the seconds of "load",
    "order_drills", "evidence_drills" and "warm_start"; `record` gets each drill's steps and held-out accuracy,
    and what the warm start trained on ("warm_start": golden trajectories and drills)."""
    from orchlib.models import build_default_policy, load_policy
    from orchlib.train.sft import golden_trajectories, sft_train

    wall = {} if wall is None else wall
    t0 = time.perf_counter()
    model, tok = build_default_policy(cfg.policy) if cfg.policy in ("tiny", "small") else load_policy(cfg.policy)
    wall["load"] = time.perf_counter() - t0
    if cfg.order_drills is not None:
        test_space = env.test_configurations
        held_out = test_space.aliases.pool if test_space is not None and test_space.aliases is not None else ()
        drilled = drill_order(model, tok, cfg.order_drills, exclude=held_out, progress=progress,
                              at=cfg.grpo.rollout.price_order_at, quoted=cfg.grpo.rollout.quote_names)
        wall["order_drills"] = drilled.pop("seconds")
        if record is not None:
            record["order_drills"] = drilled
    if cfg.evidence_drills is not None:
        drilled = drill_evidence(model, tok, cfg.evidence_drills, [t for t in env.train if t.golden is not None],
                                 cfg.grpo.rollout, progress=progress)
        wall["evidence_drills"] = drilled.pop("seconds")
        if record is not None:
            record["evidence_drills"] = drilled
    if cfg.warm_start is not None:
        t0 = time.perf_counter()
        with_golden = [t for t in env.train if t.golden is not None]
        gold = golden_trajectories(with_golden, env.tools, tok, cfg.grpo.rollout, seed=cfg.warm_start.seed,
                                   per_task=cfg.warm_start_episodes, configurations=env.configuration_space)
        mixed = (warm_start_drills(cfg.evidence_drills, with_golden, tok, cfg.grpo.rollout)
                 if cfg.evidence_drills is not None else [])
        sft_train(model, tok, list(gold) + mixed, cfg.warm_start, progress=progress)
        if record is not None:
            record["warm_start"] = {"golden": len(gold), "evidence_drills": len(mixed)}
        wall["warm_start"] = time.perf_counter() - t0
    return model, tok


def _evaluate_policy(trainer: Trainer, env: Environment, cfg: RunConfig, name: str, tasks, configurations):
    """The policy on `tasks` (the test split, or its rotated copies with their `configurations`)."""
    from orchlib.evaluate import evaluate

    # the evaluation samples from the engine the GRPO steps sample from; its generator is put back after, so
    # what training samples does not depend on whether, or on how many tasks, the run evaluates before RL
    generator = getattr(trainer.engine, "generator", None)
    state = generator.get_state() if generator is not None else None
    trainer.model.eval()
    try:
        return evaluate(trainer.engine, env, config=cfg.grpo.rollout, group_size=cfg.evaluation.samples, name=name,
                        seed=cfg.grpo.seed, tasks=tasks, configurations=configurations)
    finally:
        trainer.model.train()
        if state is not None:
            generator.set_state(state)


def _cosine(trainer: Trainer, env: Environment, cfg: RunConfig) -> dict[str, float]:
    """`choice_cosine` of the policy as it is now, over the weights GRPO trains (LoRA's, with `grpo.lora`)."""
    from orchlib.train.evaluation import choice_cosine

    model = trainer.accelerator.unwrap_model(trainer.model)
    return choice_cosine(model, trainer.tokenizer, env, cfg.grpo.rollout, cfg.evaluation)


def _baselines(train, test, toolbox, reward, tokenizer, rollout_config, cfg: RunConfig) -> dict[str, Any]:
    from orchlib.train.evaluation import baseline_reports

    return baseline_reports(test, toolbox, tokenizer, reward, rollout_config, cfg.evaluation.baselines,
                            calibration=train, seed=cfg.grpo.seed)


def _write_warm_start(out: Path, wall: dict[str, float], record: dict[str, Any]) -> None:
    """`out/warm_start.json`: the seconds of each phase before GRPO and each drill's record (steps, held-out
    share at every check), written as soon as the policy is warm-started (drilled or SFT'd), evaluation or not."""
    from orchlib.atomic import write_text_atomic

    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "warm_start.json", json.dumps({"wall_s": {k: round(v, 1) for k, v in wall.items()},
                                                           **record}, indent=1, sort_keys=True) + "\n")


def _write_evaluation(out: Path, reports: dict[str, Any], reward, cfg: RunConfig, wall: dict[str, float],
                      cosines: dict[str, Any], warm: dict[str, Any] | None = None) -> None:
    from orchlib.atomic import write_text_atomic
    from orchlib.evaluate import compare
    from orchlib.train.evaluation import run_summary

    summary = run_summary(reports, reward, cfg.evaluation)
    summary["wall_s"] = {k: round(v, 1) for k, v in wall.items()}
    if cosines:
        summary["choice_cosine"] = cosines
    if warm:
        summary["warm_start"] = warm
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "evaluation.json", json.dumps(summary, indent=1, sort_keys=True) + "\n")
    write_text_atomic(out / "evaluation.txt", compare(reports) + "\n")
