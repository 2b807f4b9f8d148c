"""Every way plain Python reaches the file system, the network or other processes, tried against the
sandbox: with bubblewrap (when it works here) and with the Python guards alone. Each attempt must be
refused, leave nothing outside the sandbox's folder, and leave no process behind."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from orchlib.cards import load_card
from orchlib.tools import build_tool
from orchlib.tools.python import DEFAULT_PRELOAD, bwrap_works

CARD = load_card(Path(__file__).resolve().parents[1] / "toolcards" / "python.yaml")
ISOLATIONS = ["python", pytest.param("bwrap", marks=pytest.mark.skipif(not bwrap_works(),
                                                                      reason="bubblewrap cannot run here"))]


def run(code: str, isolation: str, **backend):
    card = CARD.model_copy(update={"backend": {**CARD.backend, "isolation": isolation, "timeout_s": 5, **backend}})
    obs = build_tool(card).call_sync({"code": code})
    assert obs.label == f"sandbox: {'bwrap' if isolation == 'bwrap' else 'python guards'}"
    return obs


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if marker.encode() in Path(entry.path, "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.fixture
def target():
    """A path in the host's /tmp the code will try to create; it must not exist afterwards."""
    path = Path("/tmp") / f"orchlib-escape-{uuid.uuid4().hex}"
    yield path
    assert not path.exists() and not path.is_symlink(), f"the sandbox wrote {path}"


# Each: code that tries to create `{t}` (the target's path) and a piece of the error it must end with.
ESCAPES = {
    "dir_fd of /tmp": ("import os\nfd = os.open('/tmp', os.O_RDONLY)\n"
                       "os.open('{n}', os.O_WRONLY | os.O_CREAT, dir_fd=fd)", "opening a folder outside"),
    "dir_fd with O_PATH": ("import os\nfd = os.open('/tmp', os.O_PATH | os.O_DIRECTORY)\n"
                           "os.open('{n}', os.O_WRONLY | os.O_CREAT, dir_fd=fd)", "opening a folder outside"),
    "dir_fd of the workdir, then ..": ("import os\nfd = os.open('.', os.O_RDONLY)\n"
                                       "os.open('../{n}', os.O_WRONLY | os.O_CREAT, dir_fd=fd)", "climbs with '..'"),
    "dir_fd under a symlink that climbs": (
        "import os\nos.makedirs('a/b/c')\nos.mkdir('x')\nos.mkdir('x/s')\nfd = os.open('x', os.O_RDONLY)\n"
        "os.open('s/../../../{n}', os.O_WRONLY | os.O_CREAT, dir_fd=fd)", "climbs with '..'"),
    "mkdir with dir_fd": ("import os\nfd = os.open('.', os.O_RDONLY)\nos.mkdir('../{n}', dir_fd=fd)",
                          "os.mkdir outside"),
    "symlink to outside, then write through it": (
        "import os\nos.symlink('/tmp', 'out')\nopen('out/{n}', 'w')", "a symlink to outside"),
    "symlink that climbs": ("import os\nos.symlink('../..', 'up')\nopen('up/tmp/{n}', 'w')", "climbs with '..'"),
    "symlink placed outside": ("import os\nos.symlink('/etc/passwd', '{t}')", "os.symlink outside"),
    "hard link placed outside": ("open('mine', 'w').write('x')\nimport os\nos.link('mine', '{t}')", "os.link outside"),
    "rename to outside": ("open('mine', 'w').write('x')\nimport os\nos.rename('mine', '{t}')", "os.rename outside"),
    "rename with dst_dir_fd": ("open('mine', 'w').write('x')\nimport os\nos.mkdir('d')\n"
                               "fd = os.open('d', os.O_RDONLY)\n"
                               "os.replace('mine', '../../{n}', dst_dir_fd=fd)", "os.rename outside"),
    "/proc/self/fd of the workdir": ("import os\nfd = os.open('.', os.O_RDONLY)\n"
                                     "open(f'/proc/self/fd/{{fd}}/../{n}', 'w')", "writing outside"),
    "/proc/self/root": ("open('/proc/self/root/tmp/{n}', 'w')", "writing outside"),
    "/proc/self/cwd": ("open('/proc/self/cwd/../{n}', 'w')", "writing outside"),
    "chdir out": ("import os\nos.chdir('/tmp')\nopen('{n}', 'w')", "leaving the working directory"),
    "mkfifo (no audit event)": ("import os\nos.mkfifo('{t}')", "has no attribute 'mkfifo'"),
    "mknod via posix": ("import posix\nposix.mknod('{t}')", "has no attribute 'mknod'"),
    "rebuilt posix": ("import _imp, importlib.machinery as m\n"
                      "_imp.create_builtin(m.ModuleSpec('posix', None)).mkfifo('{t}')", "loading posix again"),
    "spec that changes its name": (
        "import _imp\nclass S:\n    n = 0\n    @property\n    def name(self):\n        S.n += 1\n"
        "        return 'math' if S.n == 1 else 'posix'\n    origin = None\n"
        "_imp.create_builtin(S()).mkfifo('{t}')", "has no attribute 'mkfifo'"),  # the name is read once
    "path-like that changes its answer": (  # the check sees the same string the system call gets
        "import os\nclass P:\n    n = 0\n    def __fspath__(self):\n        P.n += 1\n"
        "        return 'inside' if P.n % 2 else '{t}'\nos.open(P(), os.O_WRONLY | os.O_CREAT)\n"
        "os.open(P(), os.O_WRONLY | os.O_CREAT)", "writing outside"),
    "rebinding the functions the checks use": (
        "import os, posixpath\nposixpath.realpath = lambda p, **k: os.getcwd()\n"
        "os.path.realpath = posixpath.realpath\nos.readlink = lambda p, **k: os.getcwd()\nopen('{t}', 'w')",
        "writing outside"),
    "the runner's globals": ("import sys\ng = sys._getframe(1).f_globals\ng['cfg']['allow_processes'] = True\n"
                             "g['WORKDIR'] = '/'\nimport os\nos.system('touch {t}')", "starting processes"),
    "shutil.copyfile": ("import shutil\nshutil.copyfile('/etc/hostname', '{t}')", "outside the working directory"),
    "mmap of /proc/self/mem": ("import mmap\nf = open('/proc/self/mem', 'r+b')", "writing outside"),
    "mmap of a host file": ("import mmap\nf = open('/etc/hostname', 'rb')\n"
                            "mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_WRITE)[:1] = b'X'", "Permission denied"),
    "subprocess": ("import subprocess\nsubprocess.run(['touch', '{t}'])", "starting processes"),
    "os.system": ("import os\nos.system('touch {t}')", "starting processes (os.system)"),
    "posix_spawn": ("import os\nos.posix_spawn('/usr/bin/touch', ['touch', '{t}'], {{}})", "starting processes"),
    "ctypes": ("import ctypes\nctypes.CDLL(None).creat(b'{t}', 0o644)", "ctypes (it could bypass these checks)"),
    "ctypes loaded from its file": (
        "import _imp, importlib.machinery as m\n"
        "_imp.create_dynamic(m.ModuleSpec('_ctypes', None, origin='{ctypes_so}'))", "loading _ctypes again"),
}


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("name", list(ESCAPES))
def test_each_way_out_to_the_file_system_is_refused(isolation, name, target):
    code, needle = ESCAPES[name]
    import _ctypes

    obs = run(code.format(t=target, n=target.name, ctypes_so=_ctypes.__file__), isolation,
              preload=[*DEFAULT_PRELOAD, "subprocess", "mmap"])
    assert obs.error is not None and needle in obs.error, (name, obs.content)


