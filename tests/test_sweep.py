"""Sweeping P: the front and the hypervolume against hand computations and an independent route
(inclusion–exclusion over the boxes, in exact fractions), and a sweep end to end on a written policy
whose choice depends on P."""

from __future__ import annotations

import itertools
import json
from fractions import Fraction

import pytest

from orchlib.cards import Latency, Price
from orchlib.chat import render_call
from orchlib.engines.scripted import ScriptedEngine
from orchlib.evaluate import under_profiles
from orchlib.models import build_tokenizer
from orchlib.rollout import RolloutConfig
from orchlib.sweep import (SweepResult, hypervolume, pareto_front, preference_grid, preference_router,
                           preference_sample, reference_point, sweep)
from orchlib.tasks import Golden, Preference, Task
from orchlib.tools import Toolbox
from orchlib.tools.function import FunctionTool
from orchlib.trajectory import ToolCall

# (cost, accuracy): C is dominated by B; the front is A, B, D.
POINTS = [(1.0, 0.5), (2.0, 0.75), (3.0, 0.25), (4.0, 1.0)]


def union_by_inclusion_exclusion(points, reference) -> Fraction:
    """The measure of the union of the boxes between each point and the reference, as the signed sum
    of the measures of every intersection of boxes (exact, in fractions): no slicing, no sorting."""
    flip = [tuple(Fraction(x) * (-1 if j == 1 else 1) for j, x in enumerate(p)) for p in points]
    bound = tuple(Fraction(x) * (-1 if j == 1 else 1) for j, x in enumerate(reference))
    total = Fraction(0)
    for k in range(1, len(flip) + 1):
        for subset in itertools.combinations(flip, k):
            corner = [max(p[j] for p in subset) for j in range(len(bound))]
            size = Fraction(1)
            for c, b in zip(corner, bound):
                size *= max(b - c, Fraction(0))
            total += size if k % 2 else -size
    return total


def test_two_dimensional_hypervolume_is_the_sum_of_rectangles_by_hand():
    # Reference (5, 0). By cost: A holds 0.5 from 1 to 2, B 0.75 from 2 to 4, D 1.0 from 4 to 5.
    by_hand = 0.5 * 1 + 0.75 * 2 + 1.0 * 1
    assert by_hand == 3.0
    assert hypervolume(POINTS, (5.0, 0.0)) == 3.0
    assert hypervolume(POINTS, (5.0, 0.0)) == float(union_by_inclusion_exclusion(POINTS, (5, 0)))
    # a dominated point adds nothing; a point at or beyond the reference adds nothing
    assert hypervolume([p for i, p in enumerate(POINTS) if i != 2], (5.0, 0.0)) == 3.0
    assert hypervolume(POINTS + [(6.0, 1.0), (0.5, 0.0)], (5.0, 0.0)) == 3.0
    assert hypervolume([], (5.0, 0.0)) == 0.0


def test_front_is_the_non_dominated_points_by_cost():
    assert pareto_front(POINTS) == [0, 1, 3]
    # with latency C is the fastest, so nothing dominates it any more
    with_latency = [(1.0, 0.5, 2.0), (2.0, 0.75, 2.0), (3.0, 0.25, 0.5), (4.0, 1.0, 2.0), (4.0, 1.0, 3.0)]
    assert pareto_front(with_latency, latency=True) == [0, 1, 2, 3]
    # brute force, written out: i is kept when no j is at least as good everywhere and better somewhere
    keep = [i for i, p in enumerate(with_latency)
            if not any(q[0] <= p[0] and q[1] >= p[1] and q[2] <= p[2] and q != p for q in with_latency)]
    assert sorted(pareto_front(with_latency, latency=True)) == keep


