"""`python` tools: a code interpreter in a separate, limited process.

Each call runs `python -I -B` (isolated: no user site, no PYTHON* variables) in a new session, in a
fresh temporary working directory that is deleted afterwards, with an environment that holds only
PATH, HOME, TMPDIR, LANG and thread-count settings (plus names the card lists in `pass_env`), so API
keys in the host's environment are not there. With `isolation` "auto" (the default) and bubblewrap
working here, the process runs inside `bwrap` (see `_bwrap_prefix`): the system read-only, a private
/tmp holding only the working directory, private /dev and /proc, no network, its own pid namespace.
The child (`_sandbox_child.py`) sets resource limits (CPU seconds, address space, file size, open
files, processes), preloads the modules the card lists, splits into a keeper (a child subreaper that
runs no user code) and a runner, which drops to an unprivileged uid when the host runs as root,
installs its guards (an audit hook, and removes the few functions no audit event covers), then runs
the code. The host keeps only the first `max_output_chars` of the output, stops the program when it
prints more than `max_stream_bytes` or its folder holds more than `disk_mb`, and on a wall-clock
timeout and after every run has the keeper kill every process the run started (those that left the
process group or the session included), then kills the process group. The Observation's label says
which isolation ran.

What each limit rests on, honestly:
- timeout, CPU, memory, file size, open files: the kernel (SIGKILL of the process group, rlimits).
- processes outliving the run: the keeper, a child subreaper, inherits every orphan and kills its whole
  tree at the end (`setsid -f` included); under bwrap the pid namespace as well. Without root and
  without bwrap, a program allowed to start processes could still kill its keeper (same uid).
- disk: RLIMIT_FSIZE per file, and the host measures the working folder (and files the run deleted but
  holds open) every 0.1 s and stops the program past `disk_mb`: a fast writer may overshoot by what it
  writes in that time, at most RLIMIT_FSIZE per open file.
- fork bombs: the guards refuse process creation; under them RLIMIT_NPROC bounds the processes
  the sandbox uid may own. The kernel ignores RLIMIT_NPROC for root, hence the drop to `uid` (65534,
  "nobody", by default) when the host is root. The count is per uid, shared by concurrent sandboxes.
  Under bwrap every process of the pid namespace dies with it.
- reading secrets: the environment is rebuilt from scratch; the guards refuse any /proc/<pid> but the
  program's own, and, without bwrap, the shared temporary folders (so two runs cannot read each other's
  folder); after the uid drop the host's /proc/<pid>/environ and root-only files are unreadable by the
  kernel's permission checks (under bwrap the host's processes are not even visible).
- writing outside the working directory: under bwrap the mount namespace (read-only system, private
  /tmp); always the guards (paths resolved, `dir_fd` included, symlinks and `..` that lead outside
  refused); after the uid drop the kernel refuses root-owned files.
- network: under bwrap no network device; always the guards.
- native code and other interpreters: ctypes, extension modules under any name or from any file outside
  the interpreter's folders, and sub-interpreters (which run without the audit hook) are refused.
Audit hooks (PEP 578) are a guard rail, not a jail: native code can go around them, which is why
ctypes is refused too. Without bubblewrap, run code you do not trust inside a container or VM as well.
Without root, no uid drop happens: the rlimits and the guards still apply, RLIMIT_NPROC then counts
all of the user's processes (set above today's count), and bwrap uses a user namespace if it can.
After the uid drop only preloaded modules and world-readable files can be imported, so list what the
code may need in `preload` when Python is installed under a private folder (e.g. pyenv in /root).
docs/tools.md lists every way out the guards refuse; tests/test_sandbox_adversarial.py tries each.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchlib.tools.base import Tool, ToolContext, ToolError
from orchlib.trajectory import Observation

__all__ = ["PythonSettings", "PythonTool", "DEFAULT_PRELOAD"]

CHILD_SOURCE = (Path(__file__).parent / "_sandbox_child.py").read_text(encoding="utf-8")
DEFAULT_PRELOAD = ["math", "cmath", "decimal", "fractions", "statistics", "random", "itertools", "functools",
                   "collections", "heapq", "bisect", "re", "json", "string", "datetime", "time", "textwrap",
                   "operator", "dataclasses", "typing", "copy", "numbers", "array", "csv", "io", "unicodedata",
                   "pathlib", "shutil", "glob", "tempfile", "hashlib", "base64", "pprint",
                   "numpy"]  # numpy is an orchlib dependency; about 0.05 s per run


class PythonSettings(BaseModel):
    """Limits of one run. Defaults fit a short calculation on a laptop."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    timeout_s: float = Field(10.0, gt=0, description="wall clock; then the process group is killed")
    cpu_s: int = Field(10, gt=0, description="RLIMIT_CPU seconds")
    memory_mb: int = Field(1024, gt=0, description="RLIMIT_AS: address space, MiB")
    file_mb: int = Field(16, ge=0, description="RLIMIT_FSIZE: largest file it may write, MiB")
    disk_mb: int = Field(64, gt=0, description="all it may keep in its folder, MiB (each entry counts at "
                                               "least 4 KiB); past it the program is stopped")
    open_files: int = Field(64, gt=8, description="RLIMIT_NOFILE")
    max_processes: int = Field(16, gt=0, description="RLIMIT_NPROC for the sandbox uid (threads count too)")
    max_output_chars: int = Field(8000, gt=0, description="output shown to the orchestrator; the rest is cut")
    max_stream_bytes: int = Field(1_000_000, gt=0, description="printing more than this stops the program")
    uid: int | None = Field(65534, description="uid (and gid) to run as when the host is root; None: no drop")
    allow_processes: bool = Field(False, description="let the code start processes (RLIMIT_NPROC still holds)")
    allow_network: bool = Field(False, description="let the code open sockets")
    pass_env: list[str] = Field(default_factory=list, description="host variables to pass on, by name")
    preload: list[str] = Field(default_factory=lambda: list(DEFAULT_PRELOAD),
                               description="modules imported before privileges are dropped")
    python: str | None = Field(None, description="interpreter; default: the one running orchlib")
    isolation: Literal["auto", "bwrap", "python"] = Field(
        "auto", description="auto: bubblewrap when it works on this host, else the Python guards alone; "
                            "bwrap: require it; python: the Python guards alone")
    argument: str = Field("code", description="which argument holds the code")


