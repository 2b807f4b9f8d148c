"""Atomic, verified checkpoint folders: written into a temporary sibling, swapped in by rename, and
checked file by file against their manifest before anything in them is read.

A process killed at any moment leaves either the previous complete checkpoint or the new complete one,
never a mix. `os.replace` of a folder is atomic only onto a path that does not exist, so an existing
checkpoint is first renamed aside (`.NAME.old-PID`), the new one renamed in, then the old one renamed to
a `.NAME.trash-…` folder and only then deleted: a kill during the deletion leaves a folder that no
longer looks like a checkpoint. `find_checkpoint` also finds a checkpoint left aside by a kill between
the two renames, and prefers the most recently committed one when several were left.

The marker file is the manifest: every file with its size and SHA-256. A checkpoint may come from
someone else (a shared run folder, a download), so loading it first checks that every listed file is
there with its hash and that nothing was added; a folder that fails is a `CheckpointError` naming the
file and what is wrong, never skipped (skipping it would restart training at step 0 and overwrite it).
Nothing in a checkpoint is unpickled: the sampler's state is JSON (`random_state_to_json`), and the
trainer reads tensors with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import time
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = ["MARKER", "CheckpointError", "CheckpointSaveError", "temporary_sibling", "commit", "abandon",
           "find_checkpoint", "is_complete", "verify", "require", "random_state_to_json", "random_state_from_json",
           "read_trainer_state"]

MARKER = "COMPLETE"
FORMAT = 2  # 1: sizes only (or the text "ok"); 2: sizes and SHA-256


class CheckpointError(ValueError):
    """A checkpoint that is incomplete or was changed after it was saved; the message names the file."""


class CheckpointSaveError(OSError):
    """A save that failed (a full disk, a write error): one line naming the folder and the cause. The
    previous checkpoint is left as it was and the partial copy is removed, so a later save can succeed."""


def temporary_sibling(path: str | os.PathLike, tag: str) -> Path:
    """A fresh, empty folder next to `path` (same filesystem, so the final rename is atomic). Partial copies
    an earlier save left (killed before it could remove them) are removed first: on a full disk they hold
    the space the new save needs."""
    path = Path(path)
    tmp = path.parent / f".{path.name}.tmp-{tag}"
    for stale in path.parent.glob(f".{path.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def abandon(tmp: Path, path: str | os.PathLike, error: BaseException) -> CheckpointSaveError:
    """Remove the partial copy `tmp` of a save of `path` that failed with `error`; the error to raise, one
    line naming the folder and the cause (the OSError behind it where there is one: a library that wraps
    a failed write, as torch.save does, keeps it as the cause or context)."""
    shutil.rmtree(tmp, ignore_errors=True)
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, OSError):
        cause = cause.__cause__ or cause.__context__
    found = cause if isinstance(cause, OSError) else error
    text = (found.strerror if isinstance(found, OSError) and found.strerror else None) \
        or (str(found).strip().splitlines() or [type(found).__name__])[0]
    failed = CheckpointSaveError(f"{path}: checkpoint not saved: {text[:200]} (the previous checkpoint is kept; "
                                 "the partial copy was removed)")
    failed.errno = getattr(found, "errno", None)
    return failed


def _sha256(file: Path) -> str:
    h = hashlib.sha256()
    with open(file, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def commit(tmp: Path, path: str | os.PathLike) -> Path:
    """Write `tmp`'s manifest (every file's size and SHA-256) and make it `path`."""
    path = Path(path)
    files = {p.relative_to(tmp).as_posix(): {"size": p.stat().st_size, "sha256": _sha256(p)}
             for p in sorted(tmp.rglob("*")) if p.is_file()}
    (tmp / MARKER).write_text(json.dumps({"format": FORMAT, "committed_ns": time.time_ns(), "files": files}) + "\n")
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


def _manifest(folder: Path) -> dict[str, Any]:
    """The marker's content, its shape checked."""
    marker = folder / MARKER
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: not a folder, so not a checkpoint")
    try:
        text = marker.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CheckpointError(f"{marker}: missing (an interrupted save, or not a checkpoint folder)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{marker}: unreadable ({e})") from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        data = None
    if isinstance(data, dict) and data.get("format") is None and isinstance(data.get("files"), dict) \
            or text.strip() == "ok":
        raise CheckpointError(f"{marker}: lists no SHA-256 hashes (saved by an older orchlib), so its files cannot "
                              "be verified; save the run again with this version")
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("files"), dict):
        raise CheckpointError(f"{marker}: not a checkpoint manifest (expected a JSON object with format {FORMAT} "
                              "and files)")
    ns = data.get("committed_ns")
    if isinstance(ns, bool) or not isinstance(ns, int) or ns < 0:
        raise CheckpointError(f"{marker}: committed_ns must be a whole number ≥ 0, got {ns!r}")
    for name, entry in data["files"].items():
        parts = PurePosixPath(name).parts
        if not parts or name.startswith("/") or ".." in parts or name == MARKER:
            raise CheckpointError(f"{marker}: files: {name!r} is not a file inside the checkpoint")
        if (not isinstance(entry, dict) or isinstance(entry.get("size"), bool) or not isinstance(entry.get("size"), int)
                or entry["size"] < 0 or not isinstance(entry.get("sha256"), str) or len(entry["sha256"]) != 64):
            raise CheckpointError(f"{marker}: files: {name}: expected {{size, sha256}}, got {str(entry)[:80]}")
    return data


