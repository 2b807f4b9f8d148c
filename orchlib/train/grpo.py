"""GRPO for orchestrators (ToolOrchestra, arXiv 2511.21689), one step at a time, on Accelerate (+ PEFT LoRA).

    trainer = Trainer(policy, env, GRPOConfig())   # env: an orchlib.Environment (tasks, tools, reward)
    report = trainer.step()      # draw tasks → rollout → rewards → advantages → update → metrics
    trainer.run(50)              # a loop over step() with a progress bar
    trainer.save("ckpt"); Trainer.resume("ckpt", env)

Run on several GPUs (or, on a machine without them, several CPU processes with gloo):

    accelerate launch --multi_gpu --num_processes 2 script.py

Every process draws the same tasks for a step and rolls out its own share of them (whole bundles: a
task's groups never straddle processes), so advantages are computed locally and DDP averages the
gradients. Experimental objectives and samplers plug in through `hooks=` (see `train/hooks.py` and
`orchlib/experiments/variants.py`); this loop never looks at which ones, nor at which engine samples: the
engine says whether it shares the trainer's weights and whether its log-probs are the trainer's own
(`engines/base.py`'s `TrainableEngine`). What a step reports is `train/metrics.py`'s; save and resume
are `train/saving.py`'s. The same method as one file, without the engineering: `examples/paper_grpo.py`.

Where this departs from the paper: laptop defaults (lr 5e-4 for a ~1 M-parameter policy instead of 1e-6
for 8B; 4 tasks × 8 rollouts per step instead of 16 × 8), one optimiser step per batch of rollouts (so
the ratio starts at 1 and clipping guards only numerical drift), and a k3 KL term to the starting
policy (coefficient 0.05) that kept small policies from collapsing onto one tool before they learn to
read P. GRPOConfig's field descriptions give each default's reason.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import math
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from orchlib.engines.base import TrainableEngine, exact_logprobs, shares_weights
from orchlib.configurations import reward_preference
from orchlib.env import Environment
from orchlib.rollout import rollout
from orchlib.train.config import GRPOConfig, LoraSettings
from orchlib.train.hooks import Hooks, MicroBatch, needs_full_logprobs
from orchlib.train.logprobs import sampled_logprobs
from orchlib.train.loss import group_advantages, keep_groups
from orchlib.train.metrics import flat, gather_dicts, step_metrics, sum_dicts, term_means
from orchlib.train.saving import resume_trainer, save_trainer
from orchlib.train.setup import lr_factor, make_engine
from orchlib.train.shared_prompt import can_share, first_marked, shared_prompt_logits
from orchlib.trajectory import Trajectory

__all__ = ["LoraSettings", "GRPOConfig", "StepReport", "Trainer", "TrainingDiverged"]


class TrainingDiverged(ValueError):
    """A step's loss or gradient norm was not finite; the step was not applied (weights and optimizer are
    as before it), so the last checkpoint and the trainer in memory are both still good."""


@dataclass
class StepReport:
    """What one step did. `metrics` are over all processes; `trajectories` are this process's."""

    step: int
    metrics: dict[str, float]
    trajectories: list[Trajectory] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    advantages: list[float] = field(default_factory=list)


