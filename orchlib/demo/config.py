"""The demo's settings: its tools and profiles, the rollout it uses, and DemoConfig, which composes the
library's SFTConfig, GRPOConfig and VariantConfig with the demo's values."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from orchlib.envs.choice import CHOICE_TOOLS
from orchlib.chat import CALL_OPENING  # noqa: F401  (re-exported: the demo's probes use it)
from orchlib.experiments.variants import VariantConfig
from orchlib.rollout import RolloutConfig
from orchlib.settings import Settings
from orchlib.shipped import shipped_dir
from orchlib.train.accel import check_one_precision
from orchlib.train.config import GRPOConfig
from orchlib.train.sft import SFTConfig

__all__ = ["DemoConfig", "DemoResult", "DEMO_WORDS", "DEMO_TOOLS", "DEMO_TOOL_NAMES", "DEMO_PROFILES", "EXPENSIVE",
           "READING_PAIR", "READING_SETTINGS", "CALL_OPENING", "REWARD_FILE", "DEMO_ROLLOUT", "WarmStartConfig",
           "COPY_SFT", "GOLDEN_SFT", "DEMO_GRPO", "DEMO_VARIANTS"]

# Tools offered per category in the demo (all final, see the module docstring).
# Two per category, one cheap and one dear, so P decides: the free calculator (exact when the policy
# copies the expression exactly) or the dear generalist (97 %); Mixtral's real answers (64 %, cheap) or
# the dear generalist (95 %).
DEMO_TOOLS: dict[str, list[str]] = CHOICE_TOOLS
DEMO_TOOL_NAMES = tuple(sorted({t for tools in DEMO_TOOLS.values() for t in tools}))
DEMO_PROFILES = ("accuracy", "thrifty")
EXPENSIVE = "generalist"
# Phase 2's preference-reading drills (`reading_drills`) offer this pair, which the demo never offers, and
# the golden call is the one P names: they teach the policy to read P where it chooses, not which demo
# tool each P calls for.
READING_PAIR: dict[str, str] = {"accuracy": "gpt4", "thrifty": "specialist"}
# The DemoConfig settings `orchlib demo --reading-drills` merges in (`configfile.merged`): twice the drills,
# with a longer phase 2 to hold them.
READING_SETTINGS: dict[str, Any] = {"warm_start": {"reading_drills": 800, "golden": {"max_steps": 450}}}
# the shipped reward file (package data: found in a wheel as in a checkout)
REWARD_FILE = shipped_dir("rewards") / "toolorchestra.yaml"

# P in words alone, after the question, a sentence per profile, the two differing in nearly every id: as weights
# (`accuracy=1, cost=0, latency=0`) the two profiles' lines differ in two ids of ~170, and after the warm
# start the GSM8K choice's gradients under the two profiles were parallel to 1 - cos 6e-6..4e-5, the
# sliver RL had to build P's reading from. In words after the question: 4.2e-3..2.4e-2 on settings seeds, and
# 6.4e-3..4.8e-2 with the warm start's reading drills (docs/results.md, "The demo").
DEMO_WORDS: dict[str, str] = {
    "accuracy": "only a right answer counts here; what a tool costs does not matter at all, so call the tool most "
                "likely to be right, however dear.",
    "thrifty": "every dollar spent counts against the answer; call a cheap tool that is good enough rather than a "
               "dear one, and save money."}

DEMO_ROLLOUT = RolloutConfig(
    max_turns=2, max_new_tokens=40, tool_schema="compact", tool_latency="declared",
    system_prompt="You are an orchestrator. Call one tool; its answer is final.", temperature=0.7,
    preference_at="user", preference_style="words", preference_words=DEMO_WORDS)

# Phase 1: a constant lr, since the gate (not a schedule) ends it; batch 16 of ~90-id drills (the question,
# then P's words).
COPY_SFT = SFTConfig(max_steps=1500, batch_size=16, shared_prompt=True, learning_rate=1e-3, schedule="constant",
                     warmup_fraction=0.02)
# Phase 2: golden trajectories in the orchestration format, cosine to 0. 250 steps, not 300: the words
# lengthen every prompt, and the time goes to the reading drills mixed in.
GOLDEN_SFT = SFTConfig(max_steps=250, batch_size=16, shared_prompt=True, learning_rate=3e-3)
# The paper's knobs as the demo sets them: mean-only advantages, a KL to the warm start, a short warm-up.
DEMO_GRPO = GRPOConfig(learning_rate=5e-4, kl_coef=0.03, shared_prompt=True, tasks_per_step=4, group_size=8,
                       advantage_scale="none", warmup_steps=10, rollout=DEMO_ROLLOUT)
# The experimental objective the tiny policy needed: each task under both profiles, learning on how their
# advantages differ on GSM8K, the tool's name pushed by its expectation over the tools a group tried, and
# the exact KL holding every other id.
DEMO_VARIANTS = VariantConfig(
    paired_profiles=DEMO_PROFILES, category_quota={"gsm8k": 3, "arithmetic": 1}, preference_contrast=1.0,
    contrast_unseen="absent", contrast_categories=("gsm8k",), policy_tokens="tool_names", kl_tokens="not_choice",
    kl_estimator="exact", choice_gradient="expected", choice_baseline="tried")


class WarmStartConfig(Settings):
    """The tiny policy's warm start before RL: phase 1 copies arithmetic into calculator calls, phase 2 is SFT
    on golden trajectories in the orchestration format. Each field says why its default."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    copy_drills: int = Field(2000, ge=0, description="calculator drills of phase 1 (0: no phase 1)")
    copying: SFTConfig = Field(COPY_SFT, description="phase 1's SFT; max_steps is its budget if the gate is never "
                                                  "met (its seed is DemoConfig.seed)")
    copy_gate: float = Field(0.95, ge=0, le=1, description="phase 1 runs until held-out drills are copied this "
                                                           "exactly (greedy, checked every 50 steps)...")
    copy_margin_steps: int = Field(50, ge=0, description="...then this many steps more: copying appears abruptly, "
                                                         "at a step that float rounding moves")
    golden: SFTConfig = Field(GOLDEN_SFT, description="phase 2's SFT on golden trajectories (its seed is "
                                                      "DemoConfig.seed)")
    extra_arithmetic: int = Field(400, ge=0, description="arithmetic tasks phase 2 adds, offering both tools, the "
                                                         "golden one drawn at random")
    extra_gsm8k: int = Field(300, ge=0, description="GSM8K questions phase 2 adds (in neither split), so the "
                                                    "format holds on unseen questions")
    reading_drills: int = Field(400, ge=0, description="preference-reading drills over a pair of tools the "
                                "demo never offers, mixed into phase 2: they teach reading P's words where the "
                                "choice is made, not which demo tool each P calls for (on settings seeds they "
                                "raised 1 - cos after the warm start from 5.4e-3..2.4e-2 to 1.8e-2..3.8e-2)")
    calculator_only: bool = Field(True, description="arithmetic's golden call is the calculator alone: exact and "
                                                    "free, it is right under every P, so format, not a choice")
    choice: Literal["each", "counterbalanced"] = Field(
        "counterbalanced", description="GSM8K: each question under both profiles with opposite tools, each way on "
        "half (the choice learns that P decides, not which way); or every tool under the question's one P")