def test_three_dimensional_hypervolume_by_hand_and_by_inclusion_exclusion():
    # reference (4, 0, 4): P1's box is 3 × 1 × 1 = 3, P2's 1 × 0.5 × 3 = 1.5, their overlap 1 × 0.5 × 1
    pts = [(1.0, 1.0, 3.0), (3.0, 0.5, 1.0)]
    assert hypervolume(pts, (4.0, 0.0, 4.0)) == 3 + 1.5 - 0.5
    lattice = [(i, ((3 * i) % 5) / 4, ((2 * i) % 7) / 2) for i in range(1, 7)]  # written, not sampled
    ref = (8, 0, 4)
    assert hypervolume(lattice, ref) == float(union_by_inclusion_exclusion(lattice, ref))
    lattice2 = [(c, a) for c, a, _ in lattice]
    assert hypervolume(lattice2, ref[:2]) == float(union_by_inclusion_exclusion(lattice2, ref[:2]))


def test_reference_point_and_bad_input():
    assert reference_point(POINTS, margin=0.0) == (4.0, 0.0)
    assert reference_point([(1.0, 0.5, 2.0)], [(2.0, 1.0, 8.0)], latency=True, margin=0.0) == (2.0, 0.0, 8.0)
    with pytest.raises(ValueError, match="cost, accuracy"):
        hypervolume(POINTS, (1.0,))
    with pytest.raises(ValueError, match="finite"):
        hypervolume([(float("nan"), 1.0)], (5.0, 0.0))


def test_preference_grid_and_sample():
    grid = preference_grid(cost=[0, 0.5], latency=[0, 1], tools={"calc": [0, -1]})
    assert len(grid) == 8
    assert grid[0].name == "a1 c0 l0" and grid[0].tools == {}
    assert grid[-1].name == "a1 c0.5 l1 calc-1" and grid[-1].tools == {"calc": -1.0}
    drawn = preference_sample(6, seed=3, cost=(0.0, 2.0), latency=(0.5, 1.0))
    again = preference_sample(6, seed=3, cost=(0.0, 2.0), latency=(0.5, 1.0))
    assert [p.name for p in drawn] == [p.name for p in again]
    assert all(0.0 <= p.cost <= 2.0 and 0.5 <= p.latency <= 1.0 and p.outcome == 1.0 for p in drawn)
    assert len({p.name for p in drawn}) == len(drawn)
    with pytest.raises(ValueError):
        preference_grid(cost=[])
    with pytest.raises(ValueError, match="ends below"):
        preference_sample(2, cost=(1.0, 0.0))


# ---------------------------------------------------------------------------------------------- end to end
def dear(question: str = "") -> str:
    """Always right, dear and slow.

    Args:
        question: ignored
    """
    return "yes"


def cheap(question: str = "") -> str:
    """Always wrong, cheap and fast.

    Args:
        question: ignored
    """
    return "no"


TOK = build_tokenizer()
TOOLBOX = Toolbox([
    FunctionTool.from_function(dear, final=True, price=Price(per_call=1.0), latency=Latency(seconds=4.0)),
    FunctionTool.from_function(cheap, final=True, price=Price(per_call=0.25), latency=Latency(seconds=1.0))])
TASKS = [Task(id=f"q{i}", prompt=f"Question {i}?", answer="yes", checker="exact",
              golden=Golden(calls=[ToolCall(name="dear")], alternatives=[[ToolCall(name="cheap")]]))
         for i in range(2)]
# No policy tokens priced or timed: every cost and latency is a tool's, exact in binary.
CONFIG = RolloutConfig(max_turns=2, max_new_tokens=64, policy_price_in=0.0, policy_price_out=0.0,
                       policy_seconds_per_token=0.0, tool_latency="declared")


def reads_p(text: str, turn: int) -> str:
    """A written policy that reads P: the dear tool when cost does not count, else the cheap one."""
    return render_call(ToolCall(name="dear" if "cost=0," in text else "cheap"))


