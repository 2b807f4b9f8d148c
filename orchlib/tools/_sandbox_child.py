"""The program the python sandbox runs in its child process (passed as `python -I -B -c <this file>`).

It is not imported by the library. Order matters: limits first, then the modules to preload (read
while the process may still read the interpreter's files), then the process splits in two: a keeper
that runs no user code, and the runner. In the runner privileges are dropped, the guards are
installed, and only then is the user's code (read from stdin) executed.
Exit status: 0 ok, 1 the code raised (traceback on stderr), 3 the sandbox could not be set up.

The keeper is a child subreaper (prctl PR_SET_CHILD_SUBREAPER, Linux): a process the code starts and
orphans (`setsid -f`, a double fork) becomes the keeper's child instead of init's, so it can neither
leave the keeper's tree nor outlive the run: when the runner ends, or the host sends SIGTERM, the
keeper kills every process left in its tree, then exits with the runner's status.

The guards (an audit hook, PEP 578, and the removal of functions no audit event covers) keep their
state in closures of `_install_guards`, not in this module's globals: the user's code can reach this
module (`sys.modules`, frames), and a global such as the working directory could be rewritten.
"""

import ast
import builtins
import json
import os
import resource
import signal
import sys
import time
import traceback
import types

cfg = json.loads(sys.argv[1])
code = sys.stdin.read()


def _limit(which, soft, hard=None):
    resource.setrlimit(which, (soft, soft if hard is None else hard))


try:
    _limit(resource.RLIMIT_CORE, 0)
    # SIGXCPU at the soft limit, SIGKILL one second later if it is caught.
    _limit(resource.RLIMIT_CPU, cfg["cpu_s"], cfg["cpu_s"] + 1)
    _limit(resource.RLIMIT_AS, cfg["memory_bytes"])
    _limit(resource.RLIMIT_FSIZE, cfg["file_bytes"])
    _limit(resource.RLIMIT_NOFILE, cfg["open_files"])
    if cfg["nproc"] is not None:
        _limit(resource.RLIMIT_NPROC, cfg["nproc"])
    # A write past RLIMIT_FSIZE then fails with OSError (EFBIG) instead of killing the process.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
except (OSError, ValueError) as e:
    print(f"sandbox: could not set limits: {e}", file=sys.stderr)
    os._exit(3)

for name in cfg["preload"]:
    try:
        __import__(name)
    except ImportError as e:  # said on stderr so the user sees why a later import fails
        print(f"sandbox: could not preload {name}: {e}", file=sys.stderr)



def _base(name):
    return name.rpartition(".")[2]


def _runs_other_interpreters(name):
    """Modules that start a sub-interpreter, where no audit hook runs (PEP 554's _xxsubinterpreters, the
    test modules' run_in_subinterp), or that exist only to test the C API."""
    base = _base(name)
    return base.startswith(("_xxsub", "_xxinterp", "_interp", "_test", "_xxtest")) or base in (
        "interpreters", "_ctypes_test", "xxsubtype", "xxlimited", "xxlimited_35")


_preloaded_interpreters = sorted(n for n in sys.modules if _runs_other_interpreters(n))
if _preloaded_interpreters:
    print(f"sandbox: cannot preload {_preloaded_interpreters[0]}: it runs code where the guards do not",
          file=sys.stderr)
    os._exit(3)


def _children(parent):
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()  # after "(comm)", which may hold spaces
            except OSError:  # ended while we looked
                continue
            if int(fields[1]) == parent:
                found.append(int(name))
    return found


def _end_tree(patience_s=5.0):
    """Kill and reap every process of the keeper's tree: orphans are re-parented to the keeper as their
    parents die, so the loop ends when the keeper has no child left."""
    me, deadline = os.getpid(), time.monotonic() + patience_s
    while time.monotonic() < deadline:
        for child in _children(me):
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
            except PermissionError:  # under bwrap as root without CAP_KILL: its pid namespace ends them
                return
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return
        time.sleep(0.002)


