"""The sweep's hardening: labels that stay distinct, one-line errors for weights that are not numbers,
a hypervolume that is exact (against an independent inclusion–exclusion and the plain slicing
algorithm) and fast on large sets, zero-cost fronts that enclose their accuracy, negative costs
refused, and a cap on the grid."""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest

from orchlib.sweep import (MAX_GRID, SweepPoint, SweepResult, hypervolume, preference_grid, preference_sample,
                           reference_point)
from orchlib.tasks import Preference


# ---------------------------------------------------------------------------------------------- independent measures
def brute_union(points, reference) -> float:
    """Inclusion–exclusion over every subset of the boxes [p, reference] (accuracy negated): the
    intersection of boxes is the box from their coordinate-wise max. Exponential: small fronts only."""
    flip = [(p[0], -p[1], *p[2:]) for p in points]
    bound = (reference[0], -reference[1], *reference[2:])
    total = 0.0
    for k in range(1, len(flip) + 1):
        for subset in itertools.combinations(flip, k):
            corner = [max(c) for c in zip(*subset)]
            size = math.prod(max(b - c, 0.0) for b, c in zip(bound, corner))
            total += (-1) ** (k + 1) * size
    return total


def slicing(points, reference) -> float:
    """The plain slicing algorithm over every point (no front first, no sweep): what hypervolume did
    before, quadratic in 2-D and cubic in 3-D."""
    flip = [(p[0], -p[1], *p[2:]) for p in points]
    bound = (reference[0], -reference[1], *reference[2:])

    def volume(pts, bound):
        if not pts:
            return 0.0
        if len(bound) == 1:
            return bound[0] - min(p[0] for p in pts)
        xs = sorted({p[0] for p in pts})
        return sum(((xs[i + 1] if i + 1 < len(xs) else bound[0]) - x) * volume([p[1:] for p in pts if p[0] <= x],
                                                                               bound[1:])
                   for i, x in enumerate(xs))

    return volume([p for p in flip if all(x < b for x, b in zip(p, bound))], bound)


# ---------------------------------------------------------------------------------------------- exact values
def test_hypervolume_of_hand_made_fronts_exactly():
    # three steps and a dominated point: 1×(0.5) + 1×(0.75) + 2×(1.0) over cost 1..5, by hand = 3.25
    pts = [(1.0, 0.5), (2.0, 0.75), (3.0, 1.0), (4.0, 0.25)]
    assert hypervolume(pts, (5.0, 0.0)) == 3.25 == brute_union(pts, (5.0, 0.0))
    # duplicates and a point beyond the reference add nothing
    assert hypervolume(pts + [(2.0, 0.75), (6.0, 1.0)], (5.0, 0.0)) == 3.25
    # 3-D: two boxes [0,2]×[0,1]×[0,2] (a=1, l=0 at cost 0) and [1,2]×... by inclusion–exclusion
    pts3 = [(0.0, 0.5, 1.0), (1.0, 1.0, 0.0), (0.5, 0.25, 0.5)]
    ref3 = (2.0, 0.0, 2.0)
    # boxes: 2×0.5×1 = 1; 1×1×2 = 2; 1.5×0.25×1.5 = 0.5625; pairwise: 1∩2 = 1×0.5×1 = 0.5,
    # 1∩3 = 1.5×0.25×1 = 0.375, 2∩3 = 1×0.25×1.5 = 0.375; all three: 1×0.25×1 = 0.25
    want = 1 + 2 + 0.5625 - 0.5 - 0.375 - 0.375 + 0.25
    assert hypervolume(pts3, ref3) == want == brute_union(pts3, ref3) == 2.5625


@pytest.mark.parametrize("dims", [2, 3])
def test_the_fast_path_equals_the_independent_measures_on_random_points(dims):
    rng = np.random.default_rng(7)
    for _ in range(20):
        n = int(rng.integers(1, 200))
        # dyadic coordinates (multiples of 1/64): some ties, and every box measure is exact in binary
        pts = [tuple(float(x) for x in row) for row in rng.integers(0, 64, size=(n, dims)) / 64]
        ref = (1.0, 0.0, 1.0)[:dims]
        fast = hypervolume(pts, ref)
        assert fast == pytest.approx(slicing(pts, ref), abs=1e-12, rel=0)
        if n <= 10:
            assert fast == pytest.approx(brute_union(pts, ref), abs=1e-12, rel=0)


