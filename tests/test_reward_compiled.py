"""Compiled rewards against hand-written numpy, against sympy row by row, and across batch/torch paths."""

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from orchlib.reward import Reward, RewardSyntaxError, RewardValueError, features
from orchlib.tasks import Preference

REWARDS = Path(__file__).resolve().parents[1] / "rewards"
PAPER = Reward.load(REWARDS / "toolorchestra.yaml")
TOOLS = ["a", "b", "c"]


def mm(x):
    """Hand-written min-max over the last axis, 0 for a constant group."""
    lo, hi = x.min(-1, keepdims=True), x.max(-1, keepdims=True)
    spread = hi - lo
    return np.divide(x - lo, spread, out=np.zeros_like(x), where=spread > 0)


def paper_numpy(outcome, cost, latency, calls, pref):
    """The ToolOrchestra reward written directly in numpy (arrays (n, G))."""
    total = pref.outcome * mm(outcome) + pref.cost * mm(-cost) + pref.latency * mm(-latency)
    for tool, count in calls.items():
        total = total + pref.tools.get(tool, 0.0) * mm(count)
    return np.where(outcome >= 1, total, 0.0)


values = st.floats(0, 100, allow_nan=False, width=32)


@st.composite
def batches(draw):
    n, g = draw(st.integers(1, 6)), draw(st.integers(1, 8))

    def arr(elements):
        return np.array(draw(st.lists(st.lists(elements, min_size=g, max_size=g), min_size=n, max_size=n)),
                        dtype=np.float64)

    # Few distinct values, so ties and constant groups are common.
    small = st.sampled_from([0.0, 0.5, 1.0, 2.0]) | values
    feats = {"outcome": arr(st.sampled_from([0.0, 1.0])), "cost": arr(small), "latency": arr(small)}
    feats.update({f"calls[{t}]": arr(st.integers(0, 3)) for t in TOOLS})
    weight = st.floats(-2, 2, allow_nan=False)
    prefs = [Preference(outcome=draw(weight), cost=draw(weight), latency=draw(weight),
                        tools={t: draw(weight) for t in TOOLS if draw(st.booleans())}) for _ in range(n)]
    return feats, prefs


@settings(max_examples=120, deadline=None)
@given(batches())
def test_paper_reward_equals_hand_written_numpy(case):
    feats, prefs = case
    got = PAPER.batch(feats, prefs)
    calls = {t: feats[f"calls[{t}]"] for t in TOOLS}
    want = np.stack([paper_numpy(feats["outcome"][i:i + 1], feats["cost"][i:i + 1], feats["latency"][i:i + 1],
                                 {t: c[i:i + 1] for t, c in calls.items()}, p)[0] for i, p in enumerate(prefs)])
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    assert got.dtype == np.float64 and got.shape == feats["cost"].shape


@settings(max_examples=40, deadline=None)
@given(batches())
def test_batch_equals_group_by_group_and_torch(case):
    feats, prefs = case
    got = PAPER.batch(feats, prefs)
    n, g = feats["cost"].shape
    groups = [[{"outcome": feats["outcome"][i, j], "cost": feats["cost"][i, j], "latency": feats["latency"][i, j],
                "turns": 1, "tokens": 1, "errors": 0, "calls": {t: feats[f"calls[{t}]"][i, j] for t in TOOLS}}
               for j in range(g)] for i in range(n)]
    for i in range(n):
        np.testing.assert_allclose(PAPER(groups[i], P=prefs[i]), got[i], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.stack(PAPER.many(groups, prefs)), got, rtol=1e-12, atol=1e-12)
    tensor = PAPER.batch({k: torch.as_tensor(v) for k, v in feats.items()}, prefs, backend="torch")
    assert isinstance(tensor, torch.Tensor) and tensor.dtype == torch.float64
    np.testing.assert_allclose(tensor.numpy(), got, rtol=1e-12, atol=1e-12)


