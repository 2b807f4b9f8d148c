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
(`engines/base.py`'s `TrainableEngine`).

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
import json
import math
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from orchlib.engines.base import TrainableEngine, exact_logprobs, shares_weights
from orchlib.env import Environment, bind_older, reward_terms
from orchlib.configurations import reward_preference
from orchlib.rollout import rollout
from orchlib.tasks import Task
from orchlib.train.checkpoint import (CheckpointError, abandon, commit, find_checkpoint, random_state_from_json,
                                      random_state_to_json, read_trainer_state, require, temporary_sibling)
from orchlib.train.config import GRPOConfig, LoraSettings
from orchlib.train.hooks import Hooks, MicroBatch, needs_full_logprobs
from orchlib.train.logprobs import sampled_logprobs
from orchlib.train.loss import group_advantages, keep_groups
from orchlib.train.shared_prompt import can_share, shared_prompt_logits
from orchlib.trajectory import Trajectory

__all__ = ["LoraSettings", "GRPOConfig", "StepReport", "Trainer", "TrainingDiverged", "lr_factor", "make_engine"]


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


def lr_factor(step: int, warmup: int, decay: int | None) -> float:
    """The lr multiplier at optimizer step `step` (0-based): linear warm-up over `warmup` steps, then
    constant, or with `decay` falling linearly to 0 over the next `decay` steps (and staying there)."""
    if step < warmup:
        return (step + 1) / (warmup + 1)
    if decay is None:
        return 1.0
    return max(0.0, 1.0 - (step - warmup) / decay)


def _resolve_policy(policy) -> tuple[Any, Any, str]:
    from orchlib.models import build_default_policy, load_policy

    if isinstance(policy, tuple):
        model, tok = policy
        return model, tok, str(getattr(model, "name_or_path", "") or "")
    if policy in ("tiny", "small"):
        model, tok = build_default_policy(policy)
    else:
        model, tok = load_policy(policy)
    return model, tok, str(model.name_or_path)


def _environment(call: str, env, older: tuple, config: GRPOConfig | None) -> tuple[Environment, GRPOConfig | None]:
    """The environment and config of `Trainer(policy, env, config)`, or of the older
    `Trainer(policy, tasks, tools, reward, config)`."""
    if isinstance(env, Environment):
        args = bind_older(f"{call}(..., env, ...)", ("config",), older, {"config": config}, {"config": None})
    else:
        if len(older) < 2:
            raise TypeError(f"{call} takes an Environment, {call}(policy, env, config), or the older "
                            f"{call}(policy, tasks, tools, reward, config)")
        args = bind_older(f"{call}(..., tasks, tools, reward, ...)", ("tools", "reward", "config"), older,
                          {"config": config}, {"config": None})
        if not list(env):
            raise ValueError(f"{call} needs at least one task")
        if args["reward"] is None:
            raise ValueError(f"{call} needs a reward")
        env = Environment(train=env, tools=args["tools"], reward=args["reward"])
    return env, args["config"]


def make_engine(config: GRPOConfig, model, tokenizer, seed: int) -> TrainableEngine:
    """The engine `config.engine` names, sampling from `model`: the model itself (transformers), or vLLM
    in this process or at `config.vllm.base_url`, starting from the model's current weights. How the
    trainer then treats it is the engine's to say (`TrainableEngine`), not the config's."""
    if config.engine == "vllm":
        if config.vllm.base_url:
            from orchlib.engines.vllm_server import VLLMServerEngine as VLLM
        else:
            from orchlib.engines.vllm import VLLMEngine as VLLM
        return VLLM.for_model(model, tokenizer, config.vllm, seed=seed)
    from orchlib.engines.transformers import TransformersEngine

    return TransformersEngine(model, tokenizer, seed=seed, share_prompts=config.shared_prompt)


class Trainer:
    def __init__(self, policy, env: Environment | Sequence[Task], *older, config: GRPOConfig | None = None,
                 hooks: Hooks | None = None, policy_source: str | None = None):
        """`policy`: 'tiny' / 'small', a Hugging Face id or folder, or a (model, tokenizer) pair. `env`: the
        Environment whose train tasks, tools, reward and prompt settings the run uses (the older
        `Trainer(policy, tasks, tools, reward, config)` still works). `hooks`: the sampler, advantage
        transform and token loss (default: the paper's, `Hooks()`)."""
        from accelerate.utils import set_seed

        from orchlib.train.accel import make_accelerator

        env, config = _environment("Trainer", env, older, config)
        config = config if config is not None else GRPOConfig()
        if not env.train:
            raise ValueError("Trainer needs at least one task")
        if env.reward is None:
            raise ValueError(f"Trainer needs a reward: environment {env.name!r} has none (Environment(reward=...))")
        self.env = env
        self.rollout_config = env.rollout_config(config.rollout)  # the prompt as the environment renders it
        self.config = config
        self.hooks = hooks if hooks is not None else Hooks()
        set_seed(config.seed)
        model, self.tokenizer, source = _resolve_policy(policy)
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
        self.toolbox, self.reward = env.tools, env.reward
        self.tasks = list(env.train)  # the pool each step draws from (a widget may set another)
        self.rng = random.Random(config.seed)
        self.step_count = 0
        self.history: list[dict[str, float]] = []
        if config.log_with:
            acc.init_trackers("orchlib", config=_flat({**config.model_dump(mode="json"), **self.hooks.record}))

    # ------------------------------------------------------------------ one step
    def step(self) -> StepReport:
        """One GRPO step: draw tasks → rollout → rewards → advantages → update → metrics."""
        acc, cfg, G, hooks = self.accelerator, self.config, self.config.group_size, self.hooks
        t0 = time.perf_counter()
        # draw tasks: every process draws the same bundles and rolls out its share, whole bundles at a time
        bundles = hooks.sampler(self.rng, self.tasks, min(cfg.tasks_per_step, len(self.tasks)))
        local = [t for bundle in bundles[acc.process_index::acc.num_processes] for t in bundle]
        # rollout: G trajectories per task, group after group
        trajs = rollout(self.env, self.engine, config=self.rollout_config, group_size=G, tasks=local,
                        episode=self.step_count) if local else []  # episode: this step's tool configurations
        self.engine.clear_prefix_cache()  # the update below makes the kept keys/values stale: free them now
        t1 = time.perf_counter()
        groups = [trajs[i * G:(i + 1) * G] for i in range(len(local))]
        # rewards, under the P each task's prompt showed
        rewards = np.array([self.reward(g, P=reward_preference(t, g)) for g, t in zip(groups, local)], dtype=np.float64)
        rewards = rewards.reshape(len(local), G)
        terms = self._term_means(groups, local)
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
        metrics = self._metrics(trajs, rewards.flatten().tolist(), terms, keep, upd, adv.flatten().tolist())
        times = {"time/rollout": t1 - t0, "time/reward": t2 - t1, "time/update": t3 - t2, "time/step": t3 - t0}
        if synced:
            times["time/sync"] = self.engine.last_sync["seconds"]  # a part of time/update
        if acc.num_processes > 1:  # the step lasts as long as its slowest process
            times = {k: max(d[k] for d in _gather_dicts(times)) for k in times}
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

    def _term_means(self, groups, tasks) -> dict[str, float]:
        """Mean contribution of each reward term, over the trajectories of every process."""
        sums: dict[str, float] = Counter()
        for g, t in zip(groups, tasks):
            for name, values in reward_terms(self.reward, g, reward_preference(t, g)).items():
                values = np.asarray(values, dtype=float)
                sums[name] += float(values.sum())
                sums["_n/" + name] += float(values.size)
        if self.accelerator.num_processes > 1:
            sums = _sum_dicts(_gather_dicts(dict(sums)))
        return {k: sums[k] / max(sums["_n/" + k], 1.0) for k in sums if not k.startswith("_n/")}

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
            stats = _sum_dicts(_gather_dicts(dict(stats)))
            mismatch_max = max(d["m"] for d in _gather_dicts({"m": mismatch_max}))
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
        lengths = [len(t.ids) for t in trajs]
        logits = self._logits(self.model, ids, attn, ids.shape[1] - start, lengths)  # the last predicts no id
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
                           ent, start, extra, lambda full=False: self._ref_logprobs(ids, attn, tgt, full, lengths))
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

    def _logits(self, model, ids, attn, keep: int, lengths: list[int] | None = None) -> torch.Tensor:
        """Logits of the last `keep` positions (all of them for models whose forward cannot skip). With
        `lengths` (each row's real ids), rows that share a prompt compute it once (`shared_prompt`)."""
        if lengths is not None and self._share_prompts:
            return shared_prompt_logits(model, ids, attn, lengths, ids.shape[1] - keep)
        if self._can_skip_logits:
            return model(input_ids=ids, attention_mask=attn, logits_to_keep=keep).logits
        return model(input_ids=ids, attention_mask=attn).logits[:, -keep:]

    @torch.no_grad()
    def _ref_logprobs(self, ids, attn, tgt, full: bool = False, lengths: list[int] | None = None):
        """The reference policy's log-probs of `tgt` [B, T], or of every id [B, T, V] if `full`."""
        temp = self.config.rollout.temperature or 1.0
        keep = tgt.shape[1] + 1
        if self.config.lora:
            with self.accelerator.unwrap_model(self.model).disable_adapter():
                logits = self._logits(self.model, ids, attn, keep, lengths)
        else:
            logits = self._logits(self.ref_model, ids, attn, keep, lengths)
        if full:
            return torch.log_softmax(logits[:, :-1].float() / temp, dim=-1)
        return sampled_logprobs(logits, tgt, temp)[0]  # no [B, T, V] log-softmax at once

    def _metrics(self, trajs, rewards, terms, keep, upd, advantages) -> dict[str, float]:
        from accelerate.utils import gather_object

        G = self.config.group_size
        rows = [{"reward": r, "outcome": t.outcome, "cost": t.cost_usd, "latency": t.latency_s,
                 "tokens": t.num_tokens, "turns": t.num_turns, "calls": t.calls, "errors": t.errors,
                 "profile": t.preference.get("name", ""), "kept": bool(k), "advantage": a if k else 0.0}
                for t, r, k, a in zip(trajs, rewards, np.repeat(keep.numpy(), G), advantages)]
        if self.accelerator.num_processes > 1:
            rows = gather_object(rows)
        kept = sum(r["kept"] for r in rows) / G  # every group is G rows, each marked with its group's keep
        m: dict[str, float] = {"step": float(self.step_count)}
        m.update(_summaries(rows))
        for prof in sorted({r["profile"] for r in rows if r["profile"]}):
            sub = _summaries([r for r in rows if r["profile"] == prof])
            m.update({f"profile/{prof}/{k}": v for k, v in sub.items() if not k.startswith(("calls/", "errors/"))})
            # groups of this profile that carried a learning signal: a group whose rewards are all equal
            # teaches nothing, and under some P (outcome only, every tool right) most groups are like that
            m[f"profile/{prof}/groups_kept"] = sum(r["kept"] for r in rows if r["profile"] == prof) / G
            # where this profile's update pushes: the mean advantage of its rollouts that called each tool
            # (0 for groups left out). If these differ by profile while the tool shares do not, the
            # reward carries P's signal and the policy is not (yet) reading P.
            m.update({f"profile/{prof}/advantage/{tool}": v for tool, v in _tool_advantages(
                [r for r in rows if r["profile"] == prof]).items()})
        m.update({f"reward/{k}": v for k, v in terms.items()})
        m["groups_kept"], m["groups_filtered"] = float(kept), len(rows) / G - kept
        m.update({k: float(v) for k, v in upd.items()})
        return m

    # ------------------------------------------------------------------ checkpoints
    def save(self, path: str | Path) -> Path:
        """Weights (or adapter), optimizer, scheduler, RNG states, step, history — atomically."""
        acc = self.accelerator
        path = Path(path)
        tmp = path.parent / f".{path.name}.tmp-{self.step_count}"
        if acc.is_main_process:
            tmp = temporary_sibling(path, str(self.step_count))
        try:
            self._write_checkpoint(tmp, path)
        except Exception as e:  # a full disk, a write error: one line, no partial copy left to fill the disk
            raise abandon(tmp, path, e) from None
        return path

    def _write_checkpoint(self, tmp: Path, path: Path) -> None:
        acc = self.accelerator
        acc.wait_for_everyone()
        acc.save_state(str(tmp / "state"))
        torch.save(self.engine.generator.get_state(), tmp / "state" / f"engine_rng_{acc.process_index}.pt")
        acc.wait_for_everyone()
        if acc.is_main_process:
            unwrapped = acc.unwrap_model(self.model)
            unwrapped.save_pretrained(tmp / "policy")
            self.tokenizer.save_pretrained(tmp / "policy")
            if self.ref_model is not None:
                self.ref_model.save_pretrained(tmp / "reference")
            (tmp / "sampler_rng.json").write_text(json.dumps(random_state_to_json(self.rng.getstate())))
            state = {"step": self.step_count, "history": self.history, "policy_source": self.policy_source,
                     "config": self.config.model_dump(mode="json"), "hooks": self.hooks.record}
            (tmp / "trainer_state.json").write_text(json.dumps(state, indent=1))
            commit(tmp, path)
        acc.wait_for_everyone()

    @classmethod
    def resume(cls, path: str | Path, env: Environment | Sequence[Task], *older, config: GRPOConfig | None = None,
               hooks: Hooks | None = None) -> "Trainer":
        """Rebuild a trainer from `save()`d state and continue exactly where it stopped, in `env` (or the
        older `resume(path, tasks, tools, reward, config, hooks)`). `hooks` must be the ones it was
        trained with (their `record` is checked against the checkpoint's)."""
        from pydantic import ValidationError

        from orchlib.models import load_policy

        ckpt = find_checkpoint(path)  # every file checked against the manifest's SHA-256 first
        if ckpt is None:
            raise FileNotFoundError(f"no complete checkpoint at {path}")
        if not isinstance(env, Environment) and len(older) == 4:  # older form: hooks after the config
            older, hooks = older[:3], older[3] if hooks is None else hooks
        env, config = _environment("Trainer.resume", env, older, config)
        state = read_trainer_state(require(ckpt, "trainer_state.json"))
        sampler_state = random_state_from_json(require(ckpt, "sampler_rng.json"))
        hooks = hooks if hooks is not None else Hooks()
        if state.get("hooks", {}) != hooks.record:
            raise ValueError(f"{ckpt / 'trainer_state.json'}: trained with hooks {state.get('hooks', {})}, resumed "
                             f"with {hooks.record}; pass the same hooks= (e.g. VariantConfig(**record['variants'])"
                             f".hooks())")
        try:
            config = config or GRPOConfig.model_validate(state["config"])
        except ValidationError as e:
            err = e.errors()[0]
            raise CheckpointError(f"{ckpt / 'trainer_state.json'}: config.{'.'.join(map(str, err['loc']))}: "
                                  f"{err['msg']}") from None
        source = ckpt / "policy" if not config.lora else state["policy_source"]
        trainer = cls(load_policy(source), env, config, hooks=hooks,
                      policy_source=state["policy_source"])
        if trainer.ref_model is not None and (ckpt / "reference").exists():
            ref, _ = load_policy(ckpt / "reference")
            trainer.ref_model.load_state_dict(ref.state_dict())
        acc = trainer.accelerator
        rng_file = require(ckpt, f"state/engine_rng_{acc.process_index}.pt")
        try:  # accelerate reads its files with weights_only=True and no custom objects are registered
            acc.load_state(str(ckpt / "state"))
            engine_rng = torch.load(rng_file, weights_only=True)
            trainer.engine.generator.set_state(engine_rng)
        except Exception as e:  # a file that passed its hash but does not fit this model or config
            raise CheckpointError(f"{ckpt / 'state'}: cannot be loaded into this trainer "
                                  f"({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})") from None
        trainer.rng.setstate(sampler_state)
        trainer.step_count, trainer.history = state["step"], state["history"]
        return trainer


