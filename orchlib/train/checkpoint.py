"""Atomic checkpoint folders: everything is written into a temporary sibling, then swapped in by rename.

A process killed at any moment leaves either the previous complete checkpoint or the new complete one,
never a mix. `os.replace` of a folder is atomic only onto a path that does not exist, so an existing
checkpoint is first renamed aside, the new one renamed in, then the old one removed;
`find_checkpoint` also finds a checkpoint left aside by a kill between those two renames.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["MARKER", "temporary_sibling", "commit", "find_checkpoint"]

MARKER = "COMPLETE"


def temporary_sibling(path: str | os.PathLike, tag: str) -> Path:
    """A fresh, empty folder next to `path` (same filesystem, so the final rename is atomic)."""
    path = Path(path)
    tmp = path.parent / f".{path.name}.tmp-{tag}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def commit(tmp: Path, path: str | os.PathLike) -> Path:
    """Mark `tmp` complete and make it `path`."""
    path = Path(path)
    (tmp / MARKER).write_text("ok\n")
    old = None
    if path.exists():
        old = path.parent / f".{path.name}.old-{os.getpid()}"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(path, old)
    os.replace(tmp, path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return path


def find_checkpoint(path: str | os.PathLike) -> Path | None:
    """The complete checkpoint at `path`, or one left aside by a kill mid-swap, or None."""
    path = Path(path)
    if (path / MARKER).exists():
        return path
    for old in sorted(path.parent.glob(f".{path.name}.old-*")):
        if (old / MARKER).exists():
            return old
    return None
