"""Checkpoint folders survive a kill at any point of a commit, the clean-up included; a damaged or forged
one is reported by name on resume, and nothing in it is unpickled."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pickle
import random
import re
import shutil
from pathlib import Path

import pytest
import torch

from orchlib.env import Environment
from orchlib.train import checkpoint
from orchlib.train.checkpoint import (CheckpointError, commit, find_checkpoint, is_complete, random_state_from_json,
                                      random_state_to_json, read_trainer_state, temporary_sibling)


def save(path, text):
    tmp = temporary_sibling(path, "t")
    (tmp / "weights").write_text(text)
    (tmp / "state").mkdir()
    (tmp / "state" / "optimizer").write_text(text * 3)
    return commit(tmp, path)


def test_a_partially_deleted_old_folder_is_not_taken_for_a_checkpoint(tmp_path):
    path = tmp_path / "ckpt"
    save(path, "one")
    # An earlier clean-up killed midway: the folder still has its marker but lost a file.
    os.replace(path, tmp_path / ".ckpt.old-12345")
    (tmp_path / ".ckpt.old-12345" / "state" / "optimizer").unlink()
    save(path, "two")
    # ... and a later kill between the two renames of a commit. "12345" < "9999" as text.
    os.replace(path, tmp_path / ".ckpt.old-9999")
    found = find_checkpoint(path)
    assert found == tmp_path / ".ckpt.old-9999" and (found / "weights").read_text() == "two"


def test_the_most_recent_of_several_complete_folders_left_aside_wins(tmp_path):
    path = tmp_path / "ckpt"
    for pid, text in [(200, "first"), (1000, "second"), (30, "third")]:
        save(path, text)
        os.replace(path, tmp_path / f".ckpt.old-{pid}")
    assert (find_checkpoint(path) / "weights").read_text() == "third"


def test_a_kill_during_the_clean_up_leaves_no_checkpoint_like_folder(tmp_path, monkeypatch):
    path = tmp_path / "ckpt"
    save(path, "one")

    real_rmtree = shutil.rmtree

    def killed(folder, ignore_errors=False):
        if ".trash-" not in folder.name:
            return real_rmtree(folder, ignore_errors=ignore_errors)
        (folder / "weights").unlink()  # the deletion had begun when the process died
        raise SystemExit("kill -9")

    monkeypatch.setattr(checkpoint.shutil, "rmtree", killed)
    with pytest.raises(SystemExit):
        save(path, "two")
    monkeypatch.undo()
    assert list(tmp_path.glob(".ckpt.old-*")) == []  # renamed to .trash- before the delete began
    assert (find_checkpoint(path) / "weights").read_text() == "two"
    save(path, "three")  # the next commit clears what the kill left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_the_manifest_checks_every_file_and_a_damaged_checkpoint_is_reported_by_name(tmp_path):
    path = save(tmp_path / "ckpt", "one")
    assert is_complete(path)
    optimizer = path / "state" / "optimizer"
    optimizer.write_text("on")  # truncated
    with pytest.raises(CheckpointError, match=f"^{optimizer}: 2 bytes where 9 were saved"):
        find_checkpoint(path)
    assert not is_complete(path)
    optimizer.write_text("ONEONEONE")  # same size, other bytes
    with pytest.raises(CheckpointError, match=f"^{optimizer}: its SHA-256 differs"):
        find_checkpoint(path)
    optimizer.unlink()
    with pytest.raises(CheckpointError, match=f"^{optimizer}: missing"):
        find_checkpoint(path)


def test_a_file_added_after_saving_is_refused(tmp_path):
    path = save(tmp_path / "ckpt", "one")
    (path / "state" / "custom_checkpoint_0.pkl").write_bytes(b"anything")
    with pytest.raises(CheckpointError, match="custom_checkpoint_0.pkl: not in .*COMPLETE \\(added after saving\\)"):
        find_checkpoint(path)


@pytest.mark.parametrize("marker, problem", [
    (None, "COMPLETE: missing"),
    ("ok\n", "lists no SHA-256 hashes"),                                          # the first marker
    ('{"committed_ns": 1, "files": {"weights": 3}}', "lists no SHA-256 hashes"),  # sizes only
    ("{not json", "not a checkpoint manifest"),
    ('{"format": 2, "committed_ns": 1, "files": {"../weights": {"size": 3, "sha256": "' + "0" * 64 + '"}}}',
     "'../weights' is not a file inside the checkpoint"),
    ('{"format": 2, "committed_ns": -1, "files": {}}', "committed_ns must be a whole number"),
])
def test_a_missing_or_unusable_manifest_is_reported(tmp_path, marker, problem):
    path = save(tmp_path / "ckpt", "one")
    if marker is None:
        (path / checkpoint.MARKER).unlink()
    else:
        (path / checkpoint.MARKER).write_text(marker)
    with pytest.raises(CheckpointError, match=re.escape(problem)):
        find_checkpoint(path)


def test_only_a_damaged_copy_left_aside_is_reported_not_skipped(tmp_path):
    path = save(tmp_path / "ckpt", "one")
    os.replace(path, tmp_path / ".ckpt.old-7")  # a kill between the two renames ...
    (tmp_path / ".ckpt.old-7" / "weights").write_text("on")  # ... and the copy then damaged
    with pytest.raises(CheckpointError, match=f"^{path}: missing, and the copy .* damaged: .*weights: 2 bytes"):
        find_checkpoint(path)
    shutil.rmtree(tmp_path / ".ckpt.old-7")
    assert find_checkpoint(path) is None  # nothing at all: a fresh start is right


# ------------------------------------------------------------------------------ the files a trainer writes
def test_the_sampler_state_round_trips_through_json(tmp_path):
    rng = random.Random(1234)
    rng.gauss(0, 1)  # leaves a cached Gaussian in the state
    data = json.loads(json.dumps(random_state_to_json(rng.getstate())))
    assert isinstance(data["gauss_next"], float)
    again = random.Random()
    again.setstate(read_back(tmp_path, data))
    assert [again.getrandbits(32) for _ in range(50)] == [rng.getrandbits(32) for _ in range(50)]


def read_back(folder: Path, data) -> tuple:
    f = folder / "sampler_rng.json"
    f.write_bytes(data) if isinstance(data, bytes) else f.write_text(json.dumps(data))
    return random_state_from_json(f)


@pytest.mark.parametrize("change, problem", [
    (lambda d: d.update(internal=d["internal"][:-1]), "internal: expected 624 words"),
    (lambda d: d["internal"].__setitem__(3, 2**32), "internal: expected 624 words"),
    (lambda d: d["internal"].__setitem__(624, 625), "a position 0..624"),
    (lambda d: d.update(gauss_next="nan"), "gauss_next: expected null or a finite number"),
    (lambda d: d.update(version=2), "version: expected 3"),
    (lambda d: d.update(extra=1), "expected an object with version, internal and gauss_next"),
])
def test_a_tampered_sampler_state_is_refused(tmp_path, change, problem):
    data = random_state_to_json(random.Random(0).getstate())
    change(data)
    with pytest.raises(CheckpointError, match=re.escape(problem)):
        read_back(tmp_path, data)


def test_a_pickle_in_place_of_the_sampler_state_is_not_json(tmp_path):
    with pytest.raises(CheckpointError, match="sampler_rng.json: not JSON"):
        read_back(tmp_path, pickle.dumps(random.Random(0).getstate()))


@pytest.mark.parametrize("state, problem", [
    ({"step": -5, "history": []}, "step: -5 is negative"),
    ({"step": 99, "history": [{}, {}]}, "step: 99, but history holds 2 step(s)"),
    ({"step": "3", "history": [{}, {}, {}]}, "step: expected int, got str"),
    ({"step": True, "history": [{}]}, "step: expected int, got bool"),
    ({"step": 1, "history": [5]}, "history: every entry must be an object"),
    ({"history": []}, "step: missing"),
])
def test_the_step_is_checked_against_the_history(tmp_path, state, problem):
    f = tmp_path / "trainer_state.json"
    f.write_text(json.dumps({"policy_source": "tiny", "config": {}, **state}))
    with pytest.raises(CheckpointError, match=f"^{re.escape(str(f))}: {re.escape(problem)}"):
        read_trainer_state(f)


# ------------------------------------------------------------------------------ Trainer.save / resume
def rehash(folder: Path) -> None:
    """Rewrite the manifest to match the folder as it now is: what someone handing over a crafted
    checkpoint would do (hashes stop damage, not a forger)."""
    files = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.name != checkpoint.MARKER:
            files[p.relative_to(folder).as_posix()] = {"size": p.stat().st_size,
                                                       "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
    (folder / checkpoint.MARKER).write_text(json.dumps({"format": 2, "committed_ns": 1, "files": files}))


class WritesAMarker:
    """Unpickling this creates `path`: the proof that a file was unpickled."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


