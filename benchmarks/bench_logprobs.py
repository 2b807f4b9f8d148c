"""One GRPO update on a real vocabulary, with and without the full [B, T, V] log-softmax, side by side.

    .venv/bin/python benchmarks/bench_logprobs.py [--vocab 49152] [--rows 16] [--reply 64] [--repeats 3]

A random-init Llama-shaped policy with a real vocabulary (SmolLM's 49152 ids by default) takes the
trainer's update (`Trainer._update`, with the KL to a reference) on one micro-batch of synthetic
rollouts: `--rows` rows of a 96-id prompt and replies of up to `--reply` ids, each id carrying the
policy's own log-prob. The token loss is the paper's (`PaperLoss`), which reads the sampled ids'
log-probs only ("sampled"), and the same loss declaring `needs_full_logprobs` ("full"): the log-softmax
over the vocabulary is then kept with its graph for the whole update.

Each runs in a process of its own, after one update that is not measured (the optimiser's state is made
there). Peak is how far the resident set grew over what the process held before the update (Linux's
VmHWM, reset before each update); time is the process's CPU seconds, best of --repeats, so that other
work on the machine moves it less than wall time. The ratios are what to read.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time

import torch

VARIANTS = ("full", "sampled")


def _status(field: str) -> int:
    """A /proc/self/status field in bytes (VmRSS, VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) << 10
    raise KeyError(field)


def _trainer(args, variant: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    from orchlib.envs.toy import toy_tasks, toy_toolbox
    from orchlib.env import Environment
    from orchlib.models import build_tokenizer
    from orchlib.reward import Reward
    from orchlib.train import GRPOConfig, Hooks, Trainer
    from orchlib.train.hooks import PaperLoss

    class FullPaperLoss(PaperLoss):
        needs_full_logprobs = True  # the same loss, asking for the distribution it never reads

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=args.vocab, hidden_size=256, intermediate_size=688, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=1024)
    model = LlamaForCausalLM(config)
    env = Environment(train=toy_tasks(4), tools=toy_toolbox(), reward=Reward.from_string("name: a\nreward: outcome"))
    loss = FullPaperLoss() if variant == "full" else PaperLoss()
    cfg = GRPOConfig(micro_batch_size=args.rows, kl_coef=0.05, mixed_precision="no")
    return Trainer((model, build_tokenizer()), env, config=cfg, hooks=Hooks(token_loss=loss))


@torch.no_grad()
def _rollouts(model, rows: int, reply: int, vocab: int):
    """`rows` trajectories: one 96-id prompt, replies of reply/2 .. reply ids, each with the policy's log-prob."""
    from orchlib.train.loss import token_logprobs
    from orchlib.trajectory import Trajectory

    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(5, vocab, (96,), generator=g)
    out = []
    for i in range(rows):
        ids = torch.cat([prompt, torch.randint(5, vocab, (reply // 2 + i * reply // (2 * rows),), generator=g)])
        lp = token_logprobs(model(input_ids=ids[None]).logits[:, :-1], ids[None, 1:])[0]
        n = len(ids) - len(prompt)
        out.append(Trajectory(task_id="t", ids=ids.tolist(), mask=[0] * len(prompt) + [1] * n,
                              logprobs=[0.0] * len(prompt) + lp[-n:].tolist()))
    return out


def worker(args) -> dict[str, float]:
    trainer = _trainer(args, args.worker)
    trajs = _rollouts(trainer.accelerator.unwrap_model(trainer.model), args.rows, args.reply, args.vocab)
    adv = [(-1.0) ** i for i in range(len(trajs))]
    extra = trainer.hooks.token_loss.prepare([trajs], [adv], trainer.tokenizer)
    trainer._update(trajs, adv, extra)  # the optimiser's state is made here
    best, peak = float("inf"), 0
    for _ in range(args.repeats):
        gc.collect()
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM := VmRSS
        rss, t = _status("VmRSS"), time.process_time()
        trainer._update(trajs, adv, extra)
        best, peak = min(best, time.process_time() - t), max(peak, _status("VmHWM") - rss)
    return {"seconds": best, "peak_mib": peak / 2**20}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--reply", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    common = [f"--vocab={args.vocab}", f"--rows={args.rows}", f"--reply={args.reply}", f"--repeats={args.repeats}"]
    res = {}
    for v in VARIANTS:
        out = subprocess.run([sys.executable, __file__, f"--worker={v}", *common], check=True, capture_output=True,
                             text=True).stdout
        res[v] = json.loads(out.strip().splitlines()[-1])
    print(f"vocab {args.vocab}, {args.rows} rows, replies up to {args.reply} ids, one update (CPU, fp32)")
    print(f"{'log-probs':>10}  {'peak MiB':>9}  {'CPU s':>7}")
    for v in VARIANTS:
        print(f"{v:>10}  {res[v]['peak_mib']:>9.0f}  {res[v]['seconds']:>7.3f}")
    full, sampled = res["full"], res["sampled"]
    peak, seconds = sampled["peak_mib"] / full["peak_mib"], sampled["seconds"] / full["seconds"]
    print(f"{'ratio':>10}  {peak:>8.2f}x  {seconds:>6.2f}x  (sampled / full)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
