""".venv/bin/python examples/paper_grpo.py  [--env toy] [--steps 20] [--seed 0] [--policy tiny] [--no-warm-start]

The paper's GRPO (ToolOrchestra, arXiv 2511.21689) in one file, top to bottom, from orchlib's public pieces.
The defaults train the tiny policy in the toy world in about a minute on a CPU; `--env orchestra-choice
--steps 40` trains on the demo's world under the paper's reward.

One step: draw tasks -> roll out G episodes of each (the orchestrator calls tools over several turns) ->
reward each episode under the preference P its prompt showed -> advantages within each task's group ->
leave out groups whose rewards are all equal -> one optimiser step on the clipped surrogate + k3 KL to
the starting policy, over the tokens the policy sampled (never the prompt's, the tools' or the user's).

The pieces: `orchlib.Environment` (tasks, tools, reward), `orchlib.rollout` (the orchestration loop:
token ids in, token ids out, with their log-probs and a loss mask), `orchlib.configurations.reward_preference`
(the P a group's prompt showed: the task's, or its episode's tool configuration's, which its reward
weighs), and the pure functions of
`orchlib/train/loss.py`. The settings are a `GRPOConfig`, whose fields say where each default comes from.

This is `orchlib.Trainer`'s paper path (its default `Hooks()`) with the engineering left out: one process,
fp32, no LoRA, the whole batch in one forward pass, no vLLM, no checkpoints, a few metrics. At the same
seed and settings it gives the same weights as the Trainer bit for bit (tests/test_examples.py checks
3 steps). Where the Trainer departs from the paper (laptop-sized defaults, one optimiser step per batch
so the ratio starts at 1, the KL term) is said in orchlib/train/grpo.py's docstring; this file does the same.
"""

from __future__ import annotations

import argparse
import copy
import random

import numpy as np
import torch

from orchlib import Environment, make_environment, rollout
from orchlib.configurations import reward_preference
from orchlib.engines import TransformersEngine
from orchlib.models import build_default_policy, load_policy
from orchlib.rollout import RolloutConfig
from orchlib.train import GRPOConfig, SFTConfig, golden_trajectories, lr_factor, sft_train
from orchlib.train.logprobs import sampled_logprobs
from orchlib.train.loss import group_advantages, grpo_loss, keep_groups