class PythonTool(Tool):
    kind = "python"
    Settings = PythonSettings

    async def _run(self, arguments: dict[str, Any], context: ToolContext) -> Observation:
        code = arguments.get(self.settings.argument)
        if not isinstance(code, str):
            raise ToolError(f"argument {self.settings.argument!r} must hold the code as a string")
        return await run_code(code, self.settings)


async def run_code(code: str, s: PythonSettings) -> Observation:
    """Run `code` under the limits of `s`; the Observation's error says which limit ended it, and its
    label which isolation ran ("sandbox: bwrap" or "sandbox: python guards")."""
    isolation = _isolation(s)
    as_root = os.geteuid() == 0 and s.uid is not None
    workdir = tempfile.mkdtemp(prefix="orchlib-sandbox-")
    try:
        if as_root:
            os.chown(workdir, s.uid, s.uid)
        config = {
            "cpu_s": s.cpu_s, "memory_bytes": s.memory_mb * 2**20, "file_bytes": s.file_mb * 2**20,
            "open_files": s.open_files, "nproc": _nproc(s, as_root), "preload": s.preload,
            "uid": s.uid if as_root else None, "gid": s.uid if as_root else None, "workdir": workdir,
            "allow_processes": s.allow_processes, "allow_network": s.allow_network, "isolation": isolation,
            "private_roots": _private_roots(workdir) if isolation == "python" else [],
        }
        config["file_bytes"] = min(config["file_bytes"], s.disk_mb * 2**20)
        python = [s.python or sys.executable, "-I", "-B", "-c", CHILD_SOURCE, json.dumps(config)]
        argv = _bwrap_prefix(workdir, as_root, s.allow_network) + python if isolation == "bwrap" else python
        obs = await _supervise(argv, code, s, config, workdir, signal_base=128 if isolation == "bwrap" else None)
        return obs.model_copy(update={"label": LABELS[isolation]})
    finally:
        shutil.rmtree(workdir, ignore_errors=True)  # root may always remove what the sandbox uid wrote