# Every construct of the language, compiled vs sympy subs/evalf row by row.
EXPRESSIONS = [
    "outcome - 0.3 * cost ** 2 / (1 + latency)",
    "clip(cost, 0.01, 0.05) + min(latency, 3, turns) - max(cost, P.cost)",
    "exp(-cost) + log(1 + latency) + abs(cost - 0.02)",
    "where(outcome >= 1 and not cost > P.budget or turns == 3, tokens / 100, -1)",
    "(cost < 0.02) * 2 + (0 < latency <= 3) - (errors != 0)",
    "zscore(cost) + rank(latency) + mean(tokens) / 100 + minmax(turns)",
    "minmax(minmax(cost) + rank(-latency)) * P.outcome",
    "sum(P.tools[t] * zscore(calls[t]) + calls[t] for t in tools) + calls['gpt-5'] * P.tools['gpt-5']",
    "where(outcome, 1, 0) + P.w * outcome",
    "2 ** 0.5 * exp(1) - log(2)",
]
GROUP = [{"outcome": 1, "cost": 0.01, "latency": 2.0, "turns": 1, "tokens": 100, "errors": 0,
          "calls": {"gpt-5": 1, "search": 2}},
         {"outcome": 0, "cost": 0.04, "latency": 5.0, "turns": 3, "tokens": 250, "errors": {"timeout": 1},
          "calls": {"search": 1}},
         {"outcome": 1, "cost": 0.02, "latency": 2.0, "turns": 2, "tokens": 180, "errors": 0, "calls": {}},
         {"outcome": 1, "cost": 0.09, "latency": 1.0, "turns": 3, "tokens": 90, "errors": 2,
          "calls": {"gpt-5": 3}}]
PREF = Preference(outcome=0.7, cost=0.03, latency=0.4, tools={"gpt-5": -0.5, "search": 0.25},
                  extra={"budget": 0.05, "w": 1.5})


