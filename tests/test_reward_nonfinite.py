"""NaN and infinities: reported where they occur, never scored (docs/rewards.md, "Non-finite values")."""

from pathlib import Path

import numpy as np
import pytest
import torch

from orchlib.reward import Reward, RewardValueError

REWARDS = Path(__file__).resolve().parents[1] / "rewards"
PAPER = Reward.load(REWARDS / "toolorchestra.yaml")


def rollout(outcome=1.0, cost=0.01, latency=1.0, calls=None):
    return {"outcome": outcome, "cost": cost, "latency": latency, "calls": calls or {}}


@pytest.mark.parametrize("outcome", [float("nan"), float("-inf"), float("inf")])
def test_toolorchestra_reports_a_non_finite_outcome_instead_of_scoring_0(outcome):
    # Before: `where(outcome >= 1, ..., 0)` read nan >= 1 as False and scored the rollout 0.
    group = [rollout(), rollout(outcome=outcome), rollout(outcome=0.0)]
    with pytest.raises(RewardValueError, match=r"input `outcome` is .* at \(group, rollout\) \[\(0, 1\)\]"):
        PAPER(group)
    for call in (PAPER.explain, PAPER.reference, lambda g: PAPER.many([g])):
        with pytest.raises(RewardValueError, match="input `outcome`"):
            call(group)


def test_non_finite_input_in_a_batch_names_every_position():
    values = {"outcome": np.ones((3, 4)), "cost": np.zeros((3, 4)), "latency": np.ones((3, 4))}
    values["cost"][2, 3] = np.nan
    values["cost"][0, 1] = -np.inf
    with pytest.raises(RewardValueError, match=r"input `cost` is -inf at \(group, rollout\) \[\(0, 1\), \(2, 3\)\]"):
        PAPER.batch(values)
    with pytest.raises(RewardValueError, match=r"input `cost`"):
        PAPER.batch({k: torch.as_tensor(v) for k, v in values.items()}, backend="torch")


def test_a_tool_count_or_a_P_entry_that_is_not_finite_is_reported():
    with pytest.raises(RewardValueError, match=r"input `calls\[search\]` is nan"):
        PAPER([rollout(calls={"search": float("nan")}), rollout()])
    with pytest.raises(RewardValueError, match=r"(?s)P is not a preference.*finite number"):
        PAPER([rollout(), rollout(cost=0.02)], P={"cost": float("nan")})
    # A Preference built without validation still cannot slip a NaN in.
    from orchlib.tasks import Preference
    unchecked = Preference.model_construct(name="x", outcome=1.0, cost=float("nan"), latency=0.0, tools={}, extra={})
    with pytest.raises(RewardValueError, match=r"input `P.cost` is nan at group \[0\]"):
        PAPER([rollout(), rollout(cost=0.02)], P=unchecked)


def test_an_input_the_reward_does_not_read_is_not_checked():
    group = [rollout(latency=float("nan")), rollout(outcome=0.0, latency=1.0)]
    np.testing.assert_allclose(Reward("outcome")(group), [1.0, 0.0])


def test_a_condition_on_a_nan_is_reported_not_decided():
    # 0 / 0 inside a condition: `nan > 1` is False in numpy, which would silently pick the 0 branch.
    group = [rollout(cost=0.0, latency=0.0), rollout(cost=2.0, latency=1.0)]
    with pytest.raises(RewardValueError, match=r"not finite at \(group, rollout\) \[\(0, 0\)\]"):
        Reward("where(cost / latency > 1, 1, 0)")(group)
    with pytest.raises(RewardValueError, match="not finite"):
        Reward("(cost / latency > 1) * 2")(group)
    with pytest.raises(RewardValueError, match="not finite"):
        Reward("where(cost / latency > 1 or outcome > 0, 1, 0)")(group)
    with pytest.raises(RewardValueError, match="not finite"):
        Reward("where(cost / latency > 1, 1, 0)").batch(
            {"cost": torch.tensor([[0.0, 2.0]]), "latency": torch.tensor([[0.0, 1.0]])}, backend="torch")
    # ... and so is a group operator over a group holding one.
    with pytest.raises(RewardValueError, match=r"\[\(0, 0\), \(0, 1\)\]"):
        Reward("minmax(cost / latency)")(group)
    # The row-by-row reference gives NaN there too.
    assert np.isnan(Reward("where(cost / latency > 1, 1, 0)").reference(group)[0])


def test_a_branch_not_taken_may_be_non_finite():
    group = [rollout(cost=0.0), rollout(cost=0.5)]
    np.testing.assert_allclose(Reward("where(cost > 0, 1 / cost, 0)")(group), [0.0, 2.0])
    np.testing.assert_allclose(Reward("where(cost > 0, where(latency / cost > 1, 1, 2), 3)")(group), [3.0, 1.0])