def _keep():
    """Split into keeper and runner; only the runner returns."""
    try:
        import ctypes  # the runner's guards refuse ctypes and forget this import

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (ImportError, OSError, AttributeError):  # not Linux: orphans go to init, as without a keeper
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    runner = os.fork()
    if runner == 0:
        return
    os.close(0)

    def stop(*_):
        try:
            os.kill(runner, signal.SIGKILL)
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGTERM, stop)
    while True:
        try:
            _, status = os.waitpid(runner, 0)
            break
        except InterruptedError:
            continue
    _end_tree()
    if os.WIFSIGNALED(status):  # die of the same signal, so the host reads the runner's end
        sig = os.WTERMSIG(status)
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status))


try:
    _keep()
except OSError as e:
    print(f"sandbox: could not start: {e}", file=sys.stderr)
    os._exit(3)

import linecache  # noqa: E402  (used for tracebacks after privileges are dropped)

try:
    if cfg["uid"] is not None:
        os.setgroups([])
        os.setgid(cfg["gid"])
        os.setuid(cfg["uid"])
    os.chdir(cfg["workdir"])
except OSError as e:
    print(f"sandbox: could not drop privileges or enter the working directory: {e}", file=sys.stderr)
    os._exit(3)


def _install_guards(cfg):
    import _imp
    import pathlib
    import stat

    # Every function the checks call is bound here, once: the user's code can rebind module attributes
    # (posixpath.realpath, os.lstat, ...) and reach this module's globals through its frames, but not
    # these closures. Settings are copied out of `cfg` for the same reason.
    lstat, readlink, getcwd, is_link, is_dir = os.lstat, os.readlink, os.getcwd, stat.S_ISLNK, stat.S_ISDIR
    getpid = os.getpid
    pure_str, pure_fspath = pathlib.PurePath.__str__, pathlib.PurePath.__fspath__
    path_types, dir_entry = (pathlib.PosixPath, pathlib.PurePosixPath), os.DirEntry
    isinstance_, str_, bytes_, int_, type_ = isinstance, str, bytes, int, type
    len_, any_, getattr_, id_, namespace = len, any, getattr, id, types.SimpleNamespace

    def real(path):
        """posixpath.realpath(path, strict=False), on the bound functions above."""
        if not path.startswith("/"):
            path = getcwd() + "/" + path
        pending, parts, hops = [p for p in path.split("/") if p][::-1], [], 0
        while pending:
            part = pending.pop()
            if part == ".":
                continue
            if part == "..":
                if parts:
                    parts.pop()
                continue
            candidate = "/" + "/".join([*parts, part])
            try:
                mode = lstat(candidate).st_mode
            except OSError:  # missing: the rest is taken as written, like realpath
                parts.append(part)
                continue
            if not is_link(mode) or hops >= 40:
                parts.append(part)
                continue
            hops += 1
            target = readlink(candidate)
            if target.startswith("/"):
                parts = []
            pending.extend([p for p in target.split("/") if p][::-1])
        return "/" + "/".join(parts)

    def text(path):
        """The path as the kernel got it. A path-like object counts only if it cannot answer one
        thing to the system call and another to this check: pathlib's own classes and os.DirEntry."""
        kind = type_(path)
        if kind is str_:
            return path
        if kind is bytes_:
            return path.decode("utf-8", "surrogateescape")
        if kind is dir_entry:
            return text(path.path)
        if kind in path_types and kind.__fspath__ is pure_fspath and kind.__str__ is pure_str:
            return pure_str(path)
        refuse(f"a path given as {kind.__name__} (use str or pathlib.Path)")

    workdir = real(cfg["workdir"])
    allow_processes, allow_network = bool(cfg["allow_processes"]), bool(cfg["allow_network"])
    writable = {os.devnull}
    # Without bubblewrap the host's temporary folders are shared: other runs' working folders (the same
    # sandbox uid owns them) and the host's own files. Under bwrap /tmp is private anyway.
    private_roots = tuple(real(r) for r in cfg.get("private_roots", ()))
    process_events = {"os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.spawn", "os.system",
                      "subprocess.Popen", "pty.spawn"}
    # event -> (position of a path it writes, position of the dir_fd that path is relative to, or None)
    path_events = {
        "os.remove": ((0, 1),), "os.rmdir": ((0, 1),), "os.mkdir": ((0, 2),), "os.chmod": ((0, 2),),
        "os.chown": ((0, 3),), "os.utime": ((0, 3),), "os.truncate": ((0, None),),
        "os.rename": ((0, 2), (1, 3)), "os.link": ((0, 2), (1, 3)), "os.symlink": ((1, 2),),
        "os.setxattr": ((0, None),), "os.removexattr": ((0, None),), "os.chdir": ((0, None),),
        "shutil.rmtree": ((0, None),), "shutil.copyfile": ((1, None),), "shutil.copytree": ((1, None),),
        "shutil.move": ((1, None),),
    }
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
    blocked = {"_posixsubprocess": "starting processes", "_ctypes": "ctypes (it could bypass these checks)",
               "ctypes": "ctypes (it could bypass these checks)"}
    interpreters_prefixes = ("_xxsub", "_xxinterp", "_interp", "_test", "_xxtest")
    interpreters_names = {"interpreters", "_ctypes_test", "xxsubtype", "xxlimited", "xxlimited_35"}
    if not allow_network:
        blocked.update(dict.fromkeys(["_socket", "socket", "_ssl", "ssl"], "network access"))
    if cfg["isolation"] == "python":
        # These create files through C calls no audit event reports (sem_open and shm_open in /dev/shm,
        # SQL `ATTACH`, dbm and history files). Under bubblewrap they only reach the private folders.
        blocked.update(dict.fromkeys(["_multiprocessing", "_posixshmem", "_sqlite3", "_dbm", "_gdbm", "readline"],
                                     "writing files outside the working directory"))
    def refused_module(name):
        """Why a module may not be loaded, or None. Judged on its last part too: an extension module's
        init function is named after it, so "a.readline" loads readline (no "import readline" event)."""
        if type_(name) is not str_:
            return "loading a module under a name that is not a string"
        for part in (name, name.rpartition(".")[2]):
            if part in blocked:
                return f"{blocked[part]} (import {name})"
            if part.startswith(interpreters_prefixes) or part in interpreters_names:
                return f"sub-interpreters and C-API test modules, where these checks do not run (import {name})"
        return None

    # Forget what the preload imported (numpy imports ctypes), so that importing it raises the event.
    for name in list(sys.modules):
        if any_(refused_module(part) for part in name.split(".")):
            del sys.modules[name]
    # Interpreter internals that could rebuild a module with the functions removed below.
    rebuild_refused = set(blocked) | {"posix", "_imp", "_signal", "gc", "_io", "builtins", "sys"}
    # Extension modules load only from where the interpreter's own live (the standard library,
    # site-packages), never from a file the code wrote: native code goes around every check here.
    native_roots = tuple(r for r in (real(p) for p in sys.path if type_(p) is str_ and p and os.path.isdir(p))
                         if r != "/" and not (r == workdir or r.startswith(workdir + "/")
                                              or any_(r == q or r.startswith(q + "/") for q in private_roots)))

    def inside(path):
        return path in writable or path == workdir or path.startswith(workdir + "/")

    def check_private(target, shown):
        """Refuse reading another process's /proc entry or a shared temporary folder."""
        if target.startswith("/proc/"):
            entry = target.split("/")[2]
            if entry.isdigit() and int_(entry) != getpid():
                refuse(f"reading another process's /proc entry ({shown})")
        if not inside(target) and any_(target == r or target.startswith(r + "/") for r in private_roots):
            refuse(f"reading outside the working directory in a shared temporary folder ({shown})")

    def fd_path(fd):
        """The path an open fd names (a file the code deleted keeps its path, plus ' (deleted)')."""
        try:
            return readlink(f"/proc/self/fd/{fd}")
        except OSError:
            refuse(f"changing an fd ({fd}) whose file cannot be told")

    def resolve(path, dir_fd=None):
        """The real path `path` names, relative to `dir_fd` (an open folder) when one is given."""
        path = text(path)
        if dir_fd not in (None, -1) and not path.startswith("/"):
            path = readlink(f"/proc/self/fd/{dir_fd}") + "/" + path
        return real(path)

    def refuse(what):
        raise PermissionError(f"sandbox: {what} is not allowed")

    def climbs(path):
        return ".." in path.split("/")

    def check_open(path, mode, flags):
        if path is None or isinstance_(path, int_):  # an fd already open: it was checked when opened
            return
        shown = text(path)
        writes = (isinstance_(mode, str_) and any_(c in mode for c in "wax+")) or \
                 (isinstance_(flags, int_) and flags & write_flags)
        # The audit event carries no dir_fd (os.open(name, flags, dir_fd=...)). A relative path is safe
        # to judge from the working directory only if it cannot climb: so `..` is refused, folders
        # outside are never opened (no dir_fd can point outside), and symlinks cannot lead outside.
        if not shown.startswith("/") and climbs(shown):
            refuse(f"a relative path that climbs with '..' ({shown})")
        target = real(shown)
        if inside(target):
            return
        if writes:
            refuse(f"writing outside the working directory ({shown})")
        try:
            folder = is_dir(lstat(target).st_mode)
        except OSError:
            folder = False
        if folder:
            refuse(f"opening a folder outside the working directory ({shown})")
        check_private(target, shown)

    def check_symlink_target(target):
        target = text(target)
        if target.startswith("/") and not inside(real(target)):
            refuse(f"a symlink to outside the working directory ({target})")
        if climbs(target):
            refuse(f"a symlink that climbs with '..' ({target})")

    def hook(event, args):
        if event == "open":
            check_open(*args)
        elif event in path_events:
            for at, fd_at in path_events[event]:
                if at >= len_(args) or args[at] is None:
                    continue
                if isinstance_(args[at], int_):  # fchmod, fchown, futimes, fsetxattr, fchdir: an fd opened
                    # for reading still changes its file's metadata, so it must name a file inside
                    if not inside(fd_path(args[at])):
                        refuse(f"{event} on an fd of a file outside the working directory")
                    continue
                dir_fd = args[fd_at] if fd_at is not None and fd_at < len_(args) else None
                if not inside(resolve(args[at], dir_fd)):
                    what = "leaving" if event == "os.chdir" else f"{event} outside"
                    refuse(f"{what} the working directory ({text(args[at])})")
            if event == "os.symlink":
                check_symlink_target(args[0])
        elif event in process_events and not allow_processes:
            refuse(f"starting processes ({event})")
        elif event in ("os.listdir", "os.scandir") and args and args[0] is not None \
                and not isinstance_(args[0], int_):
            shown = text(args[0])
            check_private(real(shown), shown)
        elif event in ("os.kill", "os.killpg") and args[0] != getpid():  # 0, the group, holds the keeper
            refuse(f"signalling other processes ({event})")
        elif event == "resource.prlimit" and args[0] not in (0, getpid()):
            refuse("changing another process's limits (resource.prlimit)")
        elif event.startswith("ctypes."):
            refuse("ctypes (it could bypass these checks)")
        elif event.startswith("socket.") and not allow_network:
            refuse(f"network access ({event})")
        elif event == "import" and refused_module(args[0]):
            refuse(refused_module(args[0]))
        elif event in ("gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames"):
            refuse(f"{event} (it could reach these checks)")
        elif event == "orchlib.sandbox.rebuild":
            function, box, *rest = args
            box.append(rebuild(function, *rest))

    # No audit event reports these: without them a FIFO or device node could be made anywhere /tmp-like,
    # the process could leave the group the host kills, or signal the host through a pidfd.
    unaudited = ["mkfifo", "mknod", "setsid", "setpgid", "setpgrp", "pidfd_open", "setpriority",
                 "sched_setaffinity", "sched_setscheduler", "sched_setparam"]
    for module in (os, sys.modules["posix"]):
        for name in unaudited:
            module.__dict__.pop(name, None)
    signal.__dict__.pop("pidfd_send_signal", None)
    sys.modules["_signal"].__dict__.pop("pidfd_send_signal", None)

    # _imp.create_builtin / create_dynamic load a module without the "import" audit event (a fresh
    # posix would have the functions removed above; _ctypes would load from its file). The wrappers
    # raise an event instead; the hook checks it and calls the real function, which only this closure
    # holds. The name is read once, and a fresh spec carries it, so a spec cannot change its name.
    originals = {n: getattr_(_imp, n) for n in ("create_builtin", "create_dynamic", "exec_builtin", "exec_dynamic")}
    protected = {id_(m) for n, m in sys.modules.items() if n in rebuild_refused}

    def rebuild(function, arg, *rest):
        if function.startswith("exec_"):
            if id_(arg) in protected:
                refuse(f"running {getattr_(arg, '__name__', '?')} again")
            return originals[function](arg)
        name, origin = getattr_(arg, "name", None), getattr_(arg, "origin", None)
        if type_(name) is not str_ or (origin is not None and type_(origin) is not str_):
            refuse("loading a module from a made-up spec")
        if name in rebuild_refused or name.rpartition(".")[2] in rebuild_refused:
            refuse(f"loading {name} again")
        why = refused_module(name)
        if why:
            refuse(why)
        if function == "create_dynamic":
            where = real(origin) if origin else ""
            if not any_(where.startswith(r + "/") for r in native_roots):
                refuse(f"loading an extension module from outside the interpreter's folders ({origin})")
        return originals[function](namespace(name=name, origin=origin), *rest)

    for function in originals:
        def wrapper(arg, *rest, _function=function):
            box = []  # one per call: imports may run in several threads at once
            sys.audit("orchlib.sandbox.rebuild", _function, box, arg, *rest)
            return box.pop()
        _imp.__dict__[function] = wrapper

    sys.addaudithook(hook)