def _gather_dicts(d: dict[str, float]) -> list[dict[str, float]]:
    """Every process's copy of `d` (a collective call: all processes must make it together)."""
    from accelerate.utils import gather_object

    return gather_object([d])


def _sum_dicts(ds: list[dict[str, float]]) -> dict[str, float]:
    total: Counter[str] = Counter()
    for d in ds:
        total.update(d)
    return dict(total)


def _tool_advantages(rows: list[dict]) -> dict[str, float]:
    """tool → mean advantage of the rows whose trajectory called it at least once."""
    sums: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for r in rows:
        for tool, n in r["calls"].items():
            if n:
                sums[tool] += r["advantage"]
                counts[tool] += 1
    return {tool: sums[tool] / counts[tool] for tool in sorted(counts)}


def _summaries(rows: list[dict]) -> dict[str, float]:
    if not rows:
        return {}
    n = len(rows)
    out = {"reward": sum(r["reward"] for r in rows) / n, "accuracy": sum(r["outcome"] for r in rows) / n,
           "cost_usd": sum(r["cost"] for r in rows) / n, "latency_s": sum(r["latency"] for r in rows) / n,
           "tokens": sum(r["tokens"] for r in rows) / n, "turns": sum(r["turns"] for r in rows) / n,
           "errors": sum(sum(r["errors"].values()) for r in rows) / n}
    calls: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for r in rows:
        calls.update(r["calls"])
        errors.update(r["errors"])
    total = sum(calls.values())
    for tool, c in sorted(calls.items()):
        out[f"calls/{tool}"] = c / n
        out[f"share/{tool}"] = c / total if total else 0.0
    for kind, c in sorted(errors.items()):
        out[f"errors/{kind}"] = c / n
    return out


def _flat(d: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v if isinstance(v, (int, float, str, bool)) else str(v)
    return out

