"""The demo's settings: its tools and profiles, the rollout it uses, and DemoConfig."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchlib.envs.choice import CHOICE_TOOLS
from orchlib.chat import CALL_OPENING  # noqa: F401  (re-exported: the demo's probes use it)
from orchlib.rollout import RolloutConfig
from orchlib.shipped import shipped_dir

__all__ = ["DemoConfig", "DemoResult", "DEMO_TOOLS", "DEMO_TOOL_NAMES", "DEMO_PROFILES", "EXPENSIVE", "READING_PAIR",
           "READING_SETTINGS", "CALL_OPENING", "REWARD_FILE", "DEMO_ROLLOUT"]

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
# The DemoConfig fields `orchlib demo --reading-drills` sets: the drills need a longer phase 2.
READING_SETTINGS: dict[str, int] = {"reading_drills": 800, "sft_steps": 450}
# the shipped reward file (package data: found in a wheel as in a checkout)
REWARD_FILE = shipped_dir("rewards") / "toolorchestra.yaml"

DEMO_ROLLOUT = RolloutConfig(
    max_turns=2, max_new_tokens=40, tool_schema="compact", tool_latency="declared",
    system_prompt="You are an orchestrator. Call one tool; its answer is final.", temperature=0.7)


class DemoConfig(BaseModel):
    """Defaults finish in about five minutes on 2 CPU cores."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    seed: int = Field(0, description="seeds the policy's weights and every draw of the warm start and of GRPO "
                                     "(and the train/test split, with split_seed None)")
    size: str = Field("tiny", description="default policy size: tiny (~1.3 M) or small (~50 M)")
    steps: int = Field(80, ge=0, description="GRPO steps")
    split_seed: int | None = Field(0, description="seeds the train/test split alone, so every seed is tested on "
                                   "the same questions, as a benchmark's test set is fixed, and the seed-to-seed "
                                   "spread is training's own (None: the split follows `seed`). On each seed's own "
                                   "40 GSM8K test questions, always-cheapest's lead over always-strongest under "
                                   "\"thrifty\" ranged from -0.025 to +0.288: the questions, not training, "
                                   "decided whether P could pay there (docs/notes/)")
    n_train: int = Field(120, ge=4, description="train tasks (half arithmetic, half GSM8K)")
    n_test: int = Field(80, ge=4, description="held-out test tasks; with 40, Mixtral's accuracy on seed 1's 20 test "
                                              "questions was 0.45 against 0.65 on train, and always-cheapest lost "
                                              "to always-strongest under \"thrifty\" by that luck alone")
    copy_drills: int = Field(2000, ge=0, description="short calculator drills of phase 1 of the warm start")
    copy_gate: float = Field(0.95, ge=0, le=1, description="phase 1 goes on until held-out drills are copied this "
                                                           "exactly (greedy, checked every 50 steps)...")
    copy_margin_steps: int = Field(50, ge=0, description="...and then this many steps more. Copying appears "
                                                         "abruptly, after 150 to over 600 steps of batch 16 at lr "
                                                         "1e-3, at a step that float rounding moves: a phase that "
                                                         "ended at the gate left later phases on the edge of it, "
                                                         "and a fixed 450 steps left one seed in 5 at 50 % copied. "
                                                         "100 passed the bars too, 6 s slower (docs/notes/)")
    copy_max_steps: int = Field(1500, ge=0, description="phase 1's budget, if the gate is never met")
    copy_learning_rate: float = Field(1e-3, gt=0, description="6e-3 and 3e-3 needed 750-1200 steps to copy "
                                                              "95 % of drills or never did; 1e-3 did on 6 of 6 seeds")
    sft_steps: int = Field(300, ge=1, description="phase 2: golden trajectories in the orchestration format "
                                                  "(150 left 30 % of sampled turns malformed, 300 about 9 %; with "
                                                  "the reading drills 300 left 41 %, 450 about 1 %)")
    reading_drills: int = Field(0, ge=0, description="phase-2 preference-reading drills (`reading_drills`); off by "
                                                     "default until they help on every seed (docs/notes/); "
                                                     "READING_SETTINGS is the measured setting")
    sft_extra_arithmetic: int = Field(400, ge=0, description="more arithmetic tasks for phase 2, offering both "
                                                             "tools; the golden tool is drawn at random")
    sft_extra_gsm8k: int = Field(300, ge=0, description="more GSM8K questions for phase 2 (none in train or test): "
                                                        "with only the 60 train questions, 25 % of turns on unseen "
                                                        "questions were malformed, against 2 % on seen ones")
    sft_learning_rate: float = Field(3e-3, gt=0, description="peak lr of phase 2 (cosine to 0)")
    learning_rate: float = Field(5e-4, gt=0, description="GRPO lr; with the expected push and balanced draws, "
                                                         "5e-4 separated the profiles on every seed (3e-4: 22.6 "
                                                         "points on seed 1; docs/notes/)")
    kl_coef: float = Field(0.03, ge=0, description="KL to the warm start. The update pushes tool names only, so "
                                                   "the KL alone keeps the format; with the exact KL, 0.1 and 0.05 "
                                                   "held seed 1's GSM8K choice back (22.1 / 29.4 points)")
    kl_estimator: Literal["k3", "exact"] = Field("exact", description="VariantConfig.kl_estimator: with k3 (at 0.1) "
                                                 "seed 1 lost its format, 15 of 160 test runs without a well-formed "
                                                 "call: k3 sees only the sampled id, not mass moving to '</tool_call>'")
    kl_tokens: Literal["all", "not_names", "not_choice"] = Field("not_choice", description="VariantConfig.kl_tokens: "
                                                   "the KL holds every id, and at the tool's name the mass that "
                                                   "leaves the tried tools (taken as one); with the name left free "
                                                   "(not_names) 4 runs of 12 lost their calls there within 20 steps "
                                                   "('{\"name\": \"{\"name\"'); with the tools apart it held the "
                                                   "GSM8K choice back (0.1 on all ids: 5 points on seed 1)")
    warmup_steps: int = Field(10, ge=0, description="GRPOConfig.warmup_steps (then the lr falls to 0 over the "
                                                    "rest): Adam's first steps move every weight by about the lr; "
                                                    "at the full lr from step 1, seed 0 broke 10 % of its calls "
                                                    "in the first 20 steps, and Mixtral's share fell under both "
                                                    "profiles while they were mended (GSM8K -1.3 points; 53.8 with "
                                                    "the warm-up)")
    lr_decay: bool = Field(True, description="GRPOConfig.decay_steps = steps: the lr falls linearly to 0; at a "
                                             "constant lr one run lost its profile gap in the last 10 steps")
    policy_tokens: Literal["all", "tool_names"] = Field("tool_names", description="VariantConfig.policy_tokens: "
                                                        "the update pushes the tool names only; the warm start "
                                                        "taught the rest")
    preference_contrast: float = Field(1.0, ge=0, le=1, description="VariantConfig.preference_contrast: the update "
                                       "learns how the profiles differ; below 1 the shared part swamped P")
    contrast_unseen: Literal["zero", "absent"] = Field("absent", description="VariantConfig.contrast_unseen: a "
                                                       "profile whose group did not try a tool is left out of that "
                                                       "tool's shared part; counted as 0, it leaked the push both "
                                                       "profiles share back in (docs/notes/)")
    choice_gradient: Literal["sampled", "expected"] = Field("expected", description="VariantConfig.choice_gradient: "
                                                            "at the tool's name, the expectation over the tools a "
                                                            "group tried instead of the one sampled; sampled, the "
                                                            "draw's noise moved both profiles' choice at random")
    choice_baseline: Literal["zero", "tried"] = Field("tried", description="VariantConfig.choice_baseline: the "
                                                      "expected choice moves mass among the tried tools only; with "
                                                      "0 for the rest, the contrast's uncentred advantages moved it "
                                                      "to ids that name no tool and broke the call (docs/notes/)")
    balance_categories: bool = Field(True, description="VariantConfig.balance_categories: each step's tasks drawn "
                                                       "evenly from arithmetic and GSM8K; drawn at random, some "
                                                       "steps held one category only, and the policy read P on "
                                                       "one category alone (seed 2: 5 points on GSM8K); with "
                                                       "category_quota set, the quota decides instead")
    advantage_scale: Literal["std", "none"] = Field("none", description="GRPOConfig.advantage_scale: mean-only "
                                                    "advantages; with std scaling a rare error in a group that "
                                                    "nearly agrees became -2.6 and turned the contrast around")
    warm_calculator: bool = Field(True, description="phase 2 writes the calculator alone for arithmetic (the "
                                                    "other tool as well for GSM8K): exact and free, it is right "
                                                    "under every profile, so it is format there, not a choice P "
                                                    "makes. Written both ways, GRPO's arithmetic choice learned P's "
                                                    "indifference first and GSM8K's choice did not (docs/notes/)")
    warm_choice: Literal["each", "counterbalanced"] = Field(
        "counterbalanced", description="phase 2 on GSM8K: each question under both profiles, the two profiles' "
        "tools opposite, each way on half the questions (`counterbalanced`), so the choice learns to depend on P "
        "but not which way; or every tool written for each question under its one P (`each`), which leaves the "
        "choice P-blind to the last digit, and GRPO's push apart then showed within 80 steps on 3 seeds of 5 "
        "(counterbalanced: 6 of 6, one thread each; docs/notes/)")
    replay_coef: float = Field(0.1, ge=0, description="SFT replay during GRPO (`train/replay.py`, InstructGPT's "
                               "PPO-ptx): each update adds this x the cross-entropy of replay_batch phase-2 golden "
                               "trajectories, tool names left out where the task offers a choice. Without it 11-17 % "
                               "of the calculator's copies drifted during GRPO on 2 seeds of 4; at 1.0 the copies "
                               "held but the GSM8K choice moved less (docs/notes/); 0: off")
    replay_batch: int = Field(4, ge=1, description="golden trajectories replayed per GRPO update. 4 took ~9 s "
                                                   "less of GRPO's ~90 than 8; after RL the calculator's calls "
                                                   "were right on 97.5-100 % of test runs on 4 seeds of 5 and "
                                                   "89.4 % on one (8: 97.5-100 % on all 5; docs/notes/)")
    category_quota: dict[Literal["arithmetic", "gsm8k"], int] | None = Field(
        {"gsm8k": 3, "arithmetic": 1}, description="VariantConfig.category_quota: how many of each step's "
        "tasks_per_step each category gives (None: balance_categories decides). GSM8K, whose choice P decides, "
        "gets 3 of 4; one arithmetic task a step holds the calculator there (docs/notes/)")
    rl_categories: tuple[Literal["arithmetic", "gsm8k"], ...] = Field(
        ("arithmetic", "gsm8k"), min_length=1, description="the train tasks GRPO draws from. With GSM8K alone "
        "the arithmetic choice, which no update then held, drifted to the generalist under both profiles")
    contrast_categories: tuple[Literal["arithmetic", "gsm8k"], ...] = Field(
        ("gsm8k",), min_length=1, description="VariantConfig.contrast_categories: the profiles' contrast on "
        "GSM8K, where their best tools differ; on arithmetic the update keeps what the profiles share (the "
        "calculator is right under both)")
    tasks_per_step: int = Field(4, ge=1, description="each drawn under both profiles: 8 groups per step")
    group_size: int = Field(8, ge=2, description="rollouts per task and profile (a GRPO group)")
    eval_samples: int = Field(2, ge=1, description="sampled runs per test task and profile")
    out: str = Field("out/demo", description="folder for report.html, metrics.json, trajectories.jsonl")


@dataclass
class DemoResult:
    metrics: dict[str, Any]
    table: str
    out: Path
    history: list[dict[str, float]] = field(default_factory=list)