LABELS = {"bwrap": "sandbox: bwrap", "python": "sandbox: python guards"}


def _private_roots(workdir: str) -> list[str]:
    """Temporary folders every process shares, which the guards keep the program out of (other runs'
    folders live there). One that holds the interpreter (a virtual environment in /tmp) stays readable."""
    roots = {os.path.realpath(r) for r in (os.path.dirname(workdir), "/tmp", "/var/tmp", "/dev/shm")}
    python = [os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.executable)]
    return sorted(r for r in roots if r != "/" and not any(p == r or p.startswith(r + "/") for p in python))


def _isolation(s: PythonSettings) -> str:
    if s.isolation == "python":
        return "python"
    if bwrap_works():
        return "bwrap"
    if s.isolation == "bwrap":
        raise ToolError("isolation 'bwrap' was asked for, but bubblewrap is not installed or cannot make "
                        "namespaces here (Debian: apt-get install bubblewrap); use isolation 'auto' or 'python'")
    return "python"


def _bwrap_prefix(workdir: str, drop_uid: bool, allow_network: bool) -> list[str]:
    """bubblewrap (https://github.com/containers/bubblewrap): the system read-only, a private /tmp with
    only the working folder in it, a private /dev and /proc, no network, its own pid namespace (every
    process in it dies with it) and bwrap dies with its parent. As root it drops every capability, but
    for the two the child needs to drop to the sandbox uid when it drops (`drop_uid`); without root bwrap
    uses a user namespace."""
    argv = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
            "--bind", workdir, workdir, "--chdir", "/", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--die-with-parent"]
    if not allow_network:
        argv.append("--unshare-net")
    if os.geteuid() == 0:  # with `uid: None` too: a root child keeping CAP_SYS_ADMIN could remount / writable
        argv += ["--cap-drop", "ALL"]
        if drop_uid:
            argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    return [*argv, "--"]


@functools.cache
def bwrap_works() -> bool:
    """Whether bubblewrap is installed and can make the namespaces above here (checked once per process;
    containers often forbid them)."""
    if shutil.which("bwrap") is None:
        return False
    workdir = tempfile.mkdtemp(prefix="orchlib-sandbox-probe-")
    try:
        done = subprocess.run([*_bwrap_prefix(workdir, os.geteuid() == 0, False), "/bin/sh", "-c", "exit 0"],
                              capture_output=True, timeout=10)
        return done.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _environment(workdir: str, s: PythonSettings) -> dict[str, str]:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8",
           "PYTHONIOENCODING": "utf-8",
           # One BLAS/OpenMP thread: threads count against RLIMIT_NPROC and RLIMIT_AS.
           "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.update({k: os.environ[k] for k in s.pass_env if k in os.environ})
    return env


def _nproc(s: PythonSettings, as_root: bool) -> int:
    if as_root:
        return s.max_processes
    # Without the uid drop the limit counts every process of this user: leave room above today's count.
    uid, mine = os.getuid(), 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                mine += entry.stat().st_uid == uid
            except OSError:  # the process ended while we looked
                continue
    return mine + s.max_processes


