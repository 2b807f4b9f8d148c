"""`orchlib demo`: train a tiny orchestrator offline and show what it learned (see orchlib/demo.py)."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    from orchlib.demo import DemoConfig

    d = DemoConfig()
    p = sub.add_parser("demo", help="train a tiny orchestrator on CPU and report what it learned",
                       description="SFT warm start → GRPO with rewards/toolorchestra.yaml under the 'accuracy' and "
                                   "'thrifty' profiles → evaluation against the baselines. Writes report.html, "
                                   "metrics.json and trajectories.jsonl into --out. About 5 minutes on 2 cores.")
    p.add_argument("--steps", type=int, default=d.steps, help=f"GRPO steps (default {d.steps})")
    p.add_argument("--size", default=d.size, choices=["tiny", "small"], help="default policy size")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--out", default=d.out, help=f"output folder (default {d.out})")
    p.add_argument("--reading-drills", action="store_true",
                   help="add preference-reading drills to phase 2 of the warm start (and lengthen it): "
                        "measured in docs/training.md; about 60 s more")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(handler=run)


def config_from(args: argparse.Namespace):
    """The DemoConfig the parsed flags ask for."""
    from orchlib.demo import READING_SETTINGS, DemoConfig

    extra = READING_SETTINGS if args.reading_drills else {}
    return DemoConfig(steps=args.steps, size=args.size, seed=args.seed, out=args.out, **extra)


def run(args: argparse.Namespace) -> int:
    from orchlib.demo import run_demo

    result = run_demo(config_from(args), progress=not args.quiet)
    print(result.table)
    print(f"\nwrote {result.out}/report.html, metrics.json, trajectories.jsonl")
    return 0