@pytest.fixture
def saved_trainer(policy_cache, tmp_path):
    from orchlib.envs.toy import toy_tasks, toy_toolbox
    from orchlib.models import build_default_policy
    from orchlib.reward import Reward
    from orchlib.train import GRPOConfig, Trainer

    env = Environment(train=toy_tasks(4), tools=toy_toolbox(), reward=Reward.from_string("name: a\nreward: outcome"))
    trainer = Trainer(build_default_policy("tiny", cache=policy_cache), env, GRPOConfig(seed=3))
    trainer.rng.random()  # a sampler state that differs from a fresh trainer's
    path = trainer.save(tmp_path / "ckpt")
    return trainer, path, env


def test_a_checkpoint_just_saved_resumes_with_its_sampler_and_engine_state(saved_trainer):
    from orchlib.train import Trainer

    trainer, path, env = saved_trainer
    assert (path / "sampler_rng.json").is_file() and not (path / "sampler_rng.pkl").exists()
    back = Trainer.resume(path, env)
    assert back.step_count == 0 and back.history == []
    assert back.rng.getstate() == trainer.rng.getstate()
    assert torch.equal(back.engine.generator.get_state(), trainer.engine.generator.get_state())


def test_a_forged_pickle_in_a_checkpoint_is_never_unpickled(saved_trainer, tmp_path):
    from orchlib.train import Trainer

    trainer, path, env = saved_trainer
    ran = tmp_path / "code-ran"
    # where the previous format kept the sampler state, and in the engine's RNG file (a torch pickle)
    (path / "sampler_rng.pkl").write_bytes(pickle.dumps(WritesAMarker(ran)))
    rehash(path)
    Trainer.resume(path, env)  # the old file name is not read at all
    assert not ran.exists()
    torch.save(WritesAMarker(ran), path / "state" / "engine_rng_0.pt")
    rehash(path)
    with pytest.raises(CheckpointError, match=f"^{path / 'state'}: cannot be loaded into this trainer"):
        Trainer.resume(path, env)
    assert not ran.exists()