def train(model, tokenizer, env: Environment, cfg: GRPOConfig, steps: int, log=print):
    """`steps` GRPO steps of `model` on `env`'s train tasks; returns the model (trained in place)."""
    if cfg.lora is not None or cfg.engine != "transformers" or cfg.mixed_precision != "no":
        raise ValueError("this file is the paper's path on one process in fp32: no LoRA, no vLLM, no autocast")
    G, temperature = cfg.group_size, cfg.rollout.temperature or 1.0

    # ---- setup: seeds, the frozen reference policy, the optimiser and its schedule, the sampling engine
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    reference = copy.deepcopy(model).eval().requires_grad_(False) if cfg.kl_coef > 0 else None
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, cfg.warmup_steps, cfg.decay_steps))
    # the engine samples from `model` itself: every update is in the next step's rollouts, and the
    # log-probs it records are this model's own, so they are the ratio's denominator
    engine = TransformersEngine(model, tokenizer, seed=cfg.seed * 1000, share_prompts=cfg.shared_prompt)
    draw = random.Random(cfg.seed)  # which tasks each step trains on
    pad = tokenizer.pad_token_id or 0

    for step in range(1, steps + 1):
        # ---- 1. draw tasks, and roll out G episodes of each: trajectories task-major (task 0's G first)
        tasks = draw.sample(list(env.train), min(cfg.tasks_per_step, len(env.train)))
        # (a world with tool configurations draws this step's for each task: `episode` is the step, 0-based)
        trajectories = rollout(env, engine, config=cfg.rollout, group_size=G, tasks=tasks, episode=step - 1)
        engine.clear_prefix_cache()  # keys/values of the weights that are about to change
        groups = [trajectories[i * G:(i + 1) * G] for i in range(len(tasks))]

        # ---- 2. rewards, each group under the P its task's prompt showed: [n_tasks, G]
        rewards = np.array([env.reward(g, P=reward_preference(t, g)) for g, t in zip(groups, tasks)],
                           dtype=np.float64)
        r = torch.tensor(rewards.reshape(len(tasks), G), dtype=torch.float32)

        # ---- 3. advantages within each group; a group whose rewards are all equal teaches nothing
        advantages = group_advantages(r, cfg.advantage_scale)
        keep = torch.ones(len(tasks), dtype=torch.bool)
        if cfg.min_reward_spread is not None:
            keep = keep_groups(r, cfg.min_reward_spread)
        kept = [(g, a) for g, a, k in zip(groups, advantages.tolist(), keep.tolist()) if k]
        batch = [t for g, _ in kept for t in g]
        adv = torch.tensor([x for _, a in kept for x in a], dtype=torch.float32)
        log(f"step {step}: reward {rewards.mean():.3f}, accuracy {np.mean([t.outcome for t in trajectories]):.2f}, "
            f"groups kept {len(kept)}/{len(tasks)}")
        if not batch:  # no group carried a signal: no update (and the schedule does not move)
            continue

        # ---- 4. the batch as tensors, right-padded: ids, attention, loss mask (1 on sampled ids), old log-probs
        model.train()
        width = max(len(t.ids) for t in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        attention = torch.zeros_like(ids)
        mask = torch.zeros((len(batch), width), dtype=torch.float32)
        old = torch.zeros((len(batch), width), dtype=torch.float32)
        for i, t in enumerate(batch):
            n = len(t.ids)
            ids[i, :n], attention[i, :n] = torch.tensor(t.ids), 1
            mask[i, :n], old[i, :n] = torch.tensor(t.mask, dtype=torch.float32), torch.tensor(t.logprobs)
        mask, old = mask[:, 1:], old[:, 1:]  # column j scores ids[:, j + 1]
        # the prompt predicts no sampled id: logits from the first position that does
        start = int(mask.any(0).nonzero()[0])
        targets, mask, old = ids[:, start + 1:], mask[:, start:], old[:, start:]
        keep_logits = width - start  # the last position predicts no id; sampled_logprobs leaves it out

        # ---- 5. the loss: clipped surrogate + kl_coef * k3 KL to the reference, a mean over sampled tokens
        logits = model(input_ids=ids, attention_mask=attention, logits_to_keep=keep_logits).logits
        logp = sampled_logprobs(logits, targets, temperature)[0]
        ref_logp = None
        if reference is not None:
            with torch.no_grad():
                ref_logits = reference(input_ids=ids, attention_mask=attention, logits_to_keep=keep_logits).logits
                ref_logp = sampled_logprobs(ref_logits, targets, temperature)[0]
        loss, stats = grpo_loss(logp, old, adv, mask, ref_logp, clip_low=cfg.clip_low, clip_high=cfg.clip_high,
                                kl_coef=cfg.kl_coef, level=cfg.loss_level)

        # ---- 6. one optimiser step
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        log(f"  loss {loss.item():.4f}, kl {float(stats.get('kl', 0.0)):.4f}, "
            f"clipped {float(stats['clip_frac']):.3f}, grad norm {float(grad_norm):.3f}")
    return model


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[2])
    p.add_argument("--env", default="toy", help="a world of orchlib.ENVIRONMENTS (default toy)")
    p.add_argument("--reward", default=None, help="reward file (default: the world's own, or the paper's)")
    p.add_argument("--policy", default="tiny", help="'tiny', 'small', a Hugging Face id or a folder")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-warm-start", action="store_true", help="skip SFT on the golden trajectories first (a "
                   "policy that cannot yet write a call gets rewards that are all equal: nothing to learn from)")
    args = p.parse_args()
    reward = args.reward or (None if args.env == "toy" else "rewards/toolorchestra.yaml")
    env = make_environment(args.env, seed=args.seed, reward=reward)
    model, tokenizer = (build_default_policy(args.policy) if args.policy in ("tiny", "small")
                        else load_policy(args.policy))
    # the tiny policy reads a short prompt (tool names only) and answers in a few ids
    rollout_cfg = RolloutConfig(max_turns=2, max_new_tokens=24, tool_schema="compact", tool_latency="declared")
    if not args.no_warm_start:  # before RL: the call format, from each task's golden calls
        gold = golden_trajectories([t for t in env.train if t.golden is not None], env.tools, tokenizer, rollout_cfg)
        sft_train(model, tokenizer, gold, SFTConfig(epochs=30, batch_size=8, learning_rate=6e-3), progress=False)
    cfg = GRPOConfig(seed=args.seed, mixed_precision="no", rollout=rollout_cfg)
    train(model, tokenizer, env, cfg, args.steps)


if __name__ == "__main__":
    main()
