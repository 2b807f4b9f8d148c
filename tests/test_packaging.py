"""orchlib as a user installs it: `import orchlib` stays light, and a built wheel carries the shipped
tool cards and reward files, so `orchlib info` and `orchlib demo` work from any folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "accelerate", "peft", "plotly", "sympy")


def _loaded_after(code: str) -> list[str]:
    probe = f"import sys\n{code}\nprint(__import__('json').dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("code", ["import orchlib", "import orchlib.engines",
                                  "import orchlib; orchlib.rollout; orchlib.evaluate; orchlib.describe; "
                                  "orchlib.RolloutConfig; orchlib.Task; orchlib.ToolCard"])
def test_import_stays_light(code):
    loaded = _loaded_after(code)
    assert [m for m in HEAVY if m in loaded] == []
    assert "orchlib" in loaded  # the probe really imported it


def test_the_heavy_parts_still_load_on_first_use():
    loaded = _loaded_after("import orchlib; orchlib.TransformersEngine")
    assert "torch" in loaded and "transformers" in loaded


def test_shipped_paths_resolve_from_any_folder(tmp_path, monkeypatch):
    from orchlib import Reward, load_cards
    from orchlib.shipped import shipped_dir, shipped_path

    monkeypatch.chdir(tmp_path)
    assert shipped_path("rewards/toolorchestra.yaml") == shipped_dir("rewards") / "toolorchestra.yaml"
    assert {c.name for c in load_cards("toolcards")} >= {"calculator", "generalist", "mixtral"}
    assert set(Reward.load("rewards/toolorchestra.yaml").terms) == {"tool_use", "accuracy", "thrift", "speed"}
    # a folder of the user's own, named like a shipped one, wins over the package's
    (tmp_path / "rewards").mkdir()
    (tmp_path / "rewards" / "toolorchestra.yaml").write_text("reward: outcome\n")
    assert shipped_path("rewards/toolorchestra.yaml") == Path("rewards/toolorchestra.yaml")
    assert shipped_path("rewards/nope.yaml") == Path("rewards/nope.yaml")  # missing: its loader says so


@pytest.fixture(scope="module")
def unpacked_wheel(tmp_path_factory) -> Path:
    """The wheel `pip install .` would install, unpacked into a folder of its own."""
    dist = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(dist), str(REPO)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (wheel,) = dist.glob("orchlib-*.whl")
    site = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    return site


def test_the_wheel_ships_cards_rewards_and_data(unpacked_wheel):
    pkg = unpacked_wheel / "orchlib"
    for rel in ("toolcards/calculator.yaml", "toolcards/examples/gpt5.yaml", "rewards/toolorchestra.yaml",
                "tools/_sandbox_child.py", "data/routellm/LICENSE", "data/gsm8k/test.jsonl"):
        assert (pkg / rel).is_file(), rel
    shipped_cards = {p.name for p in (REPO / "orchlib" / "toolcards").glob("*.yaml")}
    assert {p.name for p in (pkg / "toolcards").glob("*.yaml")} == shipped_cards


def _from_wheel(site: Path, cwd: Path, *args: str, cache: Path) -> subprocess.CompletedProcess:
    # PYTHONPATH puts the unpacked wheel ahead of the checkout's editable install
    env = {**os.environ, "PYTHONPATH": str(site), "ORCHLIB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "orchlib.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def test_info_from_another_folder_lists_the_shipped_files(unpacked_wheel, tmp_path, policy_cache):
    done = _from_wheel(unpacked_wheel, tmp_path, "info", cache=policy_cache)
    assert done.returncode == 0, done.stderr
    lines = {ln.split()[0] + (" " + ln.split()[1] if ln.startswith("tool") else ""): ln
             for ln in done.stdout.splitlines() if ln.strip()}
    cards, rewards = lines["tool cards"], lines["rewards"]
    assert str(unpacked_wheel / "orchlib" / "toolcards") in cards and "calculator" in cards
    assert str(unpacked_wheel / "orchlib" / "rewards") in rewards and "toolorchestra" in rewards
    n_cards = len(list((REPO / "orchlib" / "toolcards").glob("*.yaml")))
    assert f"tool cards    {n_cards} in" in cards


def test_demo_runs_from_the_wheel_in_another_folder(unpacked_wheel, tmp_path, policy_cache):
    cfg = tmp_path / "quick.yaml"
    cfg.write_text("n_train: 8\nn_test: 4\neval_samples: 1\n"
                   "warm_start: {copy_drills: 16, copying: {max_steps: 2}, golden: {max_steps: 2}, "
                   "extra_arithmetic: 0, extra_gsm8k: 0}\ngrpo: {tasks_per_step: 2, group_size: 2}\n")
    out = tmp_path / "out"
    done = _from_wheel(unpacked_wheel, tmp_path, "demo", "--config", str(cfg), "--steps", "2", "--out", str(out),
                       "--quiet", cache=policy_cache)
    assert done.returncode == 0, done.stderr[-3000:]
    m = json.loads((out / "metrics.json").read_text())
    assert len(m["history"]) == 2 and m["config"]["n_test"] == 4
    assert m["config"]["warm_start"]["copying"]["max_steps"] == 2
    # a nested setting the file leaves out keeps the demo's value, not the library default
    assert m["config"]["grpo"]["kl_coef"] == 0.03 and m["config"]["warm_start"]["copying"]["learning_rate"] == 1e-3
    assert (out / "report.html").stat().st_size > 10_000 and (out / "trajectories.jsonl").is_file()