@pytest.mark.parametrize("text", EXPRESSIONS)
def test_compiled_equals_sympy_row_by_row(text):
    reward = Reward(text)
    np.testing.assert_allclose(reward(GROUP, P=PREF), reward.reference(GROUP, P=PREF), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("text", EXPRESSIONS)
def test_torch_equals_numpy(text):
    reward = Reward(text)
    feats = {k: v[None, :] for k, v in features(GROUP).items()}
    np.testing.assert_allclose(reward.batch({k: torch.as_tensor(v) for k, v in feats.items()}, PREF,
                                            backend="torch").numpy(),
                               reward.batch(feats, PREF), rtol=1e-12, atol=1e-12)


def test_small_examples_by_hand():
    group = [{"outcome": 1, "cost": 0.02}, {"outcome": 1, "cost": 0.10}, {"outcome": 0, "cost": 0.0}]
    np.testing.assert_allclose(Reward("outcome - 10 * cost")(group), [0.8, 0.0, -0.0])
    np.testing.assert_allclose(Reward("where(cost <= 0.05, outcome, 0)")(group), [1.0, 0.0, 0.0])
    np.testing.assert_allclose(Reward("rank(cost)")(group), [0.5, 1.0, 0.0])
    np.testing.assert_allclose(Reward("zscore(outcome)")(group), [2 ** -0.5, 2 ** -0.5, -(2 ** 0.5)])
    np.testing.assert_allclose(Reward("mean(cost)")(group), [0.04, 0.04, 0.04])
    np.testing.assert_allclose(Reward("3")(group), [3.0, 3.0, 3.0])


def test_shipped_rewards():
    group = [{"outcome": 1, "cost": 0.02}, {"outcome": 1, "cost": 0.08}, {"outcome": 0, "cost": 0.0}]
    np.testing.assert_allclose(Reward.load(REWARDS / "outcome.yaml")(group), [1.0, 1.0, 0.0])
    np.testing.assert_allclose(Reward.load(REWARDS / "cost_penalty.yaml")(group), [0.8, 0.2, 0.0])
    budget = Reward.load(REWARDS / "budget.yaml")
    np.testing.assert_allclose(budget(group), [1.0, 0.0, 0.0])
    np.testing.assert_allclose(budget(group, P={"extra": {"budget": 0.1}}), [1.0, 1.0, 0.0])
    # An entry missing from the task's P comes from the file's default P.
    np.testing.assert_allclose(budget(group, P=Preference(cost=3.0)), [1.0, 0.0, 0.0])


def test_errors_are_reported_not_zeroed():
    group = [{"outcome": 1, "cost": 0.0}, {"outcome": 1, "cost": 0.1}]
    with pytest.raises(RewardValueError, match=r"not finite at \(group, rollout\) \[\(0, 0\)\]"):
        Reward("outcome / cost")(group)
    # the branch not taken may be infinite
    np.testing.assert_allclose(Reward("where(cost > 0, 1 / cost, 0)")(group), [0.0, 10.0])
    with pytest.raises(RewardValueError, match="no `latency`"):
        Reward("latency")(group)
    with pytest.raises(RewardValueError, match="P.budget"):
        Reward("cost <= P.budget")(group)
    with pytest.raises(RewardValueError, match="not a preference"):
        Reward("outcome")(group, P={"outcome": 1, "bogus": 2})
    with pytest.raises(RewardValueError, match="at least one rollout"):
        Reward("outcome")([])
    with pytest.raises(RewardValueError, match=r"\(n_groups, G\)"):
        Reward("outcome").batch({"outcome": np.zeros(3)})
    with pytest.raises(RewardSyntaxError, match="reserved"):
        Reward("outcome", terms={"cost": "1"})
    with pytest.raises(RewardSyntaxError, match="in term `b`: unknown name `c`"):
        Reward("a + b", terms={"a": "1", "b": "c"})


def test_terms_may_use_earlier_terms_only():
    r = Reward("b * 2", terms={"a": "minmax(cost)", "b": "a + 1", "unused": "3"})
    np.testing.assert_allclose(r([{"cost": 1.0}, {"cost": 3.0}]), [2.0, 4.0])
    assert r.unused_terms == ("unused",)
    with pytest.raises(RewardSyntaxError, match="unknown name `b`"):
        Reward("a", terms={"a": "b", "b": "1"})


def test_tool_sets_compile_once_each():
    r = Reward("sum(calls[t] for t in tools)")
    r([{"calls": {"a": 1}}])
    r([{"calls": {"a": 2}}])
    r([{"calls": {"b": 1}}])
    assert sorted(r._programs) == [("a",), ("b",)]
    assert len(Reward("outcome")._programs) == 0


def test_expansion_over_tools_can_refuse_a_constant():
    r = Reward("sum(1e300 for t in tools)")  # one tool is fine, two overflow the constant range
    np.testing.assert_allclose(r([{"calls": {"a": 1}}]), [1e300])
    # Compiled over a tool axis the sum is k * 1e300, a float64; only the expanded sympy form refuses it.
    np.testing.assert_allclose(r([{"calls": {"a": 1, "b": 1}}]), [2e300])
    with pytest.raises(RewardSyntaxError, match=r"expanded over tools \['a', 'b'\]: the constant"):
        r.expression_for(["a", "b"])


def test_per_group_arithmetic_follows_numpy_not_python_floats():
    # With one P for all groups, P-only parts are scalars: 0.0 ** -1 must be reported, not raise.
    with pytest.raises(RewardValueError, match="not finite"):
        Reward("outcome + 0 ** (P.cost - 1)")([{"outcome": 1}], P={"cost": 0.5})
    with pytest.raises(RewardValueError, match="not finite"):
        Reward("(P.cost - 1) ** 0.5")([{"outcome": 1}], P={"cost": 0.5})


def test_long_conditions_compile():
    # 199 `and`s: printed as a balanced tree, not 199 nested calls (Python allows 200 parentheses).
    text = " and ".join(f"cost > {i / 1000}" for i in range(1, 200))
    np.testing.assert_allclose(Reward(text)([{"cost": 1.0}, {"cost": 0.1}]), [1.0, 0.0])


@pytest.mark.parametrize("reward", [
    Reward("where(mean(where(cost > 1.5, 1, 0)) > 0.5, 1, 0)"),
    Reward("where(share > 0.5, 1, 0)", terms={"share": "mean(where(cost > 1.5, 1, 0))"}),
])
def test_group_operator_inside_a_condition_stays_whole(reward):
    # Two of three rollouts cost more than 1.5: the mean is 2/3 > 0.5 for every rollout. sympy's
    # Piecewise gave [0, 1, 1] (the mean pushed into the branches) in the compiled form or, inside a
    # named term, in reference(), expression and latex().
    group = [{"cost": 1.0}, {"cost": 3.0}, {"cost": 2.0}]
    np.testing.assert_allclose(reward(group), [1.0, 1.0, 1.0])
    np.testing.assert_allclose(reward.reference(group), [1.0, 1.0, 1.0])
    assert str(reward.expression) == "where(mean(where(cost > 1.5, 1, 0)) > 0.5, 1, 0)"
    assert reward.latex() == (r"\left[\operatorname{mean}\left(\left[\mathrm{cost} > 1.5\right]\right) > 0.5\right]")
