"""Published rewards written in the reward language, each against its paper's formula written here.

The formulas below are transcribed from the papers in plain Python, one group at a time, without
orchlib: ToolOrchestra (arXiv 2511.21689, section 3; also tests/test_reward_compiled.py), OTC-GRPO
(arXiv 2504.14870, section 3) and RLOO (arXiv 2402.14740, section 3.2).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from orchlib.reward import Reward
from orchlib.tasks import Preference

REWARDS = Path(__file__).resolve().parents[1] / "rewards"
TOOLS = ["search", "python", "gpt-5"]


# --- the papers' formulas ------------------------------------------------------------------------

def toolorchestra_paper(group: list[dict], P: dict) -> list[float]:
    """R = M_norm · P if the outcome is 1, else 0; each entry of M min-max normalised over the group."""
    def norm(column: list[float]) -> list[float]:
        lo, hi = min(column), max(column)
        return [0.0 if hi == lo else (v - lo) / (hi - lo) for v in column]

    entries = [(P["outcome"], norm([r["outcome"] for r in group])),
               (P["cost"], norm([-r["cost"] for r in group])),
               (P["latency"], norm([-r["latency"] for r in group]))]
    entries += [(P["tools"].get(t, 0.0), norm([float(r["calls"].get(t, 0)) for r in group])) for t in TOOLS]
    return [sum(w * col[i] for w, col in entries) if r["outcome"] == 1 else 0.0 for i, r in enumerate(group)]


def otc_paper(group: list[dict], alpha: float = 1.0, c: float = 1.0) -> list[float]:
    """OTC-GRPO: alpha * r_tool(m, n) * r_phi, n = fewest calls among correct rollouts (0 if none)."""
    calls = [sum(r["calls"].values()) for r in group]
    correct = [m for m, r in zip(calls, group) if r["outcome"] == 1]
    n = min(correct) if correct else 0

    def f(m: int, n: int) -> float:
        if m == 0 and n == 0:
            return 0.0
        if n == 0:
            return float(m)
        return 2 * n * m / (m + n)

    def r_tool(m: int, n: int) -> float:
        if f(m, n) == n == 0:
            return 1.0
        if n == 0:
            return math.cos(m * math.pi / (2 * m + c))
        return math.sin(f(m, n) * math.pi / (2 * n))

    return [alpha * r_tool(m, n) * r["outcome"] for m, r in zip(calls, group)]


def rloo_paper(group: list[dict]) -> list[float]:
    """r_i - 1/(k-1) sum_{j != i} r_j; no baseline (0) for a group of one."""
    r = [x["outcome"] for x in group]
    k = len(r)
    if k == 1:
        return [0.0]
    return [r[i] - sum(r[j] for j in range(k) if j != i) / (k - 1) for i in range(k)]


# --- random groups -------------------------------------------------------------------------------

@st.composite
def groups(draw, min_size: int = 1):
    g = draw(st.integers(min_size, 8))
    rollout = st.fixed_dictionaries({
        "outcome": st.sampled_from([0.0, 1.0]),
        "cost": st.sampled_from([0.0, 0.01, 0.02, 0.05]) | st.floats(0, 1, allow_nan=False),
        "latency": st.sampled_from([1.0, 2.0]) | st.floats(0, 60, allow_nan=False),
        "calls": st.dictionaries(st.sampled_from(TOOLS), st.integers(0, 4))})
    return draw(st.lists(rollout, min_size=g, max_size=g))


weights = st.floats(-2, 2, allow_nan=False)
preferences = st.fixed_dictionaries({"outcome": weights, "cost": weights, "latency": weights,
                                     "tools": st.dictionaries(st.sampled_from(TOOLS), weights)})


@settings(max_examples=150, deadline=None)
@given(groups(), preferences)
def test_toolorchestra_equals_the_paper(group, P):
    reward = Reward.load(REWARDS / "toolorchestra.yaml")
    np.testing.assert_allclose(reward(group, P=P), toolorchestra_paper(group, P), rtol=1e-9, atol=1e-12)


@settings(max_examples=150, deadline=None)
@given(groups(), st.floats(0.1, 3), st.floats(0.5, 4))
def test_otc_equals_the_paper(group, alpha, c):
    reward = Reward.load(REWARDS / "otc.yaml")
    P = {"outcome": 1.0, "extra": {"alpha": alpha, "c": c}}
    np.testing.assert_allclose(reward(group, P=P), otc_paper(group, alpha, c), rtol=1e-9, atol=1e-12)


def test_otc_by_hand():
    reward = Reward.load(REWARDS / "otc.yaml")
    # Correct rollouts used 2, 3 and 1 calls: n = 1. m = 1 scores sin(pi/2) = 1; m = 2 scores
    # sin((4/3) pi / 2) = sin(2pi/3); m = 3 scores sin(pi * 3/4); the wrong one scores 0.
    group = [{"outcome": 1, "calls": {"search": 2}}, {"outcome": 1, "calls": {"search": 1, "python": 2}},
             {"outcome": 1, "calls": {"gpt-5": 1}}, {"outcome": 0, "calls": {}}]
    want = [math.sin(2 * math.pi / 3), math.sin(3 * math.pi / 4), 1.0, 0.0]
    np.testing.assert_allclose(reward(group), want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(reward.reference(group), want, rtol=1e-12, atol=1e-15)
    # Nobody correct: every reward is 0, the reward is still defined (n = 0).
    assert np.array_equal(reward([{"outcome": 0, "calls": {"search": 1}}] * 3), np.zeros(3))


@settings(max_examples=100, deadline=None)
@given(groups())
def test_rloo_equals_the_paper(group):
    reward = Reward.load(REWARDS / "rloo.yaml")
    np.testing.assert_allclose(reward(group), rloo_paper(group), rtol=1e-9, atol=1e-12)


def test_rloo_batch_reads_G_per_batch():
    reward = Reward.load(REWARDS / "rloo.yaml")
    outcome = np.array([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
    # G = 4: r_i - (sum - r_i) / 3
    want = outcome - (outcome.sum(axis=1, keepdims=True) - outcome) / 3
    np.testing.assert_allclose(reward.batch({"outcome": outcome}), want, rtol=1e-12)
    np.testing.assert_allclose(want.sum(axis=1), 0.0, atol=1e-12)  # mean 0 in every group


def test_published_files_load_with_docs_and_latex():
    for name in ("toolorchestra", "otc", "rloo"):
        reward = Reward.load(REWARDS / f"{name}.yaml")
        assert reward.doc and "arXiv" in reward.doc and reward.latex()
    assert Reward.load(REWARDS / "otc.yaml").preference == Preference(name="otc", outcome=1.0,
                                                                     extra={"alpha": 1.0, "c": 1.0})
