"""`orchlib …` — the command line. Each command group lives in `orchlib/commands/<name>.py` with
`add_parser(subparsers)` and a handler returning an exit code; this file only wires them.

Exit codes: 0 success, 1 a run that failed its own checks, 2 bad input (a file named in the message).
"""

from __future__ import annotations

import argparse
import importlib
import sys

__all__ = ["main", "COMMANDS", "UsageError"]

# Explicit list: a reader sees every command here; modules are imported only when used.
COMMANDS: dict[str, str] = {
    "info": "orchlib.commands.info",
    "cards": "orchlib.commands.cards",
    "reward": "orchlib.commands.reward",
    "train": "orchlib.commands.train",
    "eval": "orchlib.commands.eval",
    "demo": "orchlib.commands.demo",
    "synth": "orchlib.commands.synth",
    "prices": "orchlib.commands.prices",
}


class UsageError(Exception):
    """Bad input given on the command line or in a file it names; printed as one line, exit 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="orchlib", description="Train and study LLM orchestrators.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS.values():
        try:
            importlib.import_module(module).add_parser(sub)
        except ModuleNotFoundError as e:
            if e.name != module:
                raise
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except UsageError as e:
        print(f"orchlib {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    # `python -m orchlib.cli` runs this file as __main__; the commands raise orchlib.cli.UsageError, a
    # different class from __main__.UsageError, so run the imported module's main.
    from orchlib.cli import main as imported_main

    sys.exit(imported_main())
