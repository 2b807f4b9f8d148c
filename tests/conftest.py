"""Shared fixtures. Everything is offline: HF_HUB_OFFLINE is set before transformers is imported."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def load_benchmark(name: str):
    """benchmarks/<name>.py as a module (the folder is not a package); registered in sys.modules, where its
    dataclasses look their module up, and loaded once."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def policy_cache(tmp_path_factory) -> Path:
    """One cache for the session's built default policies (built once, then loaded)."""
    return Path(os.environ.get("ORCHLIB_TEST_CACHE") or tmp_path_factory.mktemp("orchlib-cache"))


@pytest.fixture(scope="session")
def tiny_policy(policy_cache):
    from orchlib.models import build_default_policy

    return build_default_policy("tiny", cache=policy_cache)


TOY_ROLLOUT = dict(max_turns=2, max_new_tokens=24, tool_schema="compact", tool_latency="declared")


def _shared_tmp(tmp_path_factory) -> Path:
    """A folder every pytest-xdist worker of this run sees (each worker's own base folder is a child
    of it); without xdist, the run's base folder."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def toy_warm(policy_cache, tmp_path_factory):
    """The tiny policy warm-started (SFT) on the toy environment, saved to a folder.

    Returns (folder, golden trajectories, SFT report). Built once per test run: under pytest-xdist the
    first worker to need it builds it behind a file lock and the others load what it saved."""
    import pickle

    from filelock import FileLock

    from orchlib.envs.toy import toy_tasks, toy_toolbox
    from orchlib.models import build_default_policy, load_policy
    from orchlib.rollout import RolloutConfig
    from orchlib.train import SFTConfig, golden_trajectories, sft_train

    shared = _shared_tmp(tmp_path_factory)
    folder, saved = shared / "toy-warm", shared / "toy-warm.pkl"
    with FileLock(str(shared / "toy-warm.lock")):
        if not saved.exists():
            build_default_policy("tiny", cache=policy_cache)
            model, tok = load_policy(next(Path(policy_cache).glob("default-tiny-s0-*")))  # a private copy
            # one golden call to each tool per task: the choice's target is 50/50 on every task, so the warm
            # start learns the format, not the choice, and GRPO groups start with rewards that differ
            gold = golden_trajectories(toy_tasks(), toy_toolbox(), tok, RolloutConfig(**TOY_ROLLOUT),
                                       alternatives="each")
            report = sft_train(model, tok, gold, SFTConfig(epochs=30, batch_size=8, learning_rate=6e-3),
                               progress=False)
            folder.mkdir()
            model.save_pretrained(folder)
            tok.save_pretrained(folder)
            saved.write_bytes(pickle.dumps((gold, report)))  # last: its presence means the folder is whole
    gold, report = pickle.loads(saved.read_bytes())
    return folder, gold, report
