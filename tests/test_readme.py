"""The README's first snippet runs as printed and stays under ten lines."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_snippet_runs(monkeypatch, capsys):
    code = re.search(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S).group(1)
    assert len(code.strip().splitlines()) < 10
    monkeypatch.chdir(README.parent)  # the snippet names rewards/ relative to a checkout
    scope: dict = {}
    exec(compile(code, str(README), "exec"), scope)
    out = capsys.readouterr().out
    assert len(scope["trajs"]) == 2 * 4 and out.startswith("[")
    rewards = scope["reward"](scope["trajs"][:4], P=scope["suite"].test[0].preference)
    assert rewards.shape == (4,) and np.isfinite(rewards).all()
    assert scope["trajs"][0].to_messages()[0] == {"role": "user", "content": scope["suite"].test[0].prompt}
