"""Sums over tools and the new group operators, against numpy written here and values by hand."""

import numpy as np
import pytest
import torch

from orchlib.reward import Reward
from orchlib.tasks import Preference

GROUP = [{"outcome": 1, "cost": 0.5, "calls": {"a": 2, "t": 1}},
         {"outcome": 0, "cost": 1.5, "calls": {"a": 0, "b": 3}},
         {"outcome": 1, "cost": 3.0, "calls": {"t": 4}}]
A, B, T = np.array([2.0, 0.0, 0.0]), np.array([0.0, 3.0, 0.0]), np.array([1.0, 0.0, 4.0])
COST = np.array([0.5, 1.5, 3.0])


def mm(x):
    return (x - x.min()) / (x.max() - x.min()) if x.max() > x.min() else np.zeros_like(x)


def test_group_max_min_sum_count_by_hand():
    np.testing.assert_allclose(Reward("max(cost)")(GROUP), [3.0] * 3)
    np.testing.assert_allclose(Reward("min(cost) + max(cost, 1)")(GROUP), [1.5, 2.0, 3.5])
    np.testing.assert_allclose(Reward("sum(cost)")(GROUP), [5.0] * 3)
    np.testing.assert_allclose(Reward("count(cost > 1)")(GROUP), [2.0] * 3)
    np.testing.assert_allclose(Reward("count(outcome)")(GROUP), [2.0] * 3)
    np.testing.assert_allclose(Reward("G")(GROUP), [3.0] * 3)
    # Of a value that is the same for the whole group, `count` and `sum` still count every rollout.
    np.testing.assert_allclose(Reward("count(mean(cost) > 1) + sum(max(cost))")(GROUP), [12.0] * 3)
    np.testing.assert_allclose(Reward("cost - min(where(outcome >= 1, cost, 1e9))")(GROUP), [0.0, 1.0, 2.5])


def test_per_tool_sum_weighted_by_P():
    P = Preference(tools={"a": 2.0, "b": -1.0, "t": 0.5})
    reward = Reward("sum(P.tools[t] * minmax(calls[t]) for t in tools)")
    want = 2.0 * mm(A) - 1.0 * mm(B) + 0.5 * mm(T)
    np.testing.assert_allclose(reward(GROUP, P=P), want, rtol=1e-12)
    np.testing.assert_allclose(reward.reference(GROUP, P=P), want, rtol=1e-12)


def test_loop_variable_and_a_tool_named_like_it_stay_apart():
    # `calls['t']` is the tool called "t"; `calls[t]` is each tool in turn.
    reward = Reward("sum(calls[t] for t in tools) - calls['t'] + sum(calls['t'] * P.tools[t] for t in tools)")
    P = Preference(tools={"a": 1.0, "t": 10.0})
    want = A + B + 11.0 * T
    np.testing.assert_allclose(reward(GROUP, P=P), want, rtol=1e-12)
    np.testing.assert_allclose(reward.reference(GROUP, P=P), want, rtol=1e-12)


def test_nested_sums_and_bodies_without_the_tool():
    nested = Reward("sum(sum(calls[t] * calls[u] for u in tools) for t in tools)")
    np.testing.assert_allclose(nested(GROUP), (A + B + T) ** 2, rtol=1e-12)
    np.testing.assert_allclose(Reward("sum(cost for t in tools)")(GROUP), 3 * COST, rtol=1e-12)
    np.testing.assert_allclose(Reward("sum(1 for t in tools)", tools=[])(GROUP), [0.0] * 3)
    np.testing.assert_allclose(Reward("cost + sum(minmax(calls[t]) for t in tools)", tools=[])(GROUP), COST)


def test_torch_and_batch_with_one_P_per_group():
    rng = np.random.default_rng(0)
    tools = ["a", "b", "c"]
    values = {f"calls[{t}]": rng.integers(0, 3, (5, 4)).astype(float) for t in tools}
    values["cost"] = rng.random((5, 4))
    prefs = [Preference(tools={t: float(w) for t, w in zip(tools, rng.uniform(-1, 1, 3))}) for _ in range(5)]
    reward = Reward("sum(P.tools[t] * zscore(calls[t] + cost) for t in tools)", tools=tools)
    want = np.zeros((5, 4))
    for i, p in enumerate(prefs):
        for t in tools:
            x = values[f"calls[{t}]"][i] + values["cost"][i]
            want[i] += p.tools[t] * (x - x.mean()) / x.std()
    np.testing.assert_allclose(reward.batch(values, prefs), want, rtol=1e-10, atol=1e-12)
    tensors = {k: torch.as_tensor(v) for k, v in values.items()}
    np.testing.assert_allclose(reward.batch(tensors, prefs, backend="torch").numpy(), want, rtol=1e-10, atol=1e-12)


def test_explain_shows_each_tool_by_name():
    reward = Reward("outcome + s", terms={"s": "sum(P.tools[t] * calls[t] for t in tools)"})
    ex = reward.explain(GROUP, P=Preference(tools={"a": 1.0}))
    assert set(ex.inputs) == {"outcome", "calls[a]", "calls[b]", "calls[t]", "P.tools[a]", "P.tools[b]",
                              "P.tools[t]"}
    np.testing.assert_allclose(ex.values["s"], A)


@pytest.mark.parametrize("text", ["max(cost)", "count(cost > 1)", "sum(calls[t] for t in tools)"])
def test_latex_names_the_operators(text):
    tex = Reward(text).latex()
    assert {"max(cost)": r"\max_{\mathrm{group}}", "count(cost > 1)": r"\#_{\mathrm{group}}",
            "sum(calls[t] for t in tools)": r"\sum_{t \in \mathrm{tools}}"}[text] in tex