def verify(folder: str | os.PathLike) -> dict[str, Any]:
    """The manifest of `folder` once every file it lists is there with its size and SHA-256 and no file
    was added; else CheckpointError naming the file and what is wrong."""
    folder = Path(folder)
    manifest = _manifest(folder)
    listed = manifest["files"]
    for name, entry in listed.items():
        file = folder / name
        try:
            size = file.stat().st_size if file.is_file() else None
        except OSError:
            size = None
        if size is None:
            raise CheckpointError(f"{file}: missing (listed in {folder / MARKER})")
        if size != entry["size"]:
            raise CheckpointError(f"{file}: {size} bytes where {entry['size']} were saved (truncated or changed)")
        if _sha256(file) != entry["sha256"]:
            raise CheckpointError(f"{file}: its SHA-256 differs from the one saved (changed after saving)")
    for p in sorted(folder.rglob("*")):
        name = p.relative_to(folder).as_posix()
        if not p.is_dir() and name != MARKER and name not in listed:
            raise CheckpointError(f"{p}: not in {folder / MARKER} (added after saving)")
    return manifest


def is_complete(folder: Path) -> bool:
    """Whether `folder` passes `verify`."""
    try:
        verify(folder)
    except CheckpointError:
        return False
    return True


def find_checkpoint(path: str | os.PathLike) -> Path | None:
    """The verified checkpoint at `path`; when `path` is missing, the most recently committed verified
    one left aside by a kill mid-swap; None when there is neither. A checkpoint at `path` that fails
    `verify` raises CheckpointError (so does one where only damaged folders were left aside): a
    damaged checkpoint is reported, never passed over."""
    path = Path(path)
    if path.exists():
        verify(path)
        return path
    aside, problems = [], []
    for old in sorted(path.parent.glob(f".{path.name}.old-*")):
        try:
            aside.append((verify(old)["committed_ns"], old))
        except CheckpointError as e:
            problems.append(str(e))  # a folder an older version's clean-up left half deleted
    if aside:
        return max(aside)[1]
    if problems:
        raise CheckpointError(f"{path}: missing, and the copy an interrupted save left aside is damaged: "
                              f"{problems[-1]}")
    return None


def require(folder: Path, name: str) -> Path:
    """`folder / name`, which a resume needs; CheckpointError when it is not there."""
    file = folder / name
    if not file.exists():
        raise CheckpointError(f"{file}: missing (every checkpoint this version saves has it)")
    return file


def _read_json(file: Path) -> Any:
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:  # e.g. a pickle where JSON belongs
        raise CheckpointError(f"{file}: not JSON (not UTF-8 text at byte {e.start})") from None
    except OSError as e:
        raise CheckpointError(f"{file}: unreadable ({e.strerror or e})") from None
    except (ValueError, RecursionError) as e:
        raise CheckpointError(f"{file}: not JSON ({str(e)[:80]})") from None


def random_state_to_json(state: tuple) -> dict[str, Any]:
    """`random.Random.getstate()` as JSON data (version, the Mersenne Twister's 624 words and position,
    the cached Gaussian)."""
    version, internal, gauss_next = state
    return {"version": version, "internal": list(internal), "gauss_next": gauss_next}


def random_state_from_json(file: Path) -> tuple:
    """The state `random_state_to_json` wrote to `file`, every part checked, for `Random.setstate`."""
    data = _read_json(file)
    if not isinstance(data, dict) or set(data) != {"version", "internal", "gauss_next"}:
        raise CheckpointError(f"{file}: expected an object with version, internal and gauss_next")
    internal, gauss = data["internal"], data["gauss_next"]
    if data["version"] != 3 or isinstance(data["version"], bool):
        raise CheckpointError(f"{file}: version: expected 3 (Python's random), got {data['version']!r}")
    if (not isinstance(internal, list) or len(internal) != 625
            or not all(isinstance(w, int) and not isinstance(w, bool) and 0 <= w < 2**32 for w in internal[:624])
            or isinstance(internal[624], bool) or not isinstance(internal[624], int) or not 0 <= internal[624] <= 624):
        raise CheckpointError(f"{file}: internal: expected 624 words below 2**32 and a position 0..624")
    if gauss is not None and (isinstance(gauss, bool) or not isinstance(gauss, (int, float))
                              or not math.isfinite(gauss)):
        raise CheckpointError(f"{file}: gauss_next: expected null or a finite number, got {gauss!r}")
    return 3, tuple(internal), None if gauss is None else float(gauss)


def read_trainer_state(file: Path) -> dict[str, Any]:
    """trainer_state.json with its fields checked: `step` a whole number ≥ 0 that equals the number of
    steps in `history` (each step appends one entry, so a larger step was never trained)."""
    state = _read_json(file)
    if not isinstance(state, dict):
        raise CheckpointError(f"{file}: expected a JSON object")
    for key, kind in (("step", int), ("history", list), ("policy_source", str), ("config", dict)):
        if key not in state:
            raise CheckpointError(f"{file}: {key}: missing")
        if not isinstance(state[key], kind) or isinstance(state[key], bool):
            raise CheckpointError(f"{file}: {key}: expected {kind.__name__}, got {type(state[key]).__name__}")
    step, history = state["step"], state["history"]
    if step < 0:
        raise CheckpointError(f"{file}: step: {step} is negative")
    if step != len(history):
        raise CheckpointError(f"{file}: step: {step}, but history holds {len(history)} step(s)")
    if not all(isinstance(m, dict) for m in history):
        raise CheckpointError(f"{file}: history: every entry must be an object of metrics")
    if not isinstance(state.get("hooks", {}), dict):
        raise CheckpointError(f"{file}: hooks: expected an object")
    return state
