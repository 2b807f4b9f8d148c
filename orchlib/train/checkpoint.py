"""Atomic checkpoint folders: everything is written into a temporary sibling, then swapped in by rename.

A process killed at any moment leaves either the previous complete checkpoint or the new complete one,
never a mix. `os.replace` of a folder is atomic only onto a path that does not exist, so an existing
checkpoint is first renamed aside (`.NAME.old-PID`), the new one renamed in, then the old one renamed to
a `.NAME.trash-…` folder and only then deleted: a kill during the deletion leaves a folder that no
longer looks like a checkpoint. The marker file lists every file with its size, so a folder that lost
files some other way (an older version's interrupted clean-up, a full disk) is not taken for complete
either. `find_checkpoint` also finds a checkpoint left aside by a kill between the two renames, and
prefers the most recently committed one when several were left.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

__all__ = ["MARKER", "temporary_sibling", "commit", "find_checkpoint", "is_complete"]

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
    files = {str(p.relative_to(tmp)): p.stat().st_size for p in sorted(tmp.rglob("*")) if p.is_file()}
    (tmp / MARKER).write_text(json.dumps({"committed_ns": time.time_ns(), "files": files}) + "\n")
    old = None
    if path.exists():
        old = path.parent / f".{path.name}.old-{os.getpid()}"
        if old.exists():
            _discard(old)
        os.replace(path, old)
    os.replace(tmp, path)
    # The new checkpoint is in place: every folder left aside, now or by an earlier kill, is stale.
    for stale in [old] if old is not None else []:
        _discard(stale)
    for stale in path.parent.glob(f".{path.name}.old-*"):
        _discard(stale)
    for trash in path.parent.glob(f".{path.name}.trash-*"):
        shutil.rmtree(trash, ignore_errors=True)
    return path


def _discard(folder: Path) -> None:
    """Rename first (atomic), delete second: a kill mid-delete leaves only a `.trash-` folder."""
    trash = folder.parent / f"{folder.name.split('.old-')[0]}.trash-{os.getpid()}-{time.time_ns()}"
    os.replace(folder, trash)
    shutil.rmtree(trash, ignore_errors=True)


def is_complete(folder: Path) -> bool:
    """Whether `folder` holds its marker and every file the marker lists, at the listed size."""
    try:
        text = (folder / MARKER).read_text()
    except OSError:
        return False
    try:
        listed = json.loads(text)["files"]
    except (ValueError, KeyError, TypeError):
        return text.strip() == "ok"  # a marker written before files were listed: nothing to check
    try:
        return all((folder / name).stat().st_size == size for name, size in listed.items())
    except OSError:
        return False


def _committed_ns(folder: Path) -> int:
    try:
        return int(json.loads((folder / MARKER).read_text())["committed_ns"])
    except (ValueError, KeyError, TypeError):
        return (folder / MARKER).stat().st_mtime_ns


def find_checkpoint(path: str | os.PathLike) -> Path | None:
    """The complete checkpoint at `path`, or else the most recently committed complete one left aside by
    a kill mid-swap, or None."""
    path = Path(path)
    if is_complete(path):
        return path
    aside = [old for old in path.parent.glob(f".{path.name}.old-*") if is_complete(old)]
    return max(aside, key=_committed_ns, default=None)
