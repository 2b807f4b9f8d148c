"""The shared-prompt forward against the ordinary one: forward + backward of one batch, side by side.

    .venv/bin/python benchmarks/bench_shared_prompt.py [--sizes tiny small] [--repeats 3]

Three batches of the demo's shapes: a GRPO update's (8 groups of 8 rollouts, each group one ~170-id
prompt and replies of 10-31 ids), the same with one rollout of its first group taking a second turn
(a 150-id reply), and a warm start's (16 examples whose system turns come in 4 kinds, then a user turn
and a reply of 15-200 ids). Each is scored from the first position that predicts a reply id, as the
trainer does. "shared" runs each head's rows in one pass (`pass_cost` too high to split them), "runs"
splits them by length (`length_runs`, the default); both run a pass only to its longest row. Times are
the CPU time of this process (best of --repeats), so other work on the machine moves them less than
wall time; the ratios are what to read.
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


def second_turn(rows: list, g: torch.Generator, extra: int = 150) -> list:
    """`rows` with the first one's reply `extra` ids longer: a rollout whose first call failed."""
    return [torch.cat([rows[0], torch.randint(5, 4000, (extra,), generator=g)])] + rows[1:]


def sft_batch(g: torch.Generator, n: int = 16, kinds: int = 4, system: int = 130, longest: int = 200):
    heads = [torch.randint(5, 4000, (system,), generator=g) for _ in range(kinds)]
    return [torch.cat([heads[i % kinds], torch.randint(5, 4000, (int(torch.randint(15, longest, (1,), generator=g)),),
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


ONE_PASS = 10 ** 9  # a pass_cost no padding outweighs: each head's rows run together


def measure(model, rows, start: int, repeats: int) -> tuple[int, float, float, float, float]:
    """(ids in the batch, CPU s of the ordinary, shared and runs forward + backward, max |logit
    difference| from the ordinary forward on real positions, over both)."""
    ids, attn, lengths = pad(rows)
    keep = ids.shape[1] - start
    real = torch.zeros((len(rows), keep), dtype=torch.bool)
    for i, n in enumerate(lengths):
        real[i, :n - start] = True

    def ordinary():
        logits = model(input_ids=ids, attention_mask=attn, logits_to_keep=keep).logits
        logits.float()[real].logsumexp(-1).sum().backward()

    def shared(pass_cost: int):
        logits = shared_prompt_logits(model, ids, attn, lengths, start, pass_cost=pass_cost)
        logits.float()[real].logsumexp(-1).sum().backward()

    with torch.no_grad():
        a = model(input_ids=ids, attention_mask=attn, logits_to_keep=keep).logits
        diff = max(float((a - shared_prompt_logits(model, ids, attn, lengths, start, pass_cost=c)).abs()[real].max())
                   for c in (ONE_PASS, 32))
    return (sum(lengths), cpu_seconds(ordinary, repeats), cpu_seconds(lambda: shared(ONE_PASS), repeats),
            cpu_seconds(lambda: shared(32), repeats), diff)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["tiny", "small"])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    g = torch.Generator().manual_seed(0)
    batches = [("GRPO 8 x 8", grpo_batch(g), 169)]
    batches += [("GRPO, a second turn", second_turn(batches[0][1], g), 169),
                ("SFT 16, 4 systems", sft_batch(g), 130)]
    print(f"{'policy':>6}  {'batch':>19}  {'ids':>6}  {'ordinary s':>10}  {'shared s':>8}  {'runs s':>6}  "
          f"{'ordinary/shared':>15}  {'shared/runs':>11}  {'max |diff|':>10}")
    for size in args.sizes:
        model, _ = build_default_policy(size, seed=0)
        model.train()
        for name, rows, start in batches:
            n_ids, t_plain, t_shared, t_runs, diff = measure(model, rows, start, args.repeats)
            print(f"{size:>6}  {name:>19}  {n_ids:>6}  {t_plain:>10.3f}  {t_shared:>8.3f}  {t_runs:>6.3f}  "
                  f"{t_plain / t_shared:>14.2f}x  {t_shared / t_runs:>10.2f}x  {diff:>10.1e}")
            model.zero_grad(set_to_none=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
