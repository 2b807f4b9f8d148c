"""`orchlib demo`: train a tiny orchestrator offline and show what it learned (see orchlib/demo/)."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    from orchlib.demo import DemoConfig

    d = DemoConfig()
    p = sub.add_parser("demo", help="train a tiny orchestrator on CPU and report what it learned",
                       description="SFT warm start → GRPO with rewards/toolorchestra.yaml under the 'accuracy' and "
                                   "'thrifty' profiles → evaluation against the baselines. Writes report.html, "
                                   "metrics.json and trajectories.jsonl into --out. About 5 minutes on 2 cores.")
    p.add_argument("--config", default=None, help="YAML file of DemoConfig settings (any of them, nested ones "
                                                   "field by field; the flags below override it)")
    p.add_argument("--steps", type=int, default=None, help=f"GRPO steps (default {d.steps})")
    p.add_argument("--size", default=None, choices=["tiny", "small"], help=f"default policy size (default {d.size})")
    p.add_argument("--seed", type=int, default=None, help=f"seeds the weights and every draw; the train/test "
                                                          f"split stays DemoConfig.split_seed's, {d.split_seed} "
                                                          f"(default {d.seed})")
    p.add_argument("--out", default=None, help=f"output folder (default {d.out})")
    p.add_argument("--reading-drills", action="store_true",
                   help="twice the warm start's preference-reading drills (800) and a longer phase 2 "
                        "(450 steps); about 80 s more")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(handler=run)


def config_from(args: argparse.Namespace):
    """The DemoConfig the parsed flags ask for: the --config file's fields, then the flags given."""
    from orchlib.cli import UsageError
    from orchlib.configfile import ConfigFileError, load_config, merged
    from orchlib.demo import READING_SETTINGS, DemoConfig

    try:  # the file's settings merge into the demo's own, nested configs field by field
        base = load_config(args.config, DemoConfig, base=DemoConfig()) if args.config else DemoConfig()
    except ConfigFileError as e:
        raise UsageError(str(e)) from None
    flags = {k: getattr(args, k) for k in ("steps", "size", "seed", "out") if getattr(args, k) is not None}
    return merged(merged(base, READING_SETTINGS if args.reading_drills else {}), flags)


def run(args: argparse.Namespace) -> int:
    from orchlib.commands._output import writable_folder
    from orchlib.demo import run_demo

    config = config_from(args)
    writable_folder(config.out, "--out")  # before minutes of training, not at the final write
    result = run_demo(config, progress=not args.quiet)
    print(result.table)
    print(f"\nwrote {result.out}/report.html, metrics.json, trajectories.jsonl")
    return 0
