"""The shared-prompt forward against the ordinary one: forward + backward of one batch, side by side.

    .venv/bin/python benchmarks/bench_shared_prompt.py [--sizes tiny small] [--repeats 3]

Two batches of the demo's shapes: a GRPO update's (8 groups of 8 rollouts, each group one ~170-id
prompt and replies of 10-31 ids) and a warm start's (16 examples whose system turns come in 4 kinds,
then a user turn and a reply of their own). Each is scored from the first position that predicts a
reply id, as the trainer does. Times are the CPU time of this process (best of --repeats), so other
work on the machine moves them less than wall time; the ratio is what to read.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from orchlib.models import build_default_policy
from orchlib.train.shared_prompt import shared_prompt_logits


def grpo_batch(g: torch.Generator, groups: int = 8, size: int = 8, prompt: int = 170):
    rows = []
    for k in range(groups):
        p = torch.randint(5, 4000, (prompt + 3 * k,), generator=g)
        rows += [torch.cat([p, torch.randint(5, 4000, (10 + 3 * j,), generator=g)]) for j in range(size)]
    return rows


def sft_batch(g: torch.Generator, n: int = 16, kinds: int = 4, system: int = 130):
    heads = [torch.randint(5, 4000, (system,), generator=g) for _ in range(kinds)]
    return [torch.cat([heads[i % kinds], torch.randint(5, 4000, (int(torch.randint(15, 60, (1,), generator=g)),),
                                                       generator=g)]) for i in range(n)]


def pad(rows):
    width = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, :len(r)], attn[i, :len(r)] = r, 1
    return ids, attn, [len(r) for r in rows]


def cpu_seconds(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def measure(model, rows, start: int, repeats: int) -> tuple[int, float, float, float]:
    """(ids in the batch, ordinary CPU s, shared CPU s, max |logit difference| on real positions)."""
    ids, attn, lengths = pad(rows)
    keep = ids.shape[1] - start

    def ordinary():
        model(input_ids=ids, attention_mask=attn, logits_to_keep=keep).logits.float().logsumexp(-1).sum().backward()

    def shared():
        shared_prompt_logits(model, ids, attn, lengths, start).float().logsumexp(-1).sum().backward()

    with torch.no_grad():
        a = model(input_ids=ids, attention_mask=attn, logits_to_keep=keep).logits
        b = shared_prompt_logits(model, ids, attn, lengths, start)
        real = torch.zeros_like(a[..., 0], dtype=torch.bool)
        for i, n in enumerate(lengths):
            real[i, :n - start] = True
        diff = float((a - b).abs()[real].max())
    return sum(lengths), cpu_seconds(ordinary, repeats), cpu_seconds(shared, repeats), diff


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["tiny", "small"])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    g = torch.Generator().manual_seed(0)
    print(f"{'policy':>6}  {'batch':>18}  {'ids':>6}  {'ordinary s':>10}  {'shared s':>8}  {'speed-up':>8}  "
          f"{'max |diff|':>10}")
    for size in args.sizes:
        model, _ = build_default_policy(size, seed=0)
        model.train()
        for name, rows, start in (("GRPO 8 x 8", grpo_batch(g), 169), ("SFT 16, 4 systems", sft_batch(g), 130)):
            n_ids, t_plain, t_shared, diff = measure(model, rows, start, args.repeats)
            print(f"{size:>6}  {name:>18}  {n_ids:>6}  {t_plain:>10.3f}  {t_shared:>8.3f}  "
                  f"{t_plain / t_shared:>7.2f}x  {diff:>10.1e}")
            model.zero_grad(set_to_none=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
