"""SFT warm start: teach a fresh policy the tool-call format on golden trajectories.

Golden trajectories are produced by the rollout itself, driven by a ScriptedEngine that writes a
task's golden calls and then its answer, so prompts, real tool observations, ids and the loss mask
are exactly those RL will see. The loss is cross-entropy on mask-1 ids only (the same mask as RL).

It must not teach the *choice* RL is meant to learn: where a task's golden data offers several valid
call sequences (`Golden.alternatives`), one is drawn uniformly at random, whatever the task's P
(`alternatives="draw"`), or every one is written (`alternatives="each"`). A draw made once per task is
a label the policy can learn by heart over several epochs: after the demo's phase 2 its tiny policy
sampled the generalist on 91 % of GSM8K questions on one seed and 6 % on another (first 10 GRPO steps,
T = 0.7). With every alternative written, the choice's target is uniform for each task: p(generalist)
was then 0.46-0.56 on every test task of both seeds (one forward pass each).

`sft_train` also takes plain `SFTExample(ids, mask)` pairs (e.g. short drills that teach a skill
outside the orchestration format), a step budget instead of epochs, and an `until` check that ends
training early once a skill is there (a gate measured on held-out data, not on the loss).
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import Callable, Literal, Protocol, Sequence

import torch
from pydantic import ConfigDict, Field, model_validator

from orchlib.chat import render_assistant
from orchlib.configurations import episode_views
from orchlib.engines.scripted import ScriptedEngine
from orchlib.env import Environment
from orchlib.rollout import RolloutConfig, rollout
from orchlib.settings import Settings
from orchlib.tasks import Task
from orchlib.train.shared_prompt import can_share, first_marked, shared_prompt_logits
from orchlib.trajectory import Trajectory

__all__ = ["SFTConfig", "SFTReport", "SFTExample", "golden_script", "golden_trajectories", "sft_train",
           "batch_tensors", "sft_loss", "sft_lr_factor"]


class SFTConfig(Settings):
    """Warm-start settings. Defaults teach the tiny policy the call format in well under a minute."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    seed: int = 0
    epochs: int = Field(3, ge=1, description="passes over the golden trajectories")
    max_steps: int | None = Field(None, ge=1, description="a step budget instead of `epochs` (reshuffled passes)")
    schedule: Literal["cosine", "constant"] = Field("cosine", description="after warm-up; 'constant' suits a "
                                                    "budget that an `until` check usually cuts short")
    learning_rate: float = Field(3e-3, gt=0, description="peak; high because the default policy is a randomly "
                                                         "initialised ~1 M model. Warm-up then cosine decay to 0")
    warmup_fraction: float = Field(0.1, ge=0, lt=1, description="share of steps spent warming up")
    cooldown_steps: int = Field(0, ge=0, description="with 'constant': over the last this many steps the lr falls "
                                "linearly toward 0, to 1/cooldown_steps of it at the last (warmup-stable-decay); when "
                                "`until` ends training, they follow its stop. At a constant lr the weights end where "
                                "the last steps' noise put them")
    batch_size: int = Field(16, ge=1)
    max_grad_norm: float = Field(1.0, gt=0)
    shared_prompt: bool = Field(False, description="a head that several examples of a batch begin with (the system "
                                "turn) goes through the model once (`train/shared_prompt.py`): the same loss and "
                                "gradients, less work. One process only")
    mixed_precision: Literal["auto", "amx", "no", "bf16", "fp16"] = Field(
        "auto", description="auto: bf16 where the GPU has it, else fp32; amx: also bf16 on a CPU with AMX (as "
                           "GRPOConfig: one precision per process)")

    @model_validator(mode="after")
    def _cooldown_needs_constant(self) -> SFTConfig:
        if self.cooldown_steps and self.schedule != "constant":
            raise ValueError(f"cooldown_steps={self.cooldown_steps} needs schedule='constant' (the cosine "
                             "schedule already falls to 0)")
        return self


@dataclass
class SFTReport:
    losses: list[float] = field(default_factory=list)   # per optimiser step
    seconds: float = 0.0
    n_trajectories: int = 0
    n_tokens: int = 0
    stopped_early: bool = False                         # `until` said the skill was there


class _Example(Protocol):
    ids: list[int]
    mask: list[int]


@dataclass
class SFTExample:
    """A training sequence outside a rollout: ids, and 1 where the loss applies."""

    ids: list[int]
    mask: list[int]

    def __post_init__(self):
        if len(self.ids) != len(self.mask):
            raise ValueError(f"SFTExample: {len(self.ids)} ids but {len(self.mask)} mask entries")

    @property
    def num_tokens(self) -> int:
        return sum(self.mask)