class Trainer:
    def __init__(self, policy, env: Environment, config: GRPOConfig | None = None, *, hooks: Hooks | None = None,
                 policy_source: str | None = None):
        """`policy`: 'tiny' / 'small', a Hugging Face id or folder, or a (model, tokenizer) pair. `env`: the
        Environment whose train tasks, tools and reward the run uses (`trainer.env`: set another, e.g.
        `trainer.env = trainer.env.replace(train=...)`, and the next steps draw from it). `hooks`: the
        sampler, advantage transform and token loss (default: the paper's, `Hooks()`)."""
        from accelerate.utils import set_seed

        from orchlib.models import resolve_policy
        from orchlib.train.accel import make_accelerator

        _check_environment("Trainer", env)
        config = config if config is not None else GRPOConfig()
        self.env = env
        self.config = config
        self.hooks = hooks if hooks is not None else Hooks()
        set_seed(config.seed)
        model, self.tokenizer, source = resolve_policy(policy)
        self.policy_source = policy_source or source
        if config.lora:
            from peft import LoraConfig, get_peft_model

            lc = config.lora
            model = get_peft_model(model, LoraConfig(r=lc.r, lora_alpha=lc.alpha, lora_dropout=lc.dropout,
                                                     target_modules=lc.target_modules, task_type="CAUSAL_LM"))
        # cpu=True where there is no GPU: only then does Accelerate start a gloo process group under
        # `accelerate launch --multi_gpu` / torchrun (MULTI_CPU); its `--cpu` flag alone runs one process
        self.accelerator = make_accelerator(config.mixed_precision, log_with=config.log_with,
                                            project_dir=config.project_dir, cpu=not torch.cuda.is_available())
        self.ref_model = None
        if config.kl_coef > 0 and not config.lora:  # full fine-tuning needs a frozen copy as the reference
            self.ref_model = copy.deepcopy(model).eval().requires_grad_(False).to(self.accelerator.device)
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda s: lr_factor(s, config.warmup_steps, config.decay_steps))
        self.model, self.optimizer, self.scheduler = self.accelerator.prepare(model, optimizer, scheduler)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        self._can_skip_logits = "logits_to_keep" in inspect.signature(base.forward).parameters
        self._share_prompts = config.shared_prompt and can_share(model, self.accelerator.num_processes)
        acc = self.accelerator
        self.engine: TrainableEngine = make_engine(config, acc.unwrap_model(self.model), self.tokenizer,
                                                   seed=config.seed * 1000 + acc.process_index)
        self.rng = random.Random(config.seed)
        self.step_count = 0
        self.history: list[dict[str, float]] = []
        if config.log_with:
            acc.init_trackers("orchlib", config=flat({**config.model_dump(mode="json"), **self.hooks.record}))

    @property
    def env(self) -> Environment:
        """The world the next steps draw from: its train tasks, tools and reward."""
        return self._env

    @env.setter
    def env(self, env: Environment) -> None:
        _check_environment("Trainer.env", env)
        self._env = env

    @property
    def toolbox(self):
        """`env.tools`."""
        return self._env.tools

    @property
    def reward(self):
        """`env.reward`."""
        return self._env.reward

    # ------------------------------------------------------------------ one step
    def step(self) -> StepReport:
        """One GRPO step: draw tasks → rollout → rewards → advantages → update → metrics."""
        acc, cfg, G, hooks = self.accelerator, self.config, self.config.group_size, self.hooks
        t0 = time.perf_counter()
        # draw tasks: every process draws the same bundles and rolls out its share, whole bundles at a time
        pool = list(self.env.train)
        bundles = hooks.sampler(self.rng, pool, min(cfg.tasks_per_step, len(pool)))
        local = [t for bundle in bundles[acc.process_index::acc.num_processes] for t in bundle]
        # rollout: G trajectories per task, group after group
        trajs = rollout(self.env, self.engine, config=cfg.rollout, group_size=G, tasks=local,
                        episode=self.step_count) if local else []  # episode: this step's tool configurations
        self.engine.clear_prefix_cache()  # the update below makes the kept keys/values stale: free them now
        t1 = time.perf_counter()
        groups = [trajs[i * G:(i + 1) * G] for i in range(len(local))]
        # rewards, under the P each task's prompt showed
        rewards = np.array([self.reward(g, P=reward_preference(t, g)) for g, t in zip(groups, local)], dtype=np.float64)
        rewards = rewards.reshape(len(local), G)
        terms = term_means(self.reward, groups, local, acc.num_processes)
        # advantages within each group; groups without reward spread are left out (the paper's filter)
        r = torch.tensor(rewards, dtype=torch.float32)
        adv = group_advantages(r, cfg.advantage_scale) if len(local) else r  # no tasks here: no std to take
        keep = torch.ones(len(local), dtype=torch.bool)
        if cfg.min_reward_spread is not None and len(local):
            keep = keep_groups(r, cfg.min_reward_spread)
        adv, keep = hooks.advantage(adv, keep, local, groups)
        t2 = time.perf_counter()
        # update: one optimiser step over the kept groups, on every process together
        lr = self.scheduler.get_last_lr()[0]  # the lr this step's update uses
        kept_groups = [(g, a) for g, a, k in zip(groups, adv.tolist(), keep.tolist()) if k]
        extra = hooks.token_loss.prepare([g for g, _ in kept_groups], [a for _, a in kept_groups], self.tokenizer)
        upd = self._update([t for g, _ in kept_groups for t in g], [x for _, a in kept_groups for x in a], extra)
        synced = not shares_weights(self.engine) and "skipped" not in upd
        if synced:  # the engine samples the next step's rollouts from a copy of the weights of its own
            self.engine.sync_weights(acc.unwrap_model(self.model))
        t3 = time.perf_counter()
        # metrics, over every process
        self.step_count += 1
        metrics = step_metrics(trajs, rewards.flatten().tolist(), terms, keep, upd, adv.flatten().tolist(), G,
                               self.step_count, acc.num_processes)
        times = {"time/rollout": t1 - t0, "time/reward": t2 - t1, "time/update": t3 - t2, "time/step": t3 - t0}
        if synced:
            times["time/sync"] = self.engine.last_sync["seconds"]  # a part of time/update
        if acc.num_processes > 1:  # the step lasts as long as its slowest process
            times = {k: max(d[k] for d in gather_dicts(times)) for k in times}
        metrics.update(times)
        metrics["lr"] = lr
        self.history.append(metrics)
        if cfg.log_with:
            acc.log(metrics, step=self.step_count)
        return StepReport(self.step_count, metrics, trajs, rewards.flatten().tolist(), adv.flatten().tolist())

    def run(self, n: int, progress: bool = True,
            on_step: Callable[[StepReport], None] | None = None) -> list[StepReport]:
        """`n` steps with a progress bar; `on_step(report)` runs after each (it may add to
        `report.metrics`, which is the history's entry for the step)."""
        from tqdm.auto import tqdm

        reports = []
        bar = tqdm(range(n), desc="GRPO", disable=not progress or not self.accelerator.is_main_process)
        for _ in bar:
            reports.append(self.step())
            if on_step is not None:
                on_step(reports[-1])
            m = reports[-1].metrics
            bar.set_postfix(reward=f"{m['reward']:.3f}", acc=f"{m['accuracy']:.2f}")
        return reports

    def _update(self, trajs: list[Trajectory], advantages: list[float], extra: list[Any]) -> dict[str, float]:
        """One optimiser step over the kept trajectories (micro-batched); all processes take part.
        `extra`: `hooks.token_loss.prepare`'s entry for each trajectory."""
        acc, cfg = self.accelerator, self.config
        n_tok = sum(sum(t.mask[1:]) for t in trajs)
        totals = acc.gather(torch.tensor([len(trajs), n_tok], device=acc.device).reshape(1, 2)).sum(0)
        if int(totals[0]) == 0:  # every group was filtered out, on every process: nothing to learn
            return {"skipped": 1.0}
        self.model.train()
        denom = max(n_tok, 1) if cfg.loss_level == "token" else max(len(trajs), 1)
        stats: dict[str, float] = Counter()
        extra_stats: dict[str, float] = {}
        mismatch_max = 0.0
        batches = [list(range(i, min(i + cfg.micro_batch_size, len(trajs))))
                   for i in range(0, len(trajs), cfg.micro_batch_size)] or [[]]
        for bi, idx in enumerate(batches):
            last = bi == len(batches) - 1
            ctx = acc.no_sync(self.model) if not last else contextlib.nullcontext()
            with ctx:
                loss, s = self._micro_loss([trajs[i] for i in idx], [advantages[i] for i in idx],
                                           [extra[i] for i in idx], denom)
                if last and self.hooks.extra_loss is not None:  # with the last micro-batch: one gradient sync
                    more, extra_stats = self.hooks.extra_loss(self.model, self.step_count,
                                                              self.tokenizer.pad_token_id or 0, self._share_prompts)
                    loss = loss + more
                acc.backward(loss)
            mismatch_max = max(mismatch_max, s.pop("_mismatch_max"))
            for k, v in s.items():
                stats[k] += v
        grad_norm = acc.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
        if acc.num_processes > 1:  # token-weighted means over every process, not just this one
            stats = sum_dicts(gather_dicts(dict(stats)))
            mismatch_max = max(d["m"] for d in gather_dicts({"m": mismatch_max}))
        # A NaN or inf would be written into every weight and reported as a step: refuse the step instead
        # (stats and the norm are the same on every process here, so all of them stop together).
        if not (math.isfinite(stats.get("loss", 0.0)) and math.isfinite(float(grad_norm))):
            self.optimizer.zero_grad(set_to_none=True)
            raise TrainingDiverged(f"step {self.step_count + 1}: training diverged (loss {stats.get('loss', 0.0)}, "
                                   f"gradient norm {float(grad_norm)}); the step was not applied")
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        out = {k: v / max(stats.get("_weight", 1.0), 1e-12) for k, v in stats.items() if k != "_weight"}
        out["grad_norm"] = float(grad_norm)
        out["logprob_mismatch/max"] = mismatch_max
        out.update(extra_stats)  # this process's
        return out

    def _micro_loss(self, trajs: list[Trajectory], advantages: list[float], extra: list[Any], denom: int):
        """Loss of one micro-batch (`hooks.token_loss`), weighted so the sum over micro-batches is the
        batch mean."""
        cfg, dev = self.config, self.accelerator.device
        if not trajs:  # this process kept nothing: a zero loss that still touches every parameter (DDP)
            dummy = torch.tensor([[self.tokenizer.pad_token_id or 0]], device=dev)
            return self.model(input_ids=dummy).logits.sum() * 0.0, {"_mismatch_max": 0.0}
        width = max(len(t.ids) for t in trajs)
        pad = self.tokenizer.pad_token_id or 0
        ids = torch.full((len(trajs), width), pad, dtype=torch.long)
        attn = torch.zeros_like(ids)
        mask = torch.zeros((len(trajs), width), dtype=torch.float32)
        old = torch.zeros((len(trajs), width), dtype=torch.float32)
        for i, t in enumerate(trajs):  # right padding: positions start at 0 for every row
            n = len(t.ids)
            ids[i, :n], attn[i, :n] = torch.tensor(t.ids), 1
            mask[i, :n], old[i, :n] = torch.tensor(t.mask, dtype=torch.float32), torch.tensor(t.logprobs)
        ids, attn, mask, old = ids.to(dev), attn.to(dev), mask[:, 1:].to(dev), old[:, 1:].to(dev)
        # Logits only from the first position that predicts a sampled id: the prompt's logits are never
        # used, and on a long prompt the vocabulary projection and its softmax are a large share of the work.
        start = int(mask.any(0).nonzero()[0]) if bool(mask.any()) else 0
        tgt, mask, old = ids[:, start + 1:], mask[:, start:], old[:, start:]
        # each row's length and first scored position (mask's columns begin at position `start`)
        rows = ([len(t.ids) for t in trajs], [start + c for c in first_marked(mask > 0)])
        logits = self._logits(self.model, ids, attn, ids.shape[1] - start, rows)  # the last predicts no id
        logp, logp_all, ent = self._policy_logprobs(logits, tgt)
        del logits  # the graph keeps what its backward needs: the rest is freed before the loss runs
        with torch.no_grad():
            # |engine's log-prob - trainer's| on the sampled tokens: ~1e-6 for the transformers engine,
            # a kernel/precision difference for vLLM (reported, never used in the update)
            gap = (logp - old).abs() * mask
        if not exact_logprobs(self.engine):
            # One optimiser step per batch: these weights are the ones that sampled, so the trainer's own
            # log-probs are the ratio's denominator and an engine mismatch cannot bias the update.
            old = logp.detach()
        batch = MicroBatch(logp, logp_all, old, torch.tensor(advantages, dtype=torch.float32, device=dev), mask,
                           ent, start, extra, lambda full=False: self._ref_logprobs(ids, attn, tgt, full, rows))
        loss, s = self.hooks.token_loss(batch, cfg)
        weight = mask.sum().item() if cfg.loss_level == "token" else float(len(trajs))
        with torch.no_grad():
            stats = {"loss": loss.item() * weight,
                     "entropy": float((ent * mask).sum() / mask.sum().clamp(min=1)) * weight,
                     "logprob_mismatch/mean": float(gap.sum() / mask.sum().clamp(min=1)) * weight,
                     "_mismatch_max": float(gap.max()) if gap.numel() else 0.0, "_weight": weight}
            stats.update({k: float(v) * weight for k, v in s.items()})
        return loss * (weight / denom), stats

    def _policy_logprobs(self, logits: torch.Tensor, tgt: torch.Tensor):
        """(log-probs of `tgt` [B, T] with grad, the log-softmax [B, T, V] with grad or None, entropy [B, T])
        under softmax(logits / temperature); `logits` [B, T + 1, V]. The [B, T, V] log-softmax and its graph
        are built only for a token loss that reads them: on a real vocabulary they are the largest tensors
        of the update."""
        temp = self.config.rollout.temperature or 1.0
        if not needs_full_logprobs(self.hooks.token_loss):
            logp, ent = sampled_logprobs(logits, tgt, temp, entropy=True)
            return logp, None, ent
        logp_all = torch.log_softmax(logits[:, :-1].float() / temp, dim=-1)
        with torch.no_grad():
            ent = -(logp_all.exp() * logp_all).sum(-1)
        return logp_all.gather(-1, tgt.unsqueeze(-1)).squeeze(-1), logp_all, ent

    def _logits(self, model, ids, attn, keep: int, rows: tuple[list[int], list[int]] | None = None) -> torch.Tensor:
        """Logits of the last `keep` positions (all of them for models whose forward cannot skip). With
        `rows` (each row's real ids and the first position it is scored at), rows that share a prompt
        compute it once (`shared_prompt`); a row's logits are then exact from that position on only."""
        if rows is not None and self._share_prompts:
            return shared_prompt_logits(model, ids, attn, rows[0], ids.shape[1] - keep, starts=rows[1])
        if self._can_skip_logits:
            return model(input_ids=ids, attention_mask=attn, logits_to_keep=keep).logits
        return model(input_ids=ids, attention_mask=attn).logits[:, -keep:]

    @torch.no_grad()
    def _ref_logprobs(self, ids, attn, tgt, full: bool = False, rows: tuple[list[int], list[int]] | None = None):
        """The reference policy's log-probs of `tgt` [B, T], or of every id [B, T, V] if `full`."""
        temp = self.config.rollout.temperature or 1.0
        keep = tgt.shape[1] + 1
        if self.config.lora:
            with self.accelerator.unwrap_model(self.model).disable_adapter():
                logits = self._logits(self.model, ids, attn, keep, rows)
        else:
            logits = self._logits(self.ref_model, ids, attn, keep, rows)
        if full:
            return torch.log_softmax(logits[:, :-1].float() / temp, dim=-1)
        return sampled_logprobs(logits, tgt, temp)[0]  # no [B, T, V] log-softmax at once

    # ------------------------------------------------------------------ checkpoints
    def save(self, path: str | Path) -> Path:
        """Weights (or adapter), optimizer, scheduler, RNG states, step, history — atomically
        (`orchlib.train.saving`)."""
        return save_trainer(self, path)

    @classmethod
    def resume(cls, path: str | Path, env: Environment, config: GRPOConfig | None = None, *,
               hooks: Hooks | None = None) -> "Trainer":
        """Rebuild a trainer from `save()`d state and continue exactly where it stopped, in `env`. `hooks`
        must be the ones it was trained with (their `record` is checked against the checkpoint's)."""
        return resume_trainer(cls, path, env, config, hooks)


def _check_environment(call: str, env: Environment) -> None:
    if not isinstance(env, Environment):
        raise TypeError(f"{call}: env is an orchlib.Environment (e.g. Environment(train=tasks, tools=toolbox, "
                        f"reward=reward)), not {type(env).__name__}")
    if not env.train:
        raise ValueError(f"{call} needs at least one train task: environment {env.name!r} has none")
    if env.reward is None:
        raise ValueError(f"{call} needs a reward: environment {env.name!r} has none (Environment(reward=...))")