def test_large_sets_finish():
    # before: quadratic (2-D) and cubic (3-D) in the points, past 30 s for each of these
    rng = np.random.default_rng(0)
    two = [tuple(r) for r in rng.random((20_000, 2)).tolist()]
    three = [tuple(r) for r in rng.random((1_000, 3)).tolist()]
    t0 = time.perf_counter()
    area = hypervolume(two, (1.0, 0.0))
    volume = hypervolume(three, (1.0, 0.0, 1.0))
    assert time.perf_counter() - t0 < 30
    # each equals the plain slicing over the non-dominated points, found here by comparing every pair
    front2 = [p for p in two if not any(q[0] <= p[0] and q[1] >= p[1] and q != p for q in two)]
    front3 = [p for p in three if not any(q[0] <= p[0] and q[1] >= p[1] and q[2] <= p[2] and q != p for q in three)]
    assert area == pytest.approx(slicing(front2, (1.0, 0.0)), abs=1e-12, rel=0)
    assert volume == pytest.approx(slicing(front3, (1.0, 0.0, 1.0)), abs=1e-12, rel=0)


# ---------------------------------------------------------------------------------------------- zero and negative
def test_a_free_front_gets_its_accuracy_as_hypervolume_and_keeps_every_point():
    ref = reference_point([(0.0, 0.5), (0.0, 0.75)])
    assert ref == (1.0, 0.0)  # before: (0.0, 0.0), and every hypervolume was 0
    assert hypervolume([(0.0, 0.5), (0.0, 0.75)], ref) == 0.75
    ref3 = reference_point([(0.0, 0.5, 0.0)], latency=True)
    assert ref3 == (1.0, 0.0, 1.0) and hypervolume([(0.0, 0.5, 0.0)], ref3) == 0.5
    # a sweep where every P cost nothing: each reference point alone still scores its accuracy
    pts = [SweepPoint(Preference(name=f"p{i}"), 1, acc, 0.0, 0.0, {}) for i, acc in enumerate((0.25, 0.5))]
    hv = SweepResult("free", pts, {"base": (0.0, 0.125, 0.0)}).hypervolumes()
    assert hv == {"free": 0.5, "base": 0.125, "baselines": 0.125}


def test_the_dearest_point_encloses_area():
    ref = reference_point([(1.0, 0.5), (2.0, 1.0)])
    assert ref == (2.2, 0.0)
    assert hypervolume([(2.0, 1.0)], ref) == pytest.approx(0.2 * 1.0, abs=1e-15)


def test_negative_costs_and_latencies_are_refused():
    with pytest.raises(ValueError, match=r"^hypervolume: cost -5\.0 is negative"):
        hypervolume([(-5.0, 1.0), (1.0, 0.5)], (2.0, 0.0))
    with pytest.raises(ValueError, match=r"^reference_point: latency -1\.0 is negative"):
        reference_point([(1.0, 0.5, -1.0)], latency=True)
    with pytest.raises(ValueError, match="margin"):
        reference_point([(1.0, 0.5)], margin=float("nan"))


# ---------------------------------------------------------------------------------------------- labels, weights, grid
def test_weights_that_differ_past_the_sixth_digit_keep_distinct_labels():
    grid = preference_grid(cost=[0.1234567, 0.1234568, 0.5])
    assert [p.name for p in grid] == ["a1 c0.1234567 l0", "a1 c0.1234568 l0", "a1 c0.5 l0"]
    assert [p.cost for p in grid] == [0.1234567, 0.1234568, 0.5]  # before: two of them collapsed into one
    tools = preference_grid(cost=[0.0], tools={"calc": [1e-7, 1.00000001e-7]})
    assert [p.name for p in tools] == ["a1 c0 l0 calc+1e-07", "a1 c0 l0 calc+1.00000001e-07"]


@pytest.mark.parametrize("make, name", [
    (lambda: preference_grid(cost=[0.5, float("nan")]), "cost"),
    (lambda: preference_grid(outcome=[float("inf")]), "outcome"),
    (lambda: preference_grid(tools={"calc": [float("nan")]}), "calc"),
    (lambda: preference_grid(latency=["fast"]), "latency"),
    (lambda: preference_sample(2, cost=(0.0, float("nan"))), "cost"),
])
def test_a_weight_that_is_not_a_number_is_one_line_naming_it(make, name):
    with pytest.raises(ValueError) as e:
        make()
    assert str(e.value).startswith(f"preference weight {name}: ") and "\n" not in str(e.value)


def test_the_grid_is_capped_before_anything_is_built():
    assert len(preference_grid(cost=list(range(100)), latency=list(range(100)))) == MAX_GRID == 10_000
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=r"^a preference grid of 1000000 preferences \(1 × 1000 × 1000\) is more "
                                         r"than MAX_GRID = 10000"):
        preference_grid(cost=list(range(1000)), latency=list(range(1000)))
    assert time.perf_counter() - t0 < 5  # refused before the million preferences are made