async def _supervise(argv: list[str], code: str, s: PythonSettings, config: dict[str, Any], workdir: str,
                     signal_base: int | None) -> Observation:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        cwd=workdir, env=_environment(workdir, s), start_new_session=True)
    keeper = signal_base is None  # without bwrap the child is the keeper (see _sandbox_child.py)
    out, err = _Capture(s, keeper), _Capture(s, keeper)
    out.sibling, err.sibling = err, out  # the output limit counts both streams together
    readers = [asyncio.ensure_future(out.read(proc.stdout, proc)), asyncio.ensure_future(err.read(proc.stderr, proc))]
    over_disk: int | None = None
    try:
        proc.stdin.write(code.encode("utf-8"))
        try:
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the child died before reading all of its code; its exit status tells why
        proc.stdin.close()
        timed_out, over_disk = await _watch(proc, s, workdir)
    finally:
        _stop(proc, keeper)
        if keeper:  # the keeper kills its whole tree, then exits; the group kill below is the fallback
            await _exited(proc, 3.0)
        _kill_group(proc)  # also ends children the program left behind
        await _exited(proc, 5.0)  # not proc.wait(): it also waits for the pipes (see _exited)
        # Under bwrap the pid namespace ends every process in it; bwrap's own helper (root, not the
        # sandbox uid) is left as a zombie for init to reap, which can take seconds: wait for the live ones.
        await _group_gone(proc.pid, zombies_count=signal_base is None)
        # Readers end at EOF once every holder of the pipes is dead; a process that left the group
        # (setsid) could hold them open, so do not wait on it for long.
        _, pending = await asyncio.wait(readers, timeout=2.0)
        for task in pending:
            task.cancel()
    status = proc.returncode
    if signal_base is not None and status > signal_base:  # bwrap exits 128 + n when its child died of signal n
        status = signal_base - status
    output = _join(out.text(), err.text(), s.max_output_chars, out.total + err.total)
    error = None
    if over_disk is not None:
        error = (f"disk quota of {s.disk_mb} MiB exceeded (its files took {over_disk / 2**20:.1f} MiB or more); "
                 "the program was stopped")
        return Observation(content=_with_error(output, error), error=error, error_kind="tool_failure")
    if timed_out:
        return Observation(content=_with_error(output, f"wall-clock limit of {s.timeout_s:g} s reached; "
                                               "the process group was killed"),
                           error=f"python: wall-clock limit of {s.timeout_s:g} s reached", error_kind="timeout")
    if out.overflow or err.overflow:
        error = (f"output exceeded {s.max_stream_bytes:,} bytes; the program was stopped "
                 f"(print less, or write to a file)")
    elif status == -signal.SIGXCPU:
        error = f"CPU time limit of {s.cpu_s} s exceeded"
    elif status == -signal.SIGKILL:  # the CPU hard limit one second later, or the kernel's OOM killer
        error = f"killed (SIGKILL): CPU time limit of {s.cpu_s} s or out of memory"
    elif status == 3:
        error = err.text().strip().splitlines()[-1] if err.text().strip() else "sandbox set-up failed"
    elif status and status < 0:
        error = f"killed by signal {signal.Signals(-status).name}"
    elif status:
        error = _last_line(err.text()) or f"exit status {status}"
        if "MemoryError" in error.split(":")[0]:
            error += f" (memory limit {s.memory_mb} MiB)"
        elif "No module named" in error and config["uid"] is not None and _private_python():
            error += (" (after the uid drop only preloaded modules can be imported from this Python install: "
                      "add the module to the card's backend.preload)")
    if error:
        return Observation(content=_with_error(output, error), error=error, error_kind="tool_failure")
    return Observation(content=output or "(no output)")


def _private_python() -> bool:
    """True when the standard library sits behind a folder others cannot enter (e.g. pyenv in /root)."""
    folder = Path(os.__file__).resolve().parent
    return any(not p.stat().st_mode & 0o001 for p in [folder, *folder.parents])


async def _watch(proc: asyncio.subprocess.Process, s: PythonSettings, workdir: str) -> tuple[bool, int | None]:
    """Wait for the child to exit: (whether the wall clock ran out, bytes in use when over the disk quota)."""
    deadline, limit = time.monotonic() + s.timeout_s, s.disk_mb * 2**20
    next_look = time.monotonic() + DISK_LOOK_S
    while proc.returncode is None:
        now = time.monotonic()
        if now >= deadline:
            return True, None
        if now >= next_look:
            used = await asyncio.to_thread(disk_use, workdir, proc.pid, limit)
            if used > limit:
                return False, used
            next_look = time.monotonic() + DISK_LOOK_S
        await asyncio.sleep(0.005)
    used = disk_use(workdir, None, limit)  # a short run may have written it all before the first look
    return False, used if used > limit else None


DISK_LOOK_S = 0.1  # how often a running program's files are measured
ENTRY_BYTES = 4096  # what a file or folder costs at least (one block): a million empty files are not free


def disk_use(workdir: str, root_pid: int | None, limit: int) -> int:
    """Bytes the run's files take: every entry under `workdir` (its blocks, at least ENTRY_BYTES; hard
    links once), plus files under it that the run's processes deleted but hold open. Counting stops
    past `limit`. A folder the host cannot read counts as over the limit (its size cannot be told)."""
    total, seen, folders = 0, set(), [workdir]
    while folders:
        try:
            entries = list(os.scandir(folders.pop()))
        except FileNotFoundError:
            continue
        except OSError:
            return limit + 1
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
            total += max(st.st_blocks * 512, ENTRY_BYTES)
            if stat.S_ISDIR(st.st_mode):
                folders.append(entry.path)
            if total > limit:
                return total
    if root_pid is not None:
        total += _deleted_but_open(workdir, root_pid, seen)
    return total


