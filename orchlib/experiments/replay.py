"""SFT replay during GRPO: each update also takes `coef` x the cross-entropy of a few warm-start examples.

The reward says nothing about a skill the policy already has until the skill breaks. InstructGPT's PPO-ptx
(Ouyang et al. 2022, arXiv 2203.02155, eq. 2) mixes the pretraining loss into the RL objective for that
reason; here the mixed-in loss is the warm start's own, on a fresh draw of its examples each step:

    trainer = Trainer(policy, env, GRPOConfig(),
                      hooks=VariantConfig(...).hooks().with_extra_loss(SFTReplay(examples, coef=0.5)))

The examples must not teach the choice GRPO is learning: give `unlabel_names` golden trajectories whose
tool is a free choice, and their names leave the loss while the rest of the call (the format, the copied
arguments) stays in it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from orchlib.chat import call_name_mask
from orchlib.train.sft import SFTExample, batch_tensors, sft_loss

__all__ = ["SFTReplay", "unlabel_names"]


def unlabel_names(example: SFTExample, tokenizer) -> SFTExample:
    """`example` with the ids that spell a tool call's name taken out of the loss."""
    names = call_name_mask(example.ids, example.mask, tokenizer)
    return SFTExample(list(example.ids), [m * (1 - n) for m, n in zip(example.mask, names)])


@dataclass
class SFTReplay:
    """An `ExtraLoss` (`orchlib.train.hooks`): `coef` x the mean cross-entropy of `batch_size` examples drawn
    afresh each update. The draw is seeded by (seed, step), so a resumed run replays what an unbroken one
    would have."""

    examples: Sequence[Any]  # anything with .ids and .mask (SFTExample, Trajectory)
    coef: float = 1.0
    batch_size: int = 8
    seed: int = 0

    def __post_init__(self):
        if not self.examples:
            raise ValueError("SFTReplay needs at least one example")
        if self.coef <= 0 or self.batch_size < 1:
            raise ValueError(f"SFTReplay: coef must be > 0 and batch_size >= 1, got {self.coef} and {self.batch_size}")
        self.examples = list(self.examples)  # sampled from every step

    @property
    def record(self) -> dict[str, Any]:
        """What a checkpoint saves of this replay (`Hooks.with_extra_loss`)."""
        return {"coef": self.coef, "batch_size": self.batch_size, "seed": self.seed, "examples": len(self.examples)}

    def draw(self, step: int) -> list[Any]:
        rng = random.Random(f"replay:{self.seed}:{step}")
        return rng.sample(self.examples, min(self.batch_size, len(self.examples)))

    def __call__(self, model, step: int, pad_id: int, share: bool) -> tuple[torch.Tensor, dict[str, float]]:
        device = next(model.parameters()).device
        ids, attn, labels = batch_tensors(self.draw(step), pad_id, device)
        loss = sft_loss(model, ids, attn, labels, share)
        return self.coef * loss, {"replay/loss": float(loss.detach())}
