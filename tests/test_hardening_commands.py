"""Commands check their output location before a long run, and turn mistakes into one line, exit 2."""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import shutil
import signal
import tempfile
import types
from pathlib import Path

import pytest
from conftest import REPO

from orchlib.cli import main


@pytest.fixture
def no_long_runs(monkeypatch):
    """The demo and training themselves must not start: each test is about what comes before them."""
    import orchlib.demo
    import orchlib.train.run

    def started(*args, **kwargs):
        raise AssertionError("the long run started before its output location was checked")

    monkeypatch.setattr(orchlib.demo, "run_demo", started)
    monkeypatch.setattr(orchlib.train.run, "run_training", started)


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_demo_out_naming_a_file(tmp_path, capsys, no_long_runs):
    (tmp_path / "f").write_text("x")
    assert main(["demo", "--out", str(tmp_path / "f")]) == 2
    assert one_line(capsys) == f"orchlib demo: --out {tmp_path / 'f'}: is a file, not a folder"


def test_demo_out_under_a_file(tmp_path, capsys, no_long_runs):
    (tmp_path / "f").write_text("x")
    assert main(["demo", "--out", str(tmp_path / "f" / "sub" / "out")]) == 2
    assert one_line(capsys) == (f"orchlib demo: --out {tmp_path / 'f' / 'sub' / 'out'}: is under "
                                f"{tmp_path / 'f'}, which is a file, not a folder")


def _as_unprivileged(fn) -> tuple[int, str]:
    """Run `fn() -> (code, text)` in a forked child without root's override of permission bits."""
    import orchlib.atomic  # noqa: F401  (imported while the interpreter's files are readable)
    import orchlib.commands._output  # noqa: F401
    from orchlib.cli import build_parser

    build_parser()  # imports every command module now, before the uid drop
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 99
        try:
            os.close(read)
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            code, text = fn()
            os.write(write, text.encode())
            status = code
        except BaseException:
            import traceback

            os.write(write, traceback.format_exc().encode())
        finally:
            os._exit(status)
    os.close(write)
    with os.fdopen(read) as f:
        text = f.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), text


@pytest.fixture
def open_tmp():
    """A folder every uid may enter (pytest's tmp_path sits under a folder only its owner may enter)."""
    path = Path(tempfile.mkdtemp(prefix="orchlib-test-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path)


def test_demo_out_on_a_read_only_folder_fails_before_the_run(open_tmp, no_long_runs):
    ro = open_tmp / "results"
    ro.mkdir()
    os.chmod(ro, 0o555)  # root may still write there; the check runs as an unprivileged uid

    def demo():
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(["demo", "--out", str(ro), "--quiet"])
        return code, err.getvalue()

    code, text = _as_unprivileged(demo)
    assert code == 2, text
    assert text.strip() == f"orchlib demo: --out {ro}: cannot write there (Permission denied)"
    assert list(ro.iterdir()) == []


def write_config(tmp_path, **fields) -> str:
    path = tmp_path / "run.yaml"
    path.write_text("".join(f"{k}: {v}\n" for k, v in fields.items()))
    return str(path)


def test_train_with_a_model_that_is_not_cached_offline_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = write_config(tmp_path, policy="no-such-org/no-such-model", steps=1, out=str(tmp_path / "run"))
    assert main(["train", "--config", config]) == 2
    err = one_line(capsys)
    assert err.startswith(f"orchlib train: {config}: ") and "no-such-org/no-such-model" in err


def test_train_out_naming_a_file_is_refused_before_training(tmp_path, capsys, monkeypatch, no_long_runs):
    monkeypatch.chdir(REPO)
    (tmp_path / "f").write_text("x")
    config = write_config(tmp_path, steps=1, out=str(tmp_path / "f"))
    assert main(["train", "--config", config]) == 2
    assert one_line(capsys) == f"orchlib train: {config}: out: {tmp_path / 'f'}: is a file, not a folder"


def test_an_output_folder_that_cannot_be_entered_is_one_line(open_tmp, no_long_runs):
    closed = open_tmp / "closed"
    closed.mkdir(mode=0o700)

    def demo():
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            return main(["demo", "--out", str(closed / "sub"), "--quiet"]), err.getvalue()

    code, text = _as_unprivileged(demo)
    assert code == 2, text
    assert text.strip() == f"orchlib demo: --out {closed / 'sub'}: cannot write there (Permission denied)"


def test_history_json_is_never_half_written(open_tmp, monkeypatch):
    """A write that fails midway (here: past RLIMIT_FSIZE, as on a full disk) leaves the old file whole."""
    import orchlib.train.run

    monkeypatch.chdir(REPO)
    out = open_tmp / "run"
    out.mkdir()
    (out / "history.json").write_text('[{"step": 1}]')
    history = [{"step": float(i), "reward": 0.5, "accuracy": 1.0} for i in range(200)]
    monkeypatch.setattr(orchlib.train.run, "run_training",
                        lambda cfg, progress=True: types.SimpleNamespace(history=history, step_count=200))
    config = write_config(open_tmp, steps=1, out=str(out))

    def train():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, resource.RLIM_INFINITY))
        try:
            return main(["train", "--config", config]), ""
        except OSError as e:
            return 1, str(e)

    os.chmod(out, 0o777)
    os.chmod(out / "history.json", 0o666)
    code, text = _as_unprivileged(train)
    assert code == 1 and "too large" in text.lower()
    assert json.loads((out / "history.json").read_text()) == [{"step": 1}]
    assert sorted(p.name for p in out.iterdir()) == ["history.json"]


def test_python_dash_m_gives_the_same_one_line_errors(tmp_path):
    """`python -m orchlib.cli` runs cli.py as __main__: its UsageError must still be the one caught."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "orchlib.cli", "reward", "show", str(tmp_path / "missing.yaml")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"orchlib reward: {tmp_path / 'missing.yaml'}:0: file: cannot read "
                                   "(No such file or directory)")


def test_a_reward_expression_error_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("x")
    assert main(["reward", "check", str(bad)]) == 2
    assert one_line(capsys).startswith(f"orchlib reward: {bad}: reward: unknown name `x`")


def test_eval_out_naming_a_file_is_refused_before_anything_loads(tmp_path, capsys, monkeypatch):
    import importlib

    def started(*args, **kwargs):
        raise AssertionError("the evaluation started before its output location was checked")

    monkeypatch.setattr(importlib.import_module("orchlib.evaluate"), "evaluate", started)
    (tmp_path / "f").write_text("x")
    assert main(["eval", "--out", str(tmp_path / "f")]) == 2
    assert one_line(capsys) == f"orchlib eval: --out {tmp_path / 'f'}: is a file, not a folder"
