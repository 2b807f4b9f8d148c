"""SFT warm start: teach a fresh policy the tool-call format on golden trajectories.

Golden trajectories are produced by the rollout itself, driven by a ScriptedEngine that writes a
task's golden calls and then its answer, so prompts, real tool observations, ids and the loss mask
are exactly those RL will see. The loss is cross-entropy on mask-1 ids only (the same mask as RL).

It must not teach the *choice* RL is meant to learn: where a task's golden data offers several valid
call sequences (`Golden.alternatives`), one is drawn uniformly at random, whatever the task's P.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import Sequence

import torch
from pydantic import BaseModel, ConfigDict, Field

from orchlib.chat import render_assistant
from orchlib.engines.scripted import ScriptedEngine
from orchlib.rollout import RolloutConfig, rollout
from orchlib.tasks import Task
from orchlib.trajectory import Trajectory

__all__ = ["SFTConfig", "SFTReport", "golden_script", "golden_trajectories", "sft_train"]


class SFTConfig(BaseModel):
    """Warm-start settings. Defaults teach the tiny policy the call format in well under a minute."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    seed: int = 0
    epochs: int = Field(3, ge=1, description="passes over the golden trajectories")
    learning_rate: float = Field(3e-3, gt=0, description="peak; high because the default policy is a randomly "
                                                         "initialised ~1 M model. Warm-up then cosine decay to 0")
    warmup_fraction: float = Field(0.1, ge=0, lt=1, description="share of steps spent warming up")
    batch_size: int = Field(16, ge=1)
    max_grad_norm: float = Field(1.0, gt=0)
    mixed_precision: str = Field("no", description="as Accelerate's flag; 'bf16' on a GPU that has it")


@dataclass
class SFTReport:
    losses: list[float] = field(default_factory=list)   # per optimiser step
    seconds: float = 0.0
    n_trajectories: int = 0
    n_tokens: int = 0


def golden_script(task: Task, rng: random.Random) -> list[str]:
    """The turns a golden policy writes: one sequence of calls (one turn each), then the answer."""
    if task.golden is None:
        raise ValueError(f"task {task.id!r} has no golden calls or answer")
    options = [task.golden.calls] + list(task.golden.alternatives)
    calls = rng.choice(options)
    turns = [render_assistant("", [c]) for c in calls]
    answer = task.golden.answer if task.golden.answer is not None else (task.answer or "")
    return turns + [answer]


def golden_trajectories(tasks: Sequence[Task], toolbox, tokenizer, config: RolloutConfig = RolloutConfig(),
                        seed: int = 0, per_task: int = 1) -> list[Trajectory]:
    """Run each task's golden script through the real rollout (real tools, real accounting)."""
    rng = random.Random(seed)
    out: list[Trajectory] = []
    for task in tasks:
        for _ in range(per_task):
            script = golden_script(task, rng)
            engine = ScriptedEngine(tokenizer, script)
            cfg = config.model_copy(update={"max_turns": max(config.max_turns, len(script)),
                                            "max_new_tokens": max(config.max_new_tokens, 512)})
            out += rollout([task], toolbox, engine, cfg, group_size=1)
    return out


def sft_train(model, tokenizer, trajectories: Sequence[Trajectory], config: SFTConfig = SFTConfig(),
              progress: bool = True) -> SFTReport:
    """Cross-entropy on the mask-1 ids of `trajectories`, with Accelerate. Trains `model` in place."""
    from accelerate import Accelerator
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    acc = Accelerator(mixed_precision=config.mixed_precision)
    torch.manual_seed(config.seed)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.learning_rate)
    steps = config.epochs * ((len(trajectories) + config.batch_size - 1) // config.batch_size)
    warm = max(1, int(config.warmup_fraction * steps))
    # decaying to 0 matters: sampled at temperature 1, a policy that stops at a high lr still makes
    # format slips on a fair share of turns
    def lr_factor(s: int) -> float:
        return (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, steps - warm)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    pmodel, opt, sched = acc.prepare(model, opt, sched)
    rng = random.Random(config.seed)
    order = list(range(len(trajectories)))
    report = SFTReport(n_trajectories=len(trajectories), n_tokens=sum(t.num_tokens for t in trajectories))
    pad = tokenizer.pad_token_id or 0
    bar = tqdm(total=steps, desc="SFT warm start", disable=not progress)
    pmodel.train()
    for _ in range(config.epochs):
        rng.shuffle(order)
        for i in range(0, len(order), config.batch_size):
            batch = [trajectories[j] for j in order[i:i + config.batch_size]]
            width = max(len(t.ids) for t in batch)
            ids = torch.full((len(batch), width), pad, dtype=torch.long)
            labels = torch.full((len(batch), width), -100, dtype=torch.long)
            attn = torch.zeros_like(ids)
            for r, t in enumerate(batch):
                n = len(t.ids)
                ids[r, :n], attn[r, :n] = torch.tensor(t.ids), 1
                m = torch.tensor(t.mask, dtype=torch.bool)
                labels[r, :n] = torch.where(m, torch.tensor(t.ids), torch.tensor(-100))
            ids, attn, labels = ids.to(acc.device), attn.to(acc.device), labels.to(acc.device)
            loss = pmodel(input_ids=ids, attention_mask=attn, labels=labels).loss  # shifts labels itself
            acc.backward(loss)
            acc.clip_grad_norm_(pmodel.parameters(), config.max_grad_norm)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            report.losses.append(loss.item())
            bar.update(1)
            bar.set_postfix(loss=f"{report.losses[-1]:.3f}")
    bar.close()
    pmodel.eval()
    report.seconds = time.perf_counter() - t0
    return report
