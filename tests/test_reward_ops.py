"""Group operators against hand-computed values, and numpy against torch."""

import math

import numpy as np
import pytest
import torch

from orchlib.reward.ops import GROUP_OPERATORS, mean, minmax, rank, torch_namespace, zscore


def test_minmax_hand_values():
    np.testing.assert_allclose(minmax([[3.0, 1.0, 2.0]]), [[1.0, 0.0, 0.5]])
    np.testing.assert_allclose(minmax([[-0.02, -0.10, 0.0, -0.06]]), [[0.8, 0.0, 1.0, 0.4]], rtol=1e-12)


def test_zscore_hand_values():
    s = math.sqrt(1.5)  # (x - 2) / sqrt(2/3) for x = 1, 2, 3
    np.testing.assert_allclose(zscore([[1.0, 2.0, 3.0]]), [[-s, 0.0, s]], rtol=1e-12)


def test_rank_averages_ties_then_normalises():
    # average ranks 1, 4, 2.5, 2.5 → min-max normalised
    np.testing.assert_allclose(rank([[10.0, 30.0, 20.0, 20.0]]), [[0.0, 1.0, 0.5, 0.5]])
    np.testing.assert_allclose(rank([[1.0, 1.0, 2.0]]), [[0.0, 0.0, 1.0]])
    # without ties it is (r - 1) / (G - 1)
    np.testing.assert_allclose(rank([[0.3, 0.1, 0.2, 0.9, 0.5]]), [[0.5, 0.0, 0.25, 1.0, 0.75]])


def test_mean_is_broadcast_per_group():
    out = np.broadcast_to(mean([[1.0, 2.0, 6.0], [0.0, 0.0, 3.0]]), (2, 3))
    np.testing.assert_allclose(out, [[3.0, 3.0, 3.0], [1.0, 1.0, 1.0]])


@pytest.mark.parametrize("name", ["minmax", "zscore", "rank"])
@pytest.mark.parametrize("value", [0.0, 0.1, 1e-300, 7.0, -3.3, 1e300])
def test_equal_values_give_zero_never_nan(name, value):
    fn = GROUP_OPERATORS[name][0]
    out = fn(np.full((3, 8), value))
    assert np.array_equal(out, np.zeros((3, 8)))


@pytest.mark.parametrize("name", ["minmax", "zscore", "rank"])
def test_single_rollout_and_scalars_give_zero(name):
    fn = GROUP_OPERATORS[name][0]
    assert np.array_equal(fn(np.array([[5.0]])), [[0.0]])
    assert np.array_equal(fn(2.5), [0.0])


def test_groups_are_independent():
    x = np.array([[1.0, 2.0, 3.0], [5.0, 5.0, 5.0]])
    np.testing.assert_allclose(minmax(x), [[0.0, 0.5, 1.0], [0.0, 0.0, 0.0]])


@pytest.mark.parametrize("name", list(GROUP_OPERATORS))
def test_non_finite_input_poisons_its_group_only(name):
    fn = GROUP_OPERATORS[name][0]
    out = np.broadcast_to(fn(np.array([[1.0, np.nan, 2.0], [1.0, 2.0, 3.0]])), (2, 3))
    assert np.isnan(out[0]).all()
    assert np.isfinite(out[1]).all()


@pytest.mark.parametrize("name", list(GROUP_OPERATORS))
def test_torch_matches_numpy(name):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 4, size=(50, 8)).astype(float)  # small integers: many ties
    x[3] = 2.0                                         # one constant group
    want = np.broadcast_to(GROUP_OPERATORS[name][0](x), x.shape)
    got = torch_namespace()[f"_group_{name}"](torch.as_tensor(x)).expand(*x.shape).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
