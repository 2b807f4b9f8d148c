"""write_text_atomic: the old content survives a failed write, and no temporary file is left."""

from __future__ import annotations

import stat

import pytest

from orchlib.atomic import write_text_atomic


def test_a_failed_write_keeps_the_old_file_and_leaves_nothing_behind(tmp_path):
    path = write_text_atomic(tmp_path / "sub" / "a.txt", "old\n")
    assert path.read_text() == "old\n"
    with pytest.raises(UnicodeEncodeError):
        write_text_atomic(path, "new \ud800\n")  # a lone surrogate cannot be written as UTF-8
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.txt"]


def test_mode_sets_the_permissions(tmp_path):
    private = write_text_atomic(tmp_path / "p.txt", "x")
    shared = write_text_atomic(tmp_path / "s.txt", "x", mode=0o644)
    assert stat.S_IMODE(private.stat().st_mode) == 0o600  # as mkstemp creates it
    assert stat.S_IMODE(shared.stat().st_mode) == 0o644