_install_guards(cfg)
del _install_guards


def _main():
    filename = "<sandbox>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    # The user's code gets its own __main__: this runner's module stays out of `import __main__`.
    user_main = types.ModuleType("__main__")
    user_main.__builtins__ = builtins
    sys.modules["__main__"] = user_main
    namespace = user_main.__dict__
    try:
        tree = ast.parse(code, filename, "exec")
        last = None
        # Like a notebook cell: a final expression's value is shown.
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, filename, "exec"), namespace)
        if last is not None:
            value = eval(compile(last, filename, "eval"), namespace)
            if value is not None:
                print(repr(value))
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if status:
            print(f"SystemExit: {e.code}", file=sys.stderr)
        return 1 if status else 0
    except BaseException as e:  # the user's error is the result: print it the way Python would
        # Show the user's frames and the library's, not this runner's ("<string>", the -c program).
        report = traceback.TracebackException(type(e), e, e.__traceback__)
        report.stack = traceback.StackSummary.from_list([f for f in report.stack if f.filename != "<string>"])
        print("".join(report.format()), end="", file=sys.stderr)
        return 1
    return 0


status = _main()
try:
    sys.stdout.flush()
    sys.stderr.flush()
except OSError:  # the parent closed the pipe after an output overflow; the status still tells
    pass
os._exit(status)