def golden_script(task: Task, rng: random.Random) -> list[str]:
    """The turns a golden policy writes: one sequence of calls (one turn each), then the answer."""
    if task.golden is None:
        raise ValueError(f"task {task.id!r} has no golden calls or answer")
    options = [task.golden.calls] + list(task.golden.alternatives)
    calls = rng.choice(options)
    turns = [render_assistant("", [c]) for c in calls]
    answer = task.golden.answer if task.golden.answer is not None else (task.answer or "")
    return turns + [answer]


def _each_alternative(task: Task) -> list[Task]:
    """`task` once per golden call sequence, that sequence its only one (a task without golden data as is)."""
    if task.golden is None:
        return [task]
    return [task.model_copy(update={"golden": task.golden.model_copy(update={"calls": calls, "alternatives": []})})
            for calls in [task.golden.calls] + list(task.golden.alternatives)]


def golden_trajectories(tasks: Sequence[Task], toolbox, tokenizer, config: RolloutConfig = RolloutConfig(),
                        seed: int = 0, per_task: int = 1,
                        alternatives: Literal["draw", "each"] = "draw", configurations=None) -> list[Trajectory]:
    """Run each task's golden script through the real rollout (real tools, real accounting).

    `per_task` scripts per task, each drawing one of its alternatives ("draw"), or `per_task` of each
    alternative in turn ("each": the choice's target is then uniform per task). `configurations` (an
    Environment's `configuration_space`, or a space): each script runs under its episode's configuration
    (the k-th script of a task under episode k), its golden calls, named by backend, sent to their aliases."""
    if alternatives not in ("draw", "each"):
        raise ValueError(f'golden_trajectories: alternatives must be "draw" or "each", not {alternatives!r}')
    rng = random.Random(seed)
    out: list[Trajectory] = []
    for task in tasks:
        options = [task] if alternatives == "draw" else _each_alternative(task)
        for k, option in enumerate(o for o in options for _ in range(per_task)):
            view = episode_views([option], toolbox, configurations, k)[0]
            shown = option if view is None else _under_aliases(option, view.configuration.aliases)
            script = golden_script(shown, rng)
            engine = ScriptedEngine(tokenizer, script)
            cfg = config.model_copy(update={"max_turns": max(config.max_turns, len(script)),
                                            "max_new_tokens": max(config.max_new_tokens, 512)})
            out += rollout(Environment(name="golden", train=[option], tools=toolbox), engine, config=cfg,
                           configurations=None if view is None else (lambda _t, c=view.configuration: c))
    return out


def _under_aliases(task: Task, aliases: dict[str, str]) -> Task:
    """`task` with its golden calls renamed from backends to the aliases (alias → backend) they are shown as."""
    if task.golden is None:
        return task
    to_alias = {b: a for a, b in aliases.items()}
    rename = lambda calls: [c.model_copy(update={"name": to_alias.get(c.name, c.name)}) for c in calls]  # noqa: E731
    golden = task.golden.model_copy(update={"calls": rename(task.golden.calls),
                                            "alternatives": [rename(a) for a in task.golden.alternatives]})
    return task.model_copy(update={"golden": golden})