class DemoConfig(Settings):
    """The demo; defaults finish in about five minutes on 2 CPU cores. It composes the library's configs
    (warm start: SFTConfig; RL: GRPOConfig and VariantConfig) with the demo's values, each chosen by
    measuring the tiny policy on 2 CPU cores."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    seed: int = Field(0, description="seeds the weights and every draw of warm start and GRPO (the nested "
                                     "configs' seeds are set from it)")
    size: str = Field("tiny", description="default policy size: tiny (~1.3 M) or small (~50 M)")
    split_seed: int | None = Field(0, description="seeds the train/test split alone, so every seed is tested on "
                                   "the same questions (None: the split follows `seed`)")
    n_train: int = Field(120, ge=4, description="train tasks (half arithmetic, half GSM8K)")
    n_test: int = Field(80, ge=4, description="held-out test tasks, each evaluated under both profiles")
    warm_start: WarmStartConfig = Field(default_factory=WarmStartConfig, description="before RL: copy drills, "
                                        "then golden trajectories")
    steps: int = Field(60, ge=0, description="GRPO steps (60, not 80: the words lengthen every prompt, and with "
                                          "them GSM8K controllability reached 82-93 points within 60 on settings "
                                          "seeds)")
    grpo: GRPOConfig = Field(DEMO_GRPO, description="the paper's knobs (its seed is `seed`, its decay_steps "
                                                    "follow `lr_decay`; its rollout renders the prompts of every "
                                                    "phase, warm start and evaluations too)")
    lr_decay: bool = Field(True, description="after the warm-up the lr falls linearly to 0 over the other steps")
    variants: VariantConfig = Field(DEMO_VARIANTS, description="the experimental objective and task draw GRPO runs "
                                                               "with (`orchlib.experiments.variants`)")
    rl_categories: tuple[Literal["arithmetic", "gsm8k"], ...] = Field(
        ("arithmetic", "gsm8k"), min_length=1, description="the train tasks GRPO draws from; arithmetic holds the "
                                                           "calculator, which no update would hold otherwise")
    replay_coef: float = Field(0.1, ge=0, description="SFT replay during GRPO (InstructGPT's PPO-ptx): this x the "
                               "cross-entropy of phase-2 golden trajectories, names of chosen tools left out; 0: off")
    replay_batch: int = Field(8, ge=1, description="golden trajectories replayed per GRPO update (8, not 4: with "
                              "4, GRPO took 6-11 points off the arithmetic copied under \"thrifty\" on some seeds, "
                              "which the thrifty margin over always-strongest is made of)")
    eval_samples: int = Field(2, ge=1, description="sampled runs per test task and profile")
    out: str = Field("out/demo", description="folder for report.html, metrics.json, trajectories.jsonl")

    @model_validator(mode="after")
    def _one_precision(self) -> DemoConfig:
        check_one_precision({"warm_start.copying.mixed_precision": self.warm_start.copying.mixed_precision,
                             "warm_start.golden.mixed_precision": self.warm_start.golden.mixed_precision,
                             "grpo.mixed_precision": self.grpo.mixed_precision})
        return self

    def grpo_config(self) -> GRPOConfig:
        """`grpo` as the run uses it: seeded by `seed`, the lr decaying over the steps after the warm-up."""
        g = self.grpo
        decay = max(self.steps - g.warmup_steps, 1) if self.lr_decay and self.steps else None
        return g.model_copy(update={"seed": self.seed, "decay_steps": decay})


@dataclass
class DemoResult:
    """What `run_demo` returns: the numbers (also in metrics.json), the printed table, the output folder,
    GRPO's per-step history, and the trained policy with the world it was trained in, to study further
    (e.g. `orchlib.sweep.sweep(TransformersEngine(*result.policy), result.env.test, result.env.tools, ...)`)."""

    metrics: dict[str, Any]
    table: str
    out: Path
    history: list[dict[str, float]] = field(default_factory=list)
    policy: tuple[Any, Any] | None = None   # (model, tokenizer) after GRPO, in eval mode
    env: Any = None                          # the demo's Environment: train, test (each task once), tools, reward
