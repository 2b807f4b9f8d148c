"""The example scripts run as a user runs them, and print figures that agree with an independent
computation from the data they read."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


def test_routellm_frontier_prints_the_oracle_apgr_and_aiq_of_the_recording():
    """examples/routellm_frontier.py on the first 60 GSM8K questions: the always-one-model accuracies,
    the oracle's accuracy and the oracle order's APGR, recomputed with numpy from the shipped CSV."""
    n = 60
    out = subprocess.run([sys.executable, str(REPO / "examples" / "routellm_frontier.py"), "--limit", str(n)],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    with (REPO / "orchlib" / "data" / "routellm" / "gsm8k_responses.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))[:n]
    strong = np.array([r["gpt-4-1106-preview"] == "True" for r in rows], dtype=float)
    weak = np.array([r["mistralai/Mixtral-8x7B-Instruct-v0.1"] == "True" for r in rows], dtype=float)
    m = re.search(r"always mixtral ([\d.]+), always gpt4 ([\d.]+)", text)
    assert m and float(m[1]) == pytest.approx(weak.mean(), abs=5e-4) and float(m[2]) == pytest.approx(
        strong.mean(), abs=5e-4)
    oracle_row = next(line for line in text.splitlines() if line.startswith("oracle "))
    assert float(oracle_row.split()[2]) == pytest.approx(np.maximum(strong, weak).mean(), abs=5e-4)
    # The oracle order sends first the questions only GPT-4 gets right: accuracy after k of them is the
    # weak accuracy plus the k largest gains; APGR is the area under PGR over the shares 0, 5 %, ..., 100 %.
    gains = np.sort(strong - weak)[::-1]
    shares = np.linspace(0, 1, 21)
    acc = np.array([weak.mean() + gains[:round(s * n)].sum() / n for s in shares])
    want = (np.trapezoid(acc, shares) - weak.mean()) / (strong.mean() - weak.mean())
    m = re.search(r"oracle order\s+APGR ([-\d.]+)\s+AIQ ([\d.]+)", text)
    assert m and float(m[1]) == pytest.approx(want, abs=5e-4)
    random_apgr = float(re.search(r"random\s+APGR ([-\d.]+)", text)[1])
    assert random_apgr < float(m[1])  # no order beats sending the gains first
    assert "frontier (cost $, accuracy):" in text and "oracle" in text.split("frontier")[1].splitlines()[0]


def test_train_tiny_plugs_in_the_demos_paired_profiles_by_import_path():
    """examples/train_tiny.yaml names its hooks by import path; building them (what --trust-code allows) makes the
    paired-profiles sampler."""
    from orchlib.configfile import load_config
    from orchlib.experiments.variants import PairedProfiles, VariantConfig
    from orchlib.train.run import RunConfig

    cfg = load_config(REPO / "examples" / "train_tiny.yaml", RunConfig)
    assert cfg.hooks.factory == "orchlib.experiments.variants:VariantConfig"
    hooks = cfg.hooks.build()
    assert isinstance(hooks.sampler, PairedProfiles) and hooks.sampler.profiles == ("accuracy", "thrifty")
    assert hooks.record == VariantConfig(paired_profiles=("accuracy", "thrifty")).hooks().record


def test_paper_grpo_in_one_file_is_the_trainers_method_bit_for_bit(toy_warm):
    """examples/paper_grpo.py, 3 steps beside `Trainer` from the same warm-started policy at the same seed:
    every parameter equal (torch.equal). Every group is kept and the weights decay a little, so each
    step is an optimiser step that moves the weights whatever the episodes sampled."""
    import importlib.util

    import torch
    from conftest import TOY_ROLLOUT

    from orchlib.envs.toy import environment
    from orchlib.models import load_policy
    from orchlib.rollout import RolloutConfig
    from orchlib.train import GRPOConfig, Trainer

    spec = importlib.util.spec_from_file_location("paper_grpo", REPO / "examples" / "paper_grpo.py")
    paper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(paper)
    assert paper.__doc__.startswith(".venv/bin/python examples/paper_grpo.py")  # it opens with its command
    assert len((REPO / "examples" / "paper_grpo.py").read_text().splitlines()) <= 350
    cfg = GRPOConfig(rollout=RolloutConfig(**TOY_ROLLOUT), seed=0, mixed_precision="no", tasks_per_step=2,
                     group_size=4, micro_batch_size=64, min_reward_spread=None, weight_decay=0.01)
    env = environment(n_train=8, n_test=2)
    trainer = Trainer(load_policy(toy_warm[0]), env, cfg)
    trainer.run(3, progress=False)
    model, tok = load_policy(toy_warm[0])
    lines: list[str] = []
    paper.train(model, tok, env, cfg, 3, log=lines.append)
    theirs = dict(trainer.accelerator.unwrap_model(trainer.model).named_parameters())
    start = dict(load_policy(toy_warm[0])[0].named_parameters())
    ours = dict(model.named_parameters())
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(p, theirs[n]) for n, p in ours.items()), [n for n, p in ours.items()
                                                                       if not torch.equal(p, theirs[n])]
    assert any(not torch.equal(p, start[n]) for n, p in ours.items())  # three optimiser steps moved the weights
    # the same episodes: each step's mean reward, as the two print and log it
    rewards = [float(line.split("reward ")[1].split(",")[0]) for line in lines if line.startswith("step ")]
    assert rewards == [round(h["reward"], 3) for h in trainer.history]