def sft_train(model, tokenizer, trajectories: Sequence[Trajectory | SFTExample], config: SFTConfig = SFTConfig(),
              progress: bool = True, until: Callable[[], bool] | None = None, check_every: int = 100,
              desc: str = "SFT warm start") -> SFTReport:
    """Cross-entropy on the mask-1 ids of `trajectories`, with Accelerate. Trains `model` in place.

    `until`, if given, is called every `check_every` steps (model in eval mode); True ends training."""
    from tqdm.auto import tqdm

    from orchlib.train.accel import make_accelerator

    t0 = time.perf_counter()
    acc = make_accelerator(config.mixed_precision, cpu=not torch.cuda.is_available())
    torch.manual_seed(config.seed)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.learning_rate)
    per_epoch = (len(trajectories) + config.batch_size - 1) // config.batch_size
    steps = config.max_steps or config.epochs * per_epoch
    warm = max(1, int(config.warmup_fraction * steps))
    cool = min(config.cooldown_steps, steps)
    # reads `steps` when called: an `until` stop below moves the end, and with it the cooldown
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: sft_lr_factor(s, warm, steps, config.schedule, cool))
    pmodel, opt, sched = acc.prepare(model, opt, sched)
    share = config.shared_prompt and can_share(model, acc.num_processes)
    rng = random.Random(config.seed)
    order = list(range(len(trajectories)))
    report = SFTReport(n_trajectories=len(trajectories), n_tokens=sum(t.num_tokens for t in trajectories))
    pad = tokenizer.pad_token_id or 0
    bar = tqdm(total=steps, desc=desc, disable=not progress)
    pmodel.train()
    done = 0
    while done < steps:
        rng.shuffle(order)
        for i in range(0, len(order), config.batch_size):
            if done == steps:
                break
            report.losses.append(_step([trajectories[j] for j in order[i:i + config.batch_size]], pmodel, acc, opt,
                                       sched, pad, config.max_grad_norm, share))
            done += 1
            bar.update(1)
            bar.set_postfix(loss=f"{report.losses[-1]:.3f}")
            if until is not None and not report.stopped_early and done % check_every == 0 and done < steps:
                pmodel.eval()
                report.stopped_early = bool(until())
                pmodel.train()
                if report.stopped_early:  # the cooldown's steps (none without one) still to run
                    steps = min(done + cool, steps)
                    bar.total = steps
    bar.close()
    pmodel.eval()
    report.seconds = time.perf_counter() - t0
    return report


def sft_lr_factor(step: int, warm: int, total: int, schedule: str, cooldown: int = 0) -> float:
    """The lr of 0-based `step` as a share of the peak, in a run of `total` steps: a linear warm-up over `warm`
    steps, then constant or a cosine to 0 at `total`; with a `cooldown` (constant only), linear from the lr it
    starts at down to 1/cooldown of it at the last step. Decaying to 0 matters: sampled at temperature 1, a
    policy that stops at a high lr still makes format slips on a fair share of turns."""
    if cooldown and step >= total - cooldown:
        return (total - step) / cooldown * min(1.0, (total - cooldown + 1) / warm)
    if step < warm:
        return (step + 1) / warm
    if schedule == "constant":
        return 1.0
    return 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm)))


def _step(batch: Sequence[_Example], pmodel, acc, opt, sched, pad: int, max_grad_norm: float,
          share: bool = False) -> float:
    loss = sft_loss(pmodel, *batch_tensors(batch, pad, acc.device), share)
    acc.backward(loss)
    acc.clip_grad_norm_(pmodel.parameters(), max_grad_norm)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


def batch_tensors(batch: Sequence[_Example], pad: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, attention mask, labels) of `batch`, right-padded; labels are -100 where the mask is 0."""
    width = max(len(t.ids) for t in batch)
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for r, t in enumerate(batch):
        n = len(t.ids)
        ids[r, :n], attn[r, :n] = torch.tensor(t.ids), 1
        m = torch.tensor(t.mask, dtype=torch.bool)
        labels[r, :n] = torch.where(m, torch.tensor(t.ids), torch.tensor(-100))
    return ids.to(device), attn.to(device), labels.to(device)


def sft_loss(pmodel, ids: torch.Tensor, attn: torch.Tensor, labels: torch.Tensor, share: bool = False) -> torch.Tensor:
    """Mean cross-entropy of the labelled ids. Logits are taken only from the first position that predicts
    a labelled id: on the orchestration prompts (~170 ids before a ~25-id reply) the vocabulary projection
    and its softmax over the prompt were most of a step's work, and their result was never used. With
    `share`, a head that several rows begin with (the system turn) is computed once (`shared_prompt`)."""
    target = labels[:, 1:]
    hit = (target != -100).any(0).nonzero()
    start = int(hit[0]) if len(hit) else 0
    keep = ids.shape[1] - start
    if share:
        logits = shared_prompt_logits(pmodel, ids, attn, attn.sum(1).tolist(), start,
                                      starts=first_marked(target != -100))
    elif "logits_to_keep" in _forward_params(pmodel):
        logits = pmodel(input_ids=ids, attention_mask=attn, logits_to_keep=keep).logits
    else:
        logits = pmodel(input_ids=ids, attention_mask=attn).logits[:, -keep:]
    # the labelled positions alone go through the softmax (a prompt's tail past `start` is often most of them)
    target = target[:, start:]
    scored = target != -100
    return torch.nn.functional.cross_entropy(logits[:, :-1][scored].float(), target[scored])


def _forward_params(pmodel) -> set[str]:
    import inspect

    base = pmodel.module if hasattr(pmodel, "module") else pmodel
    return set(inspect.signature(base.forward).parameters)
