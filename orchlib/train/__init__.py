"""Training as the paper does it: the GRPO loss (pure functions), the GRPO and SFT loops, their extension
points (`Hooks`, where `orchlib.experiments` plugs in), atomic checkpoints."""

from orchlib.train.config import GRPOConfig, LoraSettings
from orchlib.train.grpo import StepReport, Trainer
from orchlib.train.setup import lr_factor
from orchlib.train.hooks import Hooks
from orchlib.train.sft import SFTConfig, SFTExample, SFTReport, golden_trajectories, sft_train

__all__ = ["GRPOConfig", "Hooks", "LoraSettings", "SFTConfig", "SFTReport", "StepReport", "Trainer",
           "SFTExample", "golden_trajectories", "lr_factor", "sft_train"]
