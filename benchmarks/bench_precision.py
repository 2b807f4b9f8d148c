"""A GRPO step of the real-model recipe under each `mixed_precision`, side by side.

    python benchmarks/bench_precision.py [--config examples/smollm2_choice.yaml] [--model FOLDER]
                                         [--modes amx no] [--steps 4] [--rounds 2] [--threads 2]

Each round runs `--steps` GRPO steps of the recipe (same seed, same tasks) once per mode, each in a fresh
process, the modes alternating so that both see the machine alike. Prints, per mode, the median over
rounds and steps (the first step of each run, which warms up, left out) of the rollout, the update and
the whole step, the ids sampled, and each mode's step time over the first mode's.

`--model`: a saved model folder, e.g. the recipe's policy after its SFT (default: the recipe's policy as
it comes; it answers in prose, so every turn runs to `max_new_tokens`: a fair clock, not a fair rollout).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one_run(config: str, model: str | None, mode: str, steps: int, threads: int) -> None:
    """In a child process: `steps` GRPO steps under `mode`; one JSON line per step on stdout."""
    import torch

    from orchlib.configfile import load_config
    from orchlib.models import load_policy
    from orchlib.train.grpo import Trainer
    from orchlib.train.run import RunConfig, load_environment

    torch.set_num_threads(threads)
    cfg = load_config(config, RunConfig)
    env = load_environment(cfg)
    policy = load_policy(model or cfg.policy)
    trainer = Trainer(policy, env, cfg.grpo.model_copy(update={"mixed_precision": mode}), policy_source=cfg.policy)
    for _ in range(steps):
        report = trainer.step()
        m = report.metrics
        print(json.dumps({"rollout": m["time/rollout"], "update": m["time/update"], "step": m["time/step"],
                          "ids": sum(turn.tokens_out for t in report.trajectories for turn in t.turns)}), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(ROOT / "examples" / "smollm2_choice.yaml"))
    ap.add_argument("--model", default=None)
    ap.add_argument("--modes", nargs="+", default=["amx", "no"])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.steps < 2:
        raise SystemExit("--steps: at least 2 (the first step of each run warms up and is left out)")
    if args.model and not (Path(args.model) / "config.json").is_file():
        raise SystemExit(f"--model {args.model}: no saved model there (config.json missing)")
    if args.child:
        one_run(args.config, args.model, args.child, args.steps, args.threads)
        return 0
    runs: dict[str, list[dict]] = {m: [] for m in args.modes}
    for r in range(args.rounds):
        for mode in args.modes:
            cmd = [sys.executable, __file__, "--child", mode, "--config", args.config, "--steps", str(args.steps),
                   "--threads", str(args.threads)] + (["--model", args.model] if args.model else [])
            done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
            if done.returncode:
                raise SystemExit(f"mode {mode}: the run failed:\n{done.stderr[-2000:]}")
            rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
            runs[mode] += rows[1:]
            print(f"round {r + 1}, {mode}: " + ", ".join(f"{x['step']:.1f} s" for x in rows), flush=True)
    from orchlib.train.accel import cpu_description, resolve_mixed_precision

    med = {m: {k: statistics.median(x[k] for x in rows) for k in ("rollout", "update", "step", "ids")}
           for m, rows in runs.items()}
    first = args.modes[0]
    print(f"\nCPU: {cpu_description()}; torch threads {args.threads}; {args.rounds} rounds × {args.steps - 1} "
          f"steps per mode (medians)")
    print("| mixed_precision | runs as | rollout s | update s | step s | ids sampled | step / " + first + " |")
    print("|---|---|---|---|---|---|---|")
    for m, v in med.items():
        print(f"| {m} | {resolve_mixed_precision(m)} | {v['rollout']:.2f} | {v['update']:.2f} | {v['step']:.2f} | "
              f"{v['ids']:.0f} | {v['step'] / med[first]['step']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
