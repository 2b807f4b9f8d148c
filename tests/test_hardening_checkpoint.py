"""Checkpoint folders survive a kill at any point of a commit, the clean-up included."""

from __future__ import annotations

import os
import shutil

import pytest

from orchlib.train import checkpoint
from orchlib.train.checkpoint import commit, find_checkpoint, is_complete, temporary_sibling


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


def test_the_marker_checks_every_file_and_size(tmp_path):
    path = save(tmp_path / "ckpt", "one")
    assert is_complete(path)
    (path / "state" / "optimizer").write_text("on")  # truncated
    assert not is_complete(path) and find_checkpoint(path) is None
    (path / checkpoint.MARKER).write_text("ok\n")  # a marker from before files were listed
    assert is_complete(path)
    shutil.rmtree(path)
    assert find_checkpoint(path) is None