def test_sweep_reports_one_point_per_p_and_compares_hypervolumes():
    prefs = preference_grid(cost=[0, 1])
    result = sweep(ScriptedEngine(TOK, reads_p), TASKS, TOOLBOX, prefs, config=CONFIG, name="reader",
                   references={"oracle": (1.0, 1.0, 4.0), "cheapest": (0.25, 0.0, 1.0)})
    assert isinstance(result, SweepResult) and result.name == "reader"
    a, b = result.points
    assert (a.preference.name, a.n, a.accuracy, a.cost_usd, a.latency_s, a.tool_share) == ("a1 c0 l0", 2, 1.0, 1.0,
                                                                                            4.0, {"dear": 1.0})
    assert (b.preference.name, b.accuracy, b.cost_usd, b.latency_s, b.tool_share) == ("a1 c1 l0", 0.0, 0.25, 1.0,
                                                                                      {"cheap": 1.0})
    assert {t.task_id for t in result.report.trajectories} == {"q0@a1 c0 l0", "q1@a1 c0 l0", "q0@a1 c1 l0",
                                                               "q1@a1 c1 l0"}
    assert result.front() == [b, a]
    # against reference (2, 0): the sweep's (1, 1) encloses 1 × 1; its (0.25, 0) encloses nothing
    hv = result.hypervolumes(reference=(2.0, 0.0))
    assert hv == {"reader": 1.0, "oracle": 1.0, "cheapest": 0.0, "baselines": 0.0}
    assert result.reference() == pytest.approx((1.1, 0.0))
    hv3 = result.hypervolumes(reference=(2.0, 0.0, 8.0), latency=True)
    assert hv3["reader"] == 1.0 * 1.0 * 4.0 and hv3["oracle"] == 4.0
    table = result.table()
    assert "a1 c0 l0" in table and "[oracle]" in table and "dear 100%" in table


def test_sweep_figure_points_and_hover():
    result = sweep(ScriptedEngine(TOK, reads_p), TASKS, TOOLBOX, preference_grid(cost=[0, 1]), config=CONFIG,
                   name="reader", references={"oracle": (1.0, 1.0, 4.0)})
    fig = result.figure()
    points = fig.data[0]
    assert list(points.x) == [1.0, 0.25] and list(points.y) == [1.0, 0.0]
    assert list(points.marker.color) == [4.0, 1.0]  # coloured by latency
    assert "Preference (a1 c0 l0)" in points.text[0] and "tool mix: dear 100%" in points.text[0]
    assert "$1.00000 per task" in points.text[0] and "4 s per task" in points.text[0]
    front = fig.data[1]
    assert list(front.x) == [0.25, 1.0]
    oracle = fig.data[2]
    assert oracle.name == "oracle" and list(oracle.x) == [1.0] and oracle.marker.symbol == "star"
    json.loads(fig.to_json())


def test_sweep_refuses_repeated_names():
    with pytest.raises(ValueError, match="used twice"):
        sweep(ScriptedEngine(TOK, reads_p), TASKS, TOOLBOX, [Preference(name="x"), Preference(name="x", cost=1)],
              config=CONFIG)


def test_preference_router_picks_the_route_p_scores_best():
    prefs = preference_grid(cost=[0, 0.5, 2])
    shown = under_profiles(TASKS, prefs)
    router = preference_router(shown, TOOLBOX, TOK, calibration=TASKS, config=CONFIG)
    # normalised over the two routes: dear (acc 1, cost 1, lat 1) and cheap (0, 0, 0);
    # dear scores 1 - P.cost, cheap 0; a tie goes to the cheaper route
    assert [router.plan[t.id] for t in shown if t.id.startswith("q0@")] == ["dear", "dear", "cheap"]
    result = sweep(router, TASKS, TOOLBOX, prefs, config=CONFIG)
    assert [(p.accuracy, p.cost_usd) for p in result.points] == [(1.0, 1.0), (1.0, 1.0), (0.0, 0.25)]