NETWORK = {
    "socket": ("import socket\nsocket.create_connection(('127.0.0.1', {port}))", "network access (import socket)"),
    "_socket": ("import _socket\n_socket.socket().connect(('127.0.0.1', {port}))", "network access (import _socket)"),
    "_socket loaded from its file": (
        "import _imp, importlib.machinery as m\n"
        "s = _imp.create_dynamic(m.ModuleSpec('_socket', None, origin='{socket_so}'))\n"
        "s.socket().connect(('127.0.0.1', {port}))", "loading _socket again"),
    "socket after a new import": ("import socket\nsocket.socket().connect(('127.0.0.1', {port}))",
                                  "network access (import socket)"),
    "a socket module a preloaded module holds": (
        "import http.client\nhttp.client.socket.socket().connect(('127.0.0.1', {port}))",
        "network access (socket.__new__)"),
}


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("name", list(NETWORK))
def test_the_network_is_refused_and_a_host_server_sees_nothing(isolation, name):
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    code, needle = NETWORK[name]
    import _socket

    preload = [*DEFAULT_PRELOAD, "socket", "http.client"]
    obs = run(code.format(port=server.getsockname()[1], socket_so=_socket.__file__), isolation, preload=preload)
    assert obs.error is not None and needle in obs.error, (name, obs.content)
    with pytest.raises(TimeoutError):
        server.accept()  # nobody connected
    server.close()


