"""Training: the GRPO loss (pure functions), the GRPO and SFT loops, atomic checkpoints."""

from orchlib.train.grpo import GRPOConfig, LoraSettings, StepReport, Trainer, lr_factor
from orchlib.train.sft import SFTConfig, SFTExample, SFTReport, golden_trajectories, sft_train

__all__ = ["GRPOConfig", "LoraSettings", "SFTConfig", "SFTReport", "StepReport", "Trainer",
           "SFTExample", "golden_trajectories", "lr_factor", "sft_train"]
