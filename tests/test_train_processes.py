"""Two training processes (`accelerate launch --num_processes 2`, CPU and gloo) with paired profiles."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("train_worker.py")
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
G = 4  # the worker's group_size


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _contrasted(rows: list[dict]) -> list[float]:
    """Each rollout's advantage recomputed from the rows alone: std-scaled within its group of G, minus, for
    the tool it called first, the mean over the task's profiles of that tool's mean advantage there."""
    groups = [rows[i:i + G] for i in range(0, len(rows), G)]
    base: list[float] = []
    for g in groups:
        mean = sum(r["reward"] for r in g) / G
        std = (sum((r["reward"] - mean) ** 2 for r in g) / G) ** 0.5
        base += [(r["reward"] - mean) / (std + 1e-6) for r in g]
    out = list(base)
    for task in {r["task"] for r in rows}:
        mine = [gi for gi, g in enumerate(groups) if g[0]["task"] == task]
        for tool in {rows[gi * G + i]["first"] for gi in mine for i in range(G)}:
            picked = [[gi * G + i for i in range(G) if rows[gi * G + i]["first"] == tool] for gi in mine]
            shared = sum(sum(base[i] for i in p) / len(p) if p else 0.0 for p in picked) / len(mine)
            for i in (i for p in picked for i in p):
                out[i] = base[i] - shared
    return out


@pytest.mark.slow
def test_paired_profiles_keep_a_tasks_profiles_on_one_process_so_the_contrast_applies(toy_warm, tmp_path):
    # Splitting the per-profile copies of the drawn tasks across processes would leave each process one
    # profile per task, and the preference contrast, computed per process, would then take out nothing.
    accelerate = Path(sys.executable).with_name("accelerate")
    cmd = [str(accelerate), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port()), str(WORKER),
           "--policy", str(toy_warm[0]), "--steps", "1", "--paired", "--out", str(tmp_path / "mp.json")]
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    r0, r1 = (json.loads((tmp_path / f"mp.json.{i}").read_text()) for i in (0, 1))
    assert r0["history"] == r1["history"]
    tasks = []
    for r in (r0, r1):
        profiles: dict[str, list[str]] = {}
        for row in r["rows"][::G]:
            profiles.setdefault(row["task"], []).append(row["profile"])
        assert profiles and all(p == ["accuracy", "thrifty"] for p in profiles.values()), profiles
        tasks += list(profiles)
    assert len(set(tasks)) == len(tasks) == 4  # tasks_per_step, 2 + 2, none on both processes
    moved = 0
    for r in (r0, r1):
        want = _contrasted(r["rows"])
        got = [row["advantage"] for row in r["rows"]]
        assert got == pytest.approx(want, abs=1e-5)
        base = _contrasted([{**row, "task": f"{row['task']}/{row['profile']}"} for row in r["rows"]])  # no partner
        moved += sum(abs(w - b) > 1e-3 for w, b in zip(want, base))
    assert moved > 0  # the contrast really took something out