SIGNALS = {
    "kill the parent": ("import os, signal\nos.kill(os.getppid(), signal.SIGTERM)", "signalling other processes"),
    "kill everything": ("import os, signal\nos.kill(-1, signal.SIGKILL)", "signalling other processes"),
    "kill the host's group": ("import os, signal\nos.killpg({host_pgid}, signal.SIGTERM)",
                              "signalling other processes"),
    "kill the host by pid": ("import os, signal\nos.kill({host_pid}, signal.SIGTERM)", "signalling other processes"),
    "a pidfd (no audit event)": ("import os\nos.pidfd_open({host_pid})", "has no attribute 'pidfd_open'"),
    "pidfd_send_signal": ("import signal\nsignal.pidfd_send_signal", "has no attribute 'pidfd_send_signal'"),
    "limits of the host": ("import resource\nresource.prlimit({host_pid}, resource.RLIMIT_NOFILE, (1, 1))",
                           "changing another process's limits"),
    "leave the process group": ("import os\nos.setsid()", "has no attribute 'setsid'"),
    "signal the whole group (the keeper too)": ("import os, signal\nos.kill(0, signal.SIGTERM)",
                                                "signalling other processes"),
}


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("name", list(SIGNALS))
def test_signals_to_the_host_are_refused(isolation, name):
    caught = []
    previous = signal.signal(signal.SIGTERM, lambda *a: caught.append(a))
    try:
        code, needle = SIGNALS[name]
        obs = run(code.format(host_pid=os.getpid(), host_pgid=os.getpgrp()), isolation,
                  preload=[*DEFAULT_PRELOAD, "resource"])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert obs.error is not None and needle in obs.error, (name, obs.content)
    assert caught == []
    assert os.sysconf("SC_OPEN_MAX") > 1  # the host's limits are unchanged


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_no_process_outlives_the_run(isolation):
    marker = f"{time.time_ns() % 10**9}.25"  # a sleep length no other process uses
    code = ("import os\nfor _ in range(3):\n    if os.fork() == 0:\n"
            f"        os.execv('/bin/sleep', ['sleep', '{marker}'])\n"
            "print('started')")
    obs = run(code, isolation, allow_processes=True)
    assert obs.error is None and obs.content == "started"
    deadline = time.monotonic() + 3
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with(marker) == []


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_ordinary_file_work_inside_the_folder_still_works(isolation):
    code = ("import os, shutil, pathlib, tempfile\nos.makedirs('a/b')\npathlib.Path('a/b/f.txt').write_text('hi')\n"
            "os.symlink('b/f.txt', 'a/link')\nos.rename('a/b/f.txt', 'a/b/g.txt')\nos.symlink('b/g.txt', 'a/l2')\n"
            "fd = os.open('a', os.O_RDONLY)\nos.open('new', os.O_WRONLY | os.O_CREAT, dir_fd=fd)\n"
            "with tempfile.TemporaryDirectory() as t:\n    open(os.path.join(t, 'x'), 'w').write('1')\n"
            "shutil.rmtree('a')\nimport numpy as np\nnp.save('arr.npy', np.arange(3))\n"
            "sorted(os.listdir('.')), open('/etc/hostname').read() != ''")
    obs = run(code, isolation)
    assert obs.error is None and obs.content == "(['arr.npy'], True)", obs.content


