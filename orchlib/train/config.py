"""GRPOConfig: what every GRPO run needs, and no more. Experimental objectives and samplers have their own
config (`orchlib.experiments.variants.VariantConfig`).

The paper is ToolOrchestra (arXiv 2511.21689) and its released training config; the defaults run the tiny
policy on a laptop CPU, and each field says where it departs from the paper's 8B run.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from orchlib.engines.vllm import VLLMConfig
from orchlib.rollout import RolloutConfig
from orchlib.settings import Settings

__all__ = ["LoraSettings", "GRPOConfig"]


class LoraSettings(Settings):
    """PEFT LoRA; with it the KL reference is the same model with the adapter disabled (no copy)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    r: int = Field(8, ge=1, description="rank; 8 is PEFT's common default")
    alpha: int = Field(16, ge=1, description="scale alpha/r = 2, the usual choice")
    dropout: float = Field(0.0, ge=0, lt=1, description="0 keeps rollout and update log-probs identical")
    target_modules: str | list[str] = Field("all-linear", description="every linear layer but the head")


class GRPOConfig(Settings):
    """Every knob of a GRPO run. Defaults: one step of the tiny policy on 2 CPU cores in seconds."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    seed: int = Field(0, description="seeds the task draw, each process's sampler and torch (set_seed)")
    learning_rate: float = Field(5e-4, gt=0, description="for the ~1 M-parameter tiny policy; the paper's 8B "
                                                         "run used 1e-6")
    tasks_per_step: int = Field(4, ge=1, description="tasks drawn per step; the paper: 16 per batch (4 keeps a "
                                                     "laptop step in seconds)")
    group_size: int = Field(8, ge=2, description="rollouts per task, the group the advantages are taken over; "
                                                 "the paper: 8")
    micro_batch_size: int = Field(16, ge=1, description="sequences per forward/backward: a memory knob only, "
                                                        "the update is the same for any value")
    shared_prompt: bool = Field(False, description="the update runs each group's shared prompt through the model "
                                "once and only the replies per rollout (`train/shared_prompt.py`), and the engine "
                                "prefills it once: the same logits and gradients within float rounding, less "
                                "work on long prompts (the demo turns it on). One process only")
    clip_low: float = Field(0.2, ge=0, description="eps_low of the clipped ratio, as in the ToolOrchestra "
                                                   "release (PPO's 0.2)")
    clip_high: float = Field(0.28, ge=0, description="eps_high (clip-higher, DAPO arXiv 2503.14476), as in the "
                                                     "ToolOrchestra release")
    kl_coef: float = Field(0.05, ge=0, description="k3 KL to the starting policy; a departure for small "
                                                   "policies, which without it collapsed onto one tool before "
                                                   "they learned to read P. 0 disables it (and the reference)")
    advantage_scale: Literal["std", "none"] = Field("std", description="'std': GRPO's (r - mean) / std, as in "
                                                    "the paper; 'none': mean-only (Dr. GRPO, arXiv 2503.20783)")
    loss_level: Literal["token", "sequence"] = Field("token", description="'token': every sampled token of the "
                                                     "batch weighs the same (DAPO's token-level mean: long rollouts "
                                                     "are not diluted); 'sequence': each rollout weighs the same")
    min_reward_spread: float | None = Field(1e-6, ge=0, description="groups whose reward std is at most this "
                                            "are left out of the update (the paper's filter: a group that "
                                            "scores the same everywhere teaches nothing); None keeps all")
    max_grad_norm: float = Field(1.0, gt=0, description="gradient clipping at 1.0, the usual GRPO/PPO setting")
    weight_decay: float = Field(0.0, ge=0, description="0: one optimiser step per batch of rollouts is too few "
                                                       "for decay to matter, and it would pull on LoRA adapters")
    warmup_steps: int = Field(0, ge=0, description="linear lr warm-up over this many optimiser steps; 0 since "
                                                   "the run starts from a warm start (SFT), not from scratch")
    decay_steps: int | None = Field(None, ge=1, description="after warm-up the lr falls linearly to 0 over this "
                                    "many steps (TRL's default shape); None keeps it constant, as the paper")
    lora: LoraSettings | None = Field(None, description="None = full fine-tuning (the paper's); LoRA for a "
                                                        "large policy on a small GPU")
    mixed_precision: Literal["auto", "amx", "no", "bf16", "fp16"] = Field(
        "auto", description="auto: bf16 where the GPU has it, else fp32 (CPU autocast is slower); amx: also bf16 on "
                            "a CPU with AMX: about 2x faster for SFT batches, but a rollout decoding 16 rows took "
                            "1.7x as long (benchmarks/bench_precision.py)")
    log_with: str | None = Field(None, description="an Accelerate tracker: 'tensorboard', 'wandb', ...; None: "
                                                   "the history is kept in memory and in checkpoints only")
    project_dir: str | None = Field(None, description="where trackers write (tensorboard needs it)")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="how each rollout is sampled "
                                   "(turns, tokens, temperature; with the transformers engine its log-probs "
                                   "are the ratio's denominator)")
    engine: Literal["transformers", "vllm"] = Field("transformers", description="what samples the rollouts: "
                                                    "'transformers' (the trained model itself) or 'vllm' (the "
                                                    "`vllm` extra; its weights are synced after every optimiser "
                                                    "step, and the ratio's denominator is the trainer's own "
                                                    "log-probs)")
    vllm: VLLMConfig = Field(default_factory=VLLMConfig, description="the vLLM engine's settings (engine: "
                             "vllm): colocated or a server, dtype, KV cache")