def test_a_forged_step_is_refused_on_resume(saved_trainer):
    from orchlib.train import Trainer

    trainer, path, env = saved_trainer
    state = json.loads((path / "trainer_state.json").read_text())
    for step, problem in [(99, "step: 99, but history holds 0 step(s)"), (-5, "step: -5 is negative")]:
        (path / "trainer_state.json").write_text(json.dumps({**state, "step": step}))
        rehash(path)
        with pytest.raises(CheckpointError, match=re.escape(f"{path / 'trainer_state.json'}: {problem}")):
            Trainer.resume(path, env)


def test_a_truncated_weights_file_is_named_on_resume(saved_trainer):
    from orchlib.train import Trainer

    trainer, path, env = saved_trainer
    weights = path / "policy" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=f"^{re.escape(str(weights))}: 100 bytes where"):
        Trainer.resume(path, env)


# ------------------------------------------------------------------------------ a save on a full disk
def disk_full_after(monkeypatch, writes: int, wrap: bool = False):
    """torch.save writes `writes` files, then fails as on a full disk: half a file, then ENOSPC (as itself,
    or wrapped in a RuntimeError the way torch's own writer reports it)."""
    real_save, count = torch.save, [0]

    def save(obj, f, *args, **kwargs):
        count[0] += 1
        if count[0] <= writes:
            return real_save(obj, f, *args, **kwargs)
        Path(f).write_bytes(b"half a tensor")
        full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if wrap:
            raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed") from full
        raise full

    monkeypatch.setattr(torch, "save", save)