@pytest.mark.skipif(not bwrap_works(), reason="bubblewrap cannot run here")
def test_under_bwrap_the_system_is_read_only_and_tmp_private(target):
    code = ("import os\nprint(sorted(os.listdir('/tmp')) == [os.path.basename(os.getcwd())])\n"
            "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
    obs = run(code, "bwrap")
    assert obs.error is None
    private_tmp, pids = obs.content.splitlines()
    assert private_tmp == "True" and pids == "[1, 2, 3]"  # bwrap's init, the keeper, the runner: no host process


# ---- ways out that held only under bubblewrap: each is refused by the guards alone as well. They run as
# the host's uid (`uid: None`), so that the guards, not the kernel's permission checks, are what holds.
def so_file(module: str) -> str:
    return __import__(module).__file__


NATIVE = {
    "sub-interpreter": ("import _xxsubinterpreters as s\ns.run_string(s.create(), \"open('{t}', 'w')\")",
                        "sub-interpreters and C-API test modules"),
    "sub-interpreter of _testcapi": ("import _testcapi\n_testcapi.run_in_subinterp(\"open('{t}', 'w')\")",
                                     "sub-interpreters and C-API test modules"),
    "sub-interpreter under an alias": (
        "import _imp, importlib.machinery as m\n"
        "s = _imp.create_dynamic(m.ModuleSpec('a._xxsubinterpreters', None, origin='{subinterpreters_so}'))\n"
        "s.run_string(s.create(), \"open('{t}', 'w')\")", "sub-interpreters and C-API test modules"),
    "_socket under an alias": (
        "import _imp, importlib.machinery as m\n"
        "_imp.create_dynamic(m.ModuleSpec('a._socket', None, origin='{socket_so}'))", "loading a._socket again"),
    "an extension module the code wrote": (
        "import base64, _imp, importlib.machinery as m\nopen('x.so', 'wb').write(base64.b64decode('{bisect_b64}'))\n"
        "_imp.create_dynamic(m.ModuleSpec('_bisect', None, origin='x.so'))",
        "loading an extension module from outside the interpreter's folders"),
    "an extension module the code wrote, imported from sys.path": (
        "import base64, os, sys\nos.mkdir('lib')\n"
        "open('lib/{bisect_name}', 'wb').write(base64.b64decode('{bisect_b64}'))\n"
        "sys.path.insert(0, os.path.abspath('lib'))\nsys.modules.pop('_bisect', None)\nimport _bisect",
        "loading an extension module from outside the interpreter's folders"),
}


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("name", list(NATIVE))
def test_native_code_and_sub_interpreters_are_refused(isolation, name, target):
    import base64

    code, needle = NATIVE[name]
    bisect_so = so_file("_bisect")
    code = code.format(t=target, subinterpreters_so=so_file("_xxsubinterpreters"), socket_so=so_file("_socket"),
                       bisect_b64=base64.b64encode(Path(bisect_so).read_bytes()).decode(),
                       bisect_name=Path(bisect_so).name)
    obs = run(code, isolation, uid=None)
    assert obs.error is not None and needle in obs.error, (name, obs.content[-500:])


ALIASED_WRITERS = {  # modules that write files through C calls no audit event reports, loaded as "a.<name>"
    "readline": ("r.write_history_file('{t}')", lambda t: t),
    "_posixshmem": ("import os\nr.shm_open('/{n}', os.O_CREAT | os.O_RDWR, 0o600)",
                    lambda t: Path("/dev/shm") / t.name),
}


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("module", list(ALIASED_WRITERS))
def test_a_module_loaded_under_an_alias_writes_nothing_outside(isolation, module, target):
    code, written = ALIASED_WRITERS[module]
    code = ("import _imp, importlib.machinery as m\n"
            f"r = _imp.create_dynamic(m.ModuleSpec('a.{module}', None, origin='{so_file(module)}'))\n"
            + code.format(t=target, n=target.name))
    try:
        obs = run(code, isolation, uid=None)
        if isolation == "python":  # under bwrap these reach only the private /tmp and /dev
            assert obs.error is not None and f"loading a.{module} again" in obs.error, obs.content
    finally:
        leaked = written(target).exists()
        written(target).unlink(missing_ok=True)
    assert not leaked


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_another_process_s_proc_entry_is_refused(isolation, monkeypatch):
    monkeypatch.setenv("ORCHLIB_HOST_SECRET", "sk-host-secret")
    for path in (f"/proc/{os.getpid()}/environ", f"/proc/self/../{os.getpid()}/environ", "/proc/1/cmdline"):
        obs = run(f"open({path!r}, 'rb').read()", isolation, uid=None)
        assert obs.error is not None and "reading another process's /proc entry" in obs.error, (path, obs.content)
        assert "sk-host-secret" not in obs.content
    listing = run(f"import os\nos.listdir('/proc/{os.getpid()}/fd')", isolation, uid=None)
    assert listing.error is not None and "reading another process's /proc entry" in listing.error
    own = run("open('/proc/self/status').read().split()[0]", isolation, uid=None)
    assert own.error is None and own.content == "'Name:'"


@pytest.fixture
def host_file():
    """A file of the host's, outside every temporary folder (the guards keep the code out of those)."""
    path = Path(__file__).resolve().parent / f".orchlib-fd-target-{uuid.uuid4().hex}"
    path.write_text("host")
    path.chmod(0o600)
    os.utime(path, (1_000_000_000, 1_000_000_000))
    yield path
    path.unlink()


FD_METADATA = {
    "fchmod": "os.fchmod(fd, 0o777)",
    "fchown": "os.fchown(fd, 12345, 12345)",
    "futimes": "os.utime(fd, (0, 0))",
    "fsetxattr": "os.setxattr(fd, 'user.orchlib', b'1')",
    "fchdir, then write": "os.fchdir(os.open(os.path.dirname({path!r}), os.O_RDONLY))",
}


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("name", list(FD_METADATA))
def test_metadata_of_a_host_file_cannot_change_through_an_fd(isolation, name, host_file):
    before = host_file.stat()
    code = f"import os\nfd = os.open({str(host_file)!r}, os.O_RDONLY)\n" + FD_METADATA[name].format(path=str(host_file))
    obs = run(code, isolation, uid=None)
    assert obs.error is not None and ("on an fd of a file outside the working directory" in obs.error
                                      or "opening a folder outside" in obs.error
                                      or "No such file" in obs.error), (name, obs.content)  # bwrap: a private /tmp
    after = host_file.stat()
    assert (after.st_mode, after.st_uid, after.st_gid, after.st_mtime) == \
           (before.st_mode, before.st_uid, before.st_gid, before.st_mtime)
    assert os.listxattr(host_file) == []


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_process_that_leaves_the_session_dies_with_the_run(isolation):
    marker = f"{time.time_ns() % 10**9}.75"  # a sleep length no other process uses
    code = (f"import subprocess\nsubprocess.run(['setsid', '-f', 'sleep', '{marker}'], check=True)\n"
            "import os\nif os.fork() == 0:\n    if os.fork() == 0:\n"
            f"        os.execv('/bin/sleep', ['sleep', '{marker}'])\n    os._exit(0)\nprint('started')")
    obs = run(code, isolation, allow_processes=True, preload=[*DEFAULT_PRELOAD, "subprocess"])
    assert obs.error is None and obs.content == "started", obs.content
    deadline = time.monotonic() + 3
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with(marker) == []


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_two_concurrent_runs_cannot_read_each_other_s_folder(isolation):
    import asyncio

    card = CARD.model_copy(update={"backend": {**CARD.backend, "isolation": isolation, "timeout_s": 10}})
    tool = build_tool(card)
    holder = "open('secret.txt', 'w').write('s3cret-of-run-a')\nimport time\ntime.sleep(2.5)"
    reader = ("import os, time\ntime.sleep(1)\nroot = os.path.dirname(os.getcwd())\nseen = []\n"
              "for d in [d for d in os.listdir(root) if d.startswith('orchlib-sandbox-')]:\n"
              "    try:\n        seen.append(open(os.path.join(root, d, 'secret.txt')).read())\n"
              "    except FileNotFoundError:\n        pass\nseen")

    async def both():
        return await asyncio.gather(tool({"code": holder}), tool({"code": reader}))

    first, second = asyncio.run(both())
    assert first.error is None
    assert "s3cret-of-run-a" not in second.content
    if isolation == "python":  # under bwrap /tmp holds only the run's own folder: nothing to find
        assert second.error is not None and "shared temporary folder" in second.error, second.content
    else:
        assert second.error is None and second.content == "[]"


DISK = {
    "many files under the file size limit": ("for i in range(40):\n    open(f'f{i}', 'wb').write(b'x' * 2**20)\n"
                                             "import time\ntime.sleep(3)\nprint('done')"),
    "files deleted but held open": ("import os, time\nkeep = []\nfor i in range(12):\n"
                                    "    f = open(f'f{i}', 'wb')\n    f.write(b'x' * 2**20)\n    f.flush()\n"
                                    "    os.remove(f'f{i}')\n    keep.append(f)\ntime.sleep(3)\nprint('done')"),
    "a short run": "for i in range(12):\n    open(f'f{i}', 'wb').write(b'x' * 2**20)\nprint('done')",
}


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("name", list(DISK))
def test_a_disk_quota_holds_for_all_files_together(isolation, name):
    obs = run(DISK[name], isolation, disk_mb=8, file_mb=2)
    assert obs.error is not None and obs.error.startswith("disk quota of 8 MiB exceeded"), (name, obs.content)
    if name != "a short run":  # stopped while it slept, not at its end
        assert obs.latency_s < 2.5 and not obs.content.startswith("done")
    within = run("for i in range(6):\n    open(f'f{i}', 'wb').write(b'x' * 2**20)\nprint('done')", isolation,
                 disk_mb=8, file_mb=2)
    assert within.error is None and within.content == "done"


@pytest.mark.skipif(os.geteuid() != 0 or not bwrap_works(), reason="needs root and bubblewrap")
@pytest.mark.parametrize("uid", [None, 65534])
def test_bubblewrap_as_root_drops_every_capability(uid):
    obs = run("[l.split()[1] for l in open('/proc/self/status') if l.startswith(('CapEff', 'CapPrm', 'NoNewPrivs'))]",
              "bwrap", uid=uid)
    assert obs.error is None
    effective, permitted, no_new_privileges = eval(obs.content)
    assert effective == permitted == "0000000000000000"
    assert no_new_privileges == "1"  # and no set-uid program gives any back
