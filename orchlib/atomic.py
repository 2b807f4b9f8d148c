"""Write a file (or a folder) so that readers see the old content or the new one, never half of either."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

__all__ = ["write_text_atomic", "folder_atomic"]


def write_text_atomic(path: str | os.PathLike, text: str, *, mode: int | None = None) -> Path:
    """Write `text` to a temporary file beside `path`, then rename it over `path`.

    `mode` sets the file's permissions (mkstemp creates it readable by its owner only)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:  # remove the partial file, then let the error reach the caller unchanged
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


@contextlib.contextmanager
def folder_atomic(folder: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling of `folder` to fill; on success it replaces `folder` whole, on any error
    it is removed and `folder` is left as it was: an interrupted write never leaves half a folder."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        yield tmp
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
