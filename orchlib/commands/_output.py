"""Checking an output folder before a command that runs for minutes starts writing into it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["writable_folder"]


def writable_folder(path: str | os.PathLike, option: str) -> Path:
    """Make `path` (and its parents) if needed and prove it takes a file; else UsageError naming `option`.

    Probed by writing a file, not by reading mode bits: root ignores them, and a read-only mount or a
    full disk shows only when a write fails — after a long run, that would lose every result.
    """
    from orchlib.cli import UsageError

    folder = Path(path)
    try:
        for parent in [folder, *folder.parents]:
            if parent.exists() and not parent.is_dir():
                where = "is a file" if parent == folder else f"is under {parent}, which is a file"
                raise UsageError(f"{option} {path}: {where}, not a folder")
            if parent.exists():
                break
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".orchlib-write-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UsageError(f"{option} {path}: cannot write there ({e.strerror or e})") from None
    return folder
