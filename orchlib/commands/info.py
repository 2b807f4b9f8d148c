"""`orchlib info`: versions, the default policy (parameters, build time), tool cards and rewards found."""

from __future__ import annotations

import argparse
import importlib.metadata as md
import platform
from pathlib import Path

PACKAGES = ["orchlib", "torch", "transformers", "accelerate", "peft", "sympy", "pydantic", "plotly", "ipywidgets"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="versions, default policy, tool cards and reward files found")
    p.add_argument("--size", default="tiny", choices=["tiny", "small"], help="default policy size to build/load")
    p.add_argument("--cards", default="toolcards",
                   help="folder of tool cards (default: ./toolcards, else the shipped cards)")
    p.add_argument("--rewards", default="rewards",
                   help="folder of reward files (default: ./rewards, else the shipped files)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from orchlib.models import cache_dir, count_parameters, timed_build
    from orchlib.shipped import shipped_path

    print(f"python        {platform.python_version()} ({platform.machine()})")
    for name in PACKAGES:
        try:
            print(f"{name:<13} {md.version(name)}")
        except md.PackageNotFoundError:
            print(f"{name:<13} (not installed)")
    import torch

    print(f"device        {'cuda: ' + torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu'}"
          f", {torch.get_num_threads()} threads")
    model, tok, secs = timed_build(args.size)
    _, _, again = timed_build(args.size)
    print(f"policy        default-{args.size}: {count_parameters(model):,} parameters, vocab {len(tok)}; "
          f"built/loaded in {secs:.2f} s, from cache in {again:.2f} s ({cache_dir()})")
    _list("tool cards", shipped_path(args.cards), "*.yaml")
    _list("rewards", shipped_path(args.rewards), "*.yaml")
    return 0


def _list(label: str, folder: Path, pattern: str) -> None:
    files = sorted(folder.glob(pattern)) if folder.is_dir() else []
    names = ", ".join(f.stem for f in files) or "none found"
    print(f"{label:<13} {len(files)} in {folder}: {names}")
