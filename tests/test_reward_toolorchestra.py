"""The paper's reward (rewards/toolorchestra.yaml): hand-computed values and its defining properties."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchlib.reward import Reward
from orchlib.tasks import Preference
from orchlib.trajectory import Trajectory, Turn

REWARDS = Path(__file__).resolve().parents[1] / "rewards"


@pytest.fixture(scope="module")
def reward():
    return Reward.load(REWARDS / "toolorchestra.yaml")


def rollout(outcome, cost, latency, calls):
    return {"outcome": outcome, "cost": cost, "latency": latency, "turns": 1, "tokens": 10, "errors": 0,
            "calls": calls}


GROUP = [rollout(1, 0.02, 4.0, {"search": 2, "gpt5": 0}),
         rollout(1, 0.10, 10.0, {"gpt5": 1}),
         rollout(0, 0.00, 2.0, {}),
         rollout(1, 0.06, 6.0, {"search": 1, "gpt5": 2})]
P = Preference(outcome=1.0, cost=1.0, latency=0.5, tools={"search": 0.2, "gpt5": -0.4})
# By hand: minmax(calls[search]) = [1, 0, 0, .5], minmax(calls[gpt5]) = [0, .5, 0, 1],
# minmax(outcome) = [1, 1, 0, 1], minmax(-cost) = [.8, 0, 1, .4], minmax(-latency) = [.75, 0, 1, .5].
# R0 = .2*1 - .4*0 + 1 + .8 + .5*.75 = 2.375;  R1 = -.4*.5 + 1 = 0.8;  R2 = 0 (wrong);
# R3 = .2*.5 - .4*1 + 1 + .4 + .5*.5 = 1.35
EXPECTED = [2.375, 0.8, 0.0, 1.35]


def test_hand_computed_group(reward):
    np.testing.assert_allclose(reward(GROUP, P=P), EXPECTED, rtol=1e-12)


def test_same_via_sympy_row_by_row(reward):
    np.testing.assert_allclose(reward.reference(GROUP, P=P), EXPECTED, rtol=1e-12)


def test_default_preference_and_dict_preference(reward):
    # file default: outcome 1, cost .5, latency .5, no tool weights
    np.testing.assert_allclose(reward(GROUP), [1 + .4 + .375, 1.0, 0.0, 1 + .2 + .25], rtol=1e-12)
    np.testing.assert_allclose(reward(GROUP, P={}), reward(GROUP), rtol=0)  # {} = no P given
    as_dict = {"outcome": 1.0, "cost": 1.0, "latency": 0.5, "tools": {"search": 0.2, "gpt5": -0.4}}
    np.testing.assert_allclose(reward(GROUP, P=as_dict), EXPECTED, rtol=1e-12)


def test_tool_missing_from_P_weighs_zero(reward):
    only_search = Preference(outcome=1.0, cost=1.0, latency=0.5, tools={"search": 0.2})
    np.testing.assert_allclose(reward(GROUP, P=only_search), [2.375, 1.0, 0.0, 1.75], rtol=1e-12)


def test_fixed_tool_set_gives_the_same_values():
    fixed = Reward.load(REWARDS / "toolorchestra.yaml", tools=["search", "gpt5", "never-called"])
    np.testing.assert_allclose(fixed(GROUP, P=P), EXPECTED, rtol=1e-12)


def test_all_equal_group_is_all_zero_never_nan(reward):
    tied = [rollout(1, 0.05, 3.0, {"search": 1})] * 8
    out = reward(tied, P=P)
    assert np.array_equal(out, np.zeros(8))


def test_explain_contributions_add_up(reward):
    ex = reward.explain(GROUP, P=P)
    np.testing.assert_allclose(ex.reward, EXPECTED, rtol=1e-12)
    assert list(ex.values) == ["tool_use", "accuracy", "thrift", "speed"]
    np.testing.assert_allclose(ex.values["thrift"], [0.8, 0.0, 1.0, 0.4], rtol=1e-12)
    np.testing.assert_allclose(ex.contributions["thrift"], [0.8, 0.0, 0.0, 0.4], rtol=1e-12)  # gated
    np.testing.assert_allclose(sum(ex.contributions.values()), ex.reward, rtol=1e-12)
    rows = ex.as_rows()
    assert len(rows) == 4 * 4 and rows[0] == {"rollout": 0, "term": "tool_use", "value": pytest.approx(0.2),
                                              "contribution": pytest.approx(0.2), "reward": 2.375}
    assert "thrift" in str(ex)


def test_reads_trajectories():
    reward = Reward.load(REWARDS / "toolorchestra.yaml")
    trajs = [Trajectory(task_id="q", outcome=r["outcome"], cost_usd=r["cost"], latency_s=r["latency"],
                        calls=r["calls"], turns=[Turn(text="x")], mask=[1, 1, 0]) for r in GROUP]
    np.testing.assert_allclose(reward(trajs, P=P), EXPECTED, rtol=1e-12)


def test_latex_and_symbols(reward):
    tex = reward.latex()
    assert r"\sum_{t \in \mathrm{tools}}" in tex and r"\operatorname{minmax}" in tex and r"\geq 1" in tex
    assert reward.symbols == ("P.cost", "P.latency", "P.outcome", "P.tools[t]", "calls[t]", "cost", "latency",
                              "outcome")


PAPER = Reward.load(REWARDS / "toolorchestra.yaml")


@st.composite
def correct_pairs(draw):
    """A group with two correct rollouts, `a` cheaper and faster than `b`, plus wrong ones."""
    g = draw(st.integers(2, 8))
    money = st.floats(0, 10, allow_nan=False)
    costs = draw(st.lists(money, min_size=g, max_size=g))
    lats = draw(st.lists(money, min_size=g, max_size=g))
    outcomes = draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=g, max_size=g))
    a, b = draw(st.permutations(range(g)))[:2]
    extra_cost, extra_lat = draw(st.floats(1e-3, 5)), draw(st.floats(1e-3, 5))
    costs[b], lats[b] = costs[a] + extra_cost, lats[a] + extra_lat
    outcomes[a] = outcomes[b] = 1.0
    calls = draw(st.lists(st.dictionaries(st.sampled_from(["x", "y"]), st.integers(0, 3)), min_size=g, max_size=g))
    group = [rollout(o, c, lt, k) for o, c, lt, k in zip(outcomes, costs, lats, calls)]
    pref = Preference(outcome=draw(st.floats(0, 2)), cost=draw(st.floats(0.01, 2)), latency=draw(st.floats(0.01, 2)))
    return group, pref, a, b


@settings(max_examples=150, deadline=None)
@given(correct_pairs())
def test_cheaper_faster_correct_beats_dearer_slower_and_wrong_is_zero(case):
    group, pref, a, b = case
    out = PAPER(group, P=pref)
    assert out[a] > out[b]
    for i, r in enumerate(group):
        if r["outcome"] == 0:
            assert out[i] == 0.0
    assert np.isfinite(out).all()
