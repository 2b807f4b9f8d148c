"""The program the python sandbox runs in its child process (passed as `python -I -B -c <this file>`).

It is not imported by the library. Order matters: limits first, then the modules to preload (read
while the process may still read the interpreter's files), then privileges are dropped, then the
audit hook is installed, and only then is the user's code (read from stdin) executed.
Exit status: 0 ok, 1 the code raised (traceback on stderr), 3 the sandbox could not be set up.
"""

import ast
import builtins
import json
import os
import resource
import signal
import sys
import traceback

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

WORKDIR = os.path.realpath(cfg["workdir"])
WRITABLE = {os.devnull}
PROCESS_EVENTS = {"os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.spawn", "os.system",
                  "subprocess.Popen", "pty.spawn"}
# event -> positions of the paths it writes
PATH_EVENTS = {"os.remove": (0,), "os.rename": (0, 1), "os.rmdir": (0,), "os.mkdir": (0,), "os.symlink": (1,),
               "os.link": (1,), "os.chmod": (0,), "os.chown": (0,), "os.truncate": (0,), "os.utime": (0,),
               "os.setxattr": (0,), "os.removexattr": (0,), "shutil.rmtree": (0,), "shutil.copyfile": (1,),
               "shutil.copytree": (1,), "shutil.move": (1,), "os.mkfifo": (0,), "os.mknod": (0,)}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
BLOCKED_MODULES = {"_posixsubprocess", "_ctypes"} | ({"_socket"} if not cfg["allow_network"] else set())
for _name in BLOCKED_MODULES:
    sys.modules.pop(_name, None)


def _inside(path):
    if isinstance(path, int):  # an fd already open
        return True
    real = os.path.realpath(os.fsdecode(path))
    return real in WRITABLE or real == WORKDIR or real.startswith(WORKDIR + os.sep)


def _refuse(what):
    raise PermissionError(f"sandbox: {what} is not allowed")


def _hook(event, args):
    if event == "open":
        path, mode, flags = args
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                 (isinstance(flags, int) and flags & WRITE_FLAGS)
        if writes and path is not None and not _inside(path):
            _refuse(f"writing outside the working directory ({os.fsdecode(path)})")
    elif event in PATH_EVENTS:
        for i in PATH_EVENTS[event]:
            if i < len(args) and args[i] is not None and not _inside(args[i]):
                _refuse(f"{event} outside the working directory ({os.fsdecode(args[i])})")
    elif event in PROCESS_EVENTS and not cfg["allow_processes"]:
        _refuse(f"starting processes ({event})")
    elif event in ("os.kill", "os.killpg") and args[0] not in (0, os.getpid()):
        _refuse(f"signalling other processes ({event})")
    elif event.startswith("ctypes."):
        _refuse("ctypes (it could bypass these checks)")
    elif event.startswith("socket.") and not cfg["allow_network"]:
        _refuse(f"network access ({event})")
    elif event == "import" and args[0] in BLOCKED_MODULES:
        _refuse(f"importing {args[0]}")


sys.addaudithook(_hook)


def _main():
    filename = "<sandbox>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    namespace = {"__name__": "__main__", "__builtins__": builtins}
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
