"""Checkpoints: a run killed mid-step resumes to the same weights and metrics; two processes agree."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("train_worker.py")
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def _run(args, **kw):
    return subprocess.run([sys.executable, str(WORKER), *args], env=ENV, capture_output=True, text=True,
                          timeout=600, **kw)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _strip_times(history):
    """Metrics without wall times; NaN written as a string so that equal runs compare equal."""
    return [{k: "nan" if v != v else v for k, v in m.items() if not k.startswith("time/")} for m in history]


def test_sigkill_during_a_step_then_resume_gives_the_same_run(toy_warm, tmp_path):
    policy = str(toy_warm[0])
    done = _run(["--policy", policy, "--ckpt", str(tmp_path / "a" / "ckpt"), "--steps", "4",
                 "--out", str(tmp_path / "a.json")])
    assert done.returncode == 0, done.stderr[-3000:]
    ref = json.loads((tmp_path / "a.json.0").read_text())

    ckpt = tmp_path / "b" / "ckpt"
    proc = subprocess.Popen([sys.executable, str(WORKER), "--policy", policy, "--ckpt", str(ckpt), "--steps", "4",
                             "--out", str(tmp_path / "b.json")], env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    progress = ckpt.parent / "progress"
    deadline = time.time() + 300
    while time.time() < deadline and not (progress.exists() and progress.read_text() == "3"):
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        time.sleep(0.05)
    time.sleep(0.3)  # well inside step 3 (rollout + update take seconds)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "b.json.0").exists()
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert state["step"] == 2  # the last complete checkpoint

    resumed = _run(["--policy", policy, "--ckpt", str(ckpt), "--steps", "4", "--resume",
                    "--out", str(tmp_path / "b.json")])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    got = json.loads((tmp_path / "b.json.0").read_text())
    assert got["weights"] == ref["weights"]
    assert _strip_times(got["history"]) == _strip_times(ref["history"])
    assert [m["step"] for m in got["history"]] == [1.0, 2.0, 3.0, 4.0]


def test_a_save_killed_midway_leaves_the_previous_checkpoint(tmp_path):
    from orchlib.train.checkpoint import commit, find_checkpoint, temporary_sibling

    path = tmp_path / "ckpt"
    tmp = temporary_sibling(path, "1")
    (tmp / "weights").write_text("one")
    commit(tmp, path)
    tmp = temporary_sibling(path, "2")
    (tmp / "weights").write_text("two, half written")  # a kill here: never committed
    assert (find_checkpoint(path) / "weights").read_text() == "one"
    os.replace(path, tmp_path / ".ckpt.old-1")  # a kill between the two renames of a commit
    assert (find_checkpoint(path) / "weights").read_text() == "one"
    shutil.rmtree(tmp)


def test_resume_from_nothing_is_a_clear_error(tmp_path):
    from orchlib.envs.toy import environment
    from orchlib.train import Trainer

    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        Trainer.resume(tmp_path / "missing", environment())


def test_two_processes_split_the_work_and_hold_identical_weights(toy_warm, tmp_path):
    accelerate = Path(sys.executable).with_name("accelerate")
    cmd = [str(accelerate), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port()), str(WORKER),
           "--policy", str(toy_warm[0]), "--steps", "1", "--out", str(tmp_path / "mp.json")]
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    r0, r1 = (json.loads((tmp_path / f"mp.json.{i}").read_text()) for i in (0, 1))
    assert r0["world"] == r1["world"] == 2
    assert r0["weights"] == r1["weights"]
    assert r0["tasks"] and r1["tasks"] and not set(r0["tasks"]) & set(r1["tasks"])  # each its own share
    assert len(r0["tasks"]) + len(r1["tasks"]) == 4  # tasks_per_step, split 2 + 2
    assert r0["history"] == r1["history"]  # metrics are gathered over both processes
    assert r0["history"][0]["groups_kept"] + r0["history"][0]["groups_filtered"] == 4