def _deleted_but_open(workdir: str, root_pid: int, seen: set) -> int:
    """Bytes of files under `workdir` that processes of the run's tree deleted and still hold open."""
    parents: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            parents.setdefault(ppid, []).append(int(entry.name))
    total, pending = 0, [root_pid]
    while pending:
        pid = pending.pop()
        pending += parents.get(pid, [])
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # ended, or not ours to read
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if not (target.startswith(workdir + "/") and target.endswith(" (deleted)")):
                    continue
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def _stop(proc: asyncio.subprocess.Process, keeper: bool) -> None:
    """Stop the program: ask the keeper to end its tree (it kills the runner first), or, under bwrap,
    kill the group (the pid namespace dies with bwrap)."""
    if not keeper:
        _kill_group(proc)
        return
    if proc.returncode is not None:  # reaped: its pid may be another process's by now
        return
    try:
        os.kill(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass


class _Capture:
    """Keeps the head of a stream, counts the rest, and stops the program past max_stream_bytes."""

    def __init__(self, s: PythonSettings, keeper: bool = False):
        self.keeper = keeper
        self.keep = s.max_output_chars * 4  # bytes enough for max_output_chars of UTF-8
        self.limit = s.max_stream_bytes
        self.head = bytearray()
        self.total = 0
        self.overflow = False
        self.sibling: _Capture | None = None

    async def read(self, stream: asyncio.StreamReader, proc: asyncio.subprocess.Process) -> None:
        while chunk := await stream.read(65536):
            self.total += len(chunk)
            if len(self.head) < self.keep:
                self.head += chunk[: self.keep - len(self.head)]
            if self.total + (self.sibling.total if self.sibling else 0) > self.limit and not self.overflow:
                self.overflow = True
                _stop(proc, self.keeper)

    def text(self) -> str:
        return self.head.decode("utf-8", errors="replace")


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # start_new_session: the group id is the child's pid
    except (ProcessLookupError, PermissionError):
        pass  # the group is already gone (PermissionError: macOS reports a reaped group this way)


async def _exited(proc: asyncio.subprocess.Process, timeout_s: float) -> bool:
    """Whether the child exited within the timeout. `proc.wait()` would also wait for its pipes to
    close, which never happens while a forked grandchild holds them; `returncode` is set at exit."""
    deadline = time.monotonic() + timeout_s
    while proc.returncode is None:
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.005)
    return True


async def _group_gone(pgid: int, patience_s: float = 2.0, zombies_count: bool = True) -> None:
    """Wait until every process of the group has been reaped: killed children linger a moment as
    zombies of init, and they still count against RLIMIT_NPROC for the next sandbox. With
    `zombies_count=False`, wait only until none of them is still running."""
    for _ in range(int(patience_s / 0.01)):
        if zombies_count:
            try:
                os.killpg(pgid, 0)
            except (ProcessLookupError, PermissionError):
                return
        elif not _running_in_group(pgid):
            return
        await asyncio.sleep(0.01)


def _running_in_group(pgid: int) -> bool:
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()  # after "(comm)", which may hold spaces
            except OSError:  # the process ended while we looked
                continue
            if int(fields[2]) == pgid and fields[0] != b"Z":  # fields: state, ppid, pgrp, ...
                return True
    return False


def _join(stdout: str, stderr: str, limit: int, total_bytes: int) -> str:
    text = stdout + (("\n" if stdout and not stdout.endswith("\n") else "") + stderr if stderr else "")
    if len(text) > limit or total_bytes > len(text.encode("utf-8")):
        return text[:limit] + f"\n… [output truncated: {total_bytes:,} bytes in all, first {limit:,} characters shown]"
    return text.rstrip("\n")


def _with_error(output: str, error: str) -> str:
    return (output + "\n" if output else "") + f"error: {error}"


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""
