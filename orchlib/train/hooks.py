"""Where a GRPO step can be changed without touching the loop: four small Protocols, the paper's own
implementation of each, and `Hooks`, the bundle a `Trainer` is given.

    draw tasks  ── TaskSampler(rng, tasks, k) -> bundles of tasks (a bundle is rolled out on one process)
    advantages  ── AdvantageTransform(adv, keep, tasks, groups) -> (adv, keep)
    update      ── TokenLoss: prepare(groups, advantages, tokenizer) once per step, then (batch, config) per
                   micro-batch -> (loss, stats)
    extra loss  ── ExtraLoss(model, step, pad_id, share) -> (loss, stats), added to each update's (optional;
                   `orchlib.experiments.replay`'s SFT replay is one)

`Hooks()` is the paper's GRPO. `orchlib.experiments.variants.VariantConfig(...).hooks()` builds the
experimental ones; any object with the same call shape plugs in the same way.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Protocol, Sequence

import torch

from orchlib.tasks import Task
from orchlib.train.config import GRPOConfig
from orchlib.train.loss import grpo_loss
from orchlib.trajectory import Trajectory

__all__ = ["TaskSampler", "AdvantageTransform", "TokenLoss", "ExtraLoss", "MicroBatch", "Hooks", "uniform_draw",
           "keep_advantages", "needs_full_logprobs", "PaperLoss"]


class TaskSampler(Protocol):
    def __call__(self, rng: random.Random, tasks: Sequence[Task], k: int) -> list[list[Task]]:
        """`k` bundles of the step's tasks, drawn with `rng` (the trainer's, checkpointed). The tasks of a
        bundle are rolled out on the same process, so whatever compares them sees them all."""


class AdvantageTransform(Protocol):
    def __call__(self, adv: torch.Tensor, keep: torch.Tensor, tasks: list[Task],
                 groups: list[list[Trajectory]]) -> tuple[torch.Tensor, torch.Tensor]:
        """This process's advantages [n_groups, G] and kept groups [n_groups] bool -> new ones.
        `tasks[g]` is group g's task as rolled out, `groups[g]` its G trajectories."""


@dataclass
class MicroBatch:
    """One micro-batch, as the loss sees it. Column j of every [B, T] tensor scores ids[:, start + 1 + j]:
    T covers the positions from the first one that predicts a sampled id."""

    logp: torch.Tensor            # [B, T] log-probs of the sampled ids (with grad)
    logp_all: torch.Tensor | None  # [B, T, V] their log-softmax (with grad); None unless needs_full_logprobs
    old_logp: torch.Tensor        # [B, T] the ratio's denominator: the engine's (or, where those are not
    #                               exact, the trainer's own) log-probs of the weights that sampled
    adv: torch.Tensor             # [B]
    mask: torch.Tensor            # [B, T] 1 on sampled ids
    entropy: torch.Tensor         # [B, T] (no grad)
    start: int
    extra: list[Any]              # per row: what TokenLoss.prepare gave for its trajectory
    ref_logprobs: Callable[..., torch.Tensor]  # (full=False) -> the reference's [B, T], or [B, T, V] if full


class TokenLoss(Protocol):
    """The update's loss. `needs_full_logprobs`: whether it reads `MicroBatch.logp_all`; only then is the
    [B, T, V] log-softmax kept with its graph (for a large vocabulary, the largest tensor of the update).
    A loss that does not say gets it (`needs_full_logprobs(loss)`)."""

    needs_full_logprobs: bool

    def prepare(self, groups: list[list[Trajectory]], advantages: list[list[float]], tokenizer) -> list[Any]:
        """Once per step, over the kept groups: one entry per trajectory, handed back in `MicroBatch.extra`."""

    def __call__(self, batch: MicroBatch, config: GRPOConfig) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The micro-batch's loss (a mean over its sampled tokens, as `config.loss_level` says) and stats."""


class ExtraLoss(Protocol):
    def __call__(self, model, step: int, pad_id: int, share: bool) -> tuple[torch.Tensor, dict[str, float]]:
        """A loss added to update `step`'s (the model in train mode; `share`: the trainer computes a head
        that rows share once), and its stats for the step's metrics. A step whose groups were all left out
        takes no update, and so no extra loss either."""


def needs_full_logprobs(loss: TokenLoss) -> bool:
    """Whether the trainer hands `loss` the full log-softmax (`MicroBatch.logp_all`): what the loss
    declares, and True for a loss that declares nothing (it may read it)."""
    return bool(getattr(loss, "needs_full_logprobs", True))


def uniform_draw(rng: random.Random, tasks: Sequence[Task], k: int) -> list[list[Task]]:
    """`k` distinct tasks at random, each its own bundle."""
    return [[t] for t in rng.sample(list(tasks), k)]


def keep_advantages(adv: torch.Tensor, keep: torch.Tensor, tasks: list[Task],
                    groups: list[list[Trajectory]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The paper's: advantages and the spread filter as they are."""
    return adv, keep


class PaperLoss:
    """`loss.grpo_loss` on every sampled id, with the k3 KL to the reference when kl_coef > 0."""

    needs_full_logprobs = False  # both terms read the sampled ids' log-probs only

    def prepare(self, groups, advantages, tokenizer) -> list[Any]:
        return [None for g in groups for _ in g]

    def __call__(self, batch: MicroBatch, config: GRPOConfig):
        ref = batch.ref_logprobs() if config.kl_coef > 0 else None
        return grpo_loss(batch.logp, batch.old_logp, batch.adv, batch.mask, ref, clip_low=config.clip_low,
                         clip_high=config.clip_high, kl_coef=config.kl_coef, level=config.loss_level)


@dataclass(frozen=True)
class Hooks:
    """What a Trainer calls at its four extension points; the defaults are the paper's GRPO.
    `record` (JSON) says what built them: it is saved with checkpoints, and resuming checks it."""

    sampler: TaskSampler = uniform_draw
    advantage: AdvantageTransform = keep_advantages
    token_loss: TokenLoss = field(default_factory=PaperLoss)
    record: dict[str, Any] = field(default_factory=dict)
    extra_loss: ExtraLoss | None = None

    def with_extra_loss(self, extra: ExtraLoss) -> Hooks:
        """These hooks with `extra` added to every update; its `record` (or its type's name) is recorded."""
        return replace(self, extra_loss=extra,
                       record={**self.record, "extra_loss": getattr(extra, "record", type(extra).__name__)})