@pytest.mark.parametrize("writes, wrap", [(0, False), (1, False), (0, True)])
def test_a_save_on_a_full_disk_is_one_line_removes_its_partial_copy_and_a_later_save_works(saved_trainer,
                                                                                         monkeypatch, writes, wrap):
    from orchlib.train import Trainer
    from orchlib.train.checkpoint import CheckpointSaveError

    trainer, path, env = saved_trainer
    saved_rng = (path / "sampler_rng.json").read_text()
    trainer.rng.random()  # the next save would write a different sampler state
    trainer.step_count, trainer.history = 1, [{"step": 1.0}]
    disk_full_after(monkeypatch, writes, wrap)
    with pytest.raises(CheckpointSaveError) as e:
        trainer.save(path)
    assert str(e.value) == (f"{path}: checkpoint not saved: No space left on device (the previous checkpoint is "
                            "kept; the partial copy was removed)")
    assert e.value.errno == errno.ENOSPC and isinstance(e.value, OSError)
    assert sorted(p.name for p in path.parent.iterdir()) == ["ckpt"]  # no .ckpt.tmp-1 left to fill the disk
    assert find_checkpoint(path) == path and (path / "sampler_rng.json").read_text() == saved_rng
    assert Trainer.resume(path, env).step_count == 0
    monkeypatch.undo()
    trainer.save(path)  # space again: the next save goes through
    assert Trainer.resume(path, env).step_count == 1
    assert sorted(p.name for p in path.parent.iterdir()) == ["ckpt"]


def test_a_partial_copy_left_by_a_killed_save_is_cleared_by_the_next_one(tmp_path):
    path = save(tmp_path / "ckpt", "one")
    stale = tmp_path / ".ckpt.tmp-7"  # a save killed before it could clean up (kill -9)
    (stale / "state").mkdir(parents=True)
    (stale / "state" / "optimizer").write_text("x" * 1000)
    save(path, "two")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    assert (find_checkpoint(path) / "weights").read_text() == "two"


def test_train_whose_save_hits_a_full_disk_prints_one_line_and_exits_2(tmp_path, capsys, monkeypatch, policy_cache):
    from conftest import REPO

    from orchlib.cli import main

    monkeypatch.chdir(REPO)
    monkeypatch.setenv("ORCHLIB_CACHE", str(policy_cache))
    config = tmp_path / "run.yaml"
    config.write_text(f"steps: 0\nwarm_start: null\nout: {tmp_path / 'run'}\n")
    import orchlib.train.run

    def saves_on_a_full_disk(cfg, **kwargs):  # the run's first save, on a disk that is full
        from orchlib.envs.toy import toy_tasks, toy_toolbox
        from orchlib.reward import Reward
        from orchlib.train import Trainer

        trainer = Trainer("tiny", Environment(train=toy_tasks(2), tools=toy_toolbox(),
                                             reward=Reward.from_string("name: a\nreward: outcome")))
        disk_full_after(monkeypatch, 0)
        trainer.save(tmp_path / "run" / "checkpoint")

    monkeypatch.setattr(orchlib.train.run, "run_training", saves_on_a_full_disk)
    assert main(["train", "--config", str(config)]) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines()
           if line.strip() and not line.startswith("Writing model shards")]
    assert err == [f"orchlib train: {tmp_path / 'run' / 'checkpoint'}: checkpoint not saved: No space left on device "
                   "(the previous checkpoint is kept; the partial copy was removed)"]
    assert list((tmp_path / "run").iterdir()) == []
