"""Figures: the numbers each figure draws are checked against counts and sums made here by hand."""

from __future__ import annotations

from types import SimpleNamespace

import plotly.graph_objects as go
import pytest

from orchlib import viz
from orchlib.reward import Reward
from orchlib.trajectory import Observation, ToolCall, Trajectory, Turn


def traj(calls: dict[str, int], outcome=1.0, cost=0.0, latency=0.0, profile="accuracy", category="math", i=0):
    return Trajectory(task_id=f"t{i}", group_index=i, calls=calls, outcome=outcome, cost_usd=cost, latency_s=latency,
                      preference={"name": profile}, category=category)


POLICIES = {
    "cheap": [traj({"calculator": 2}), traj({"calculator": 1, "search": 1}), traj({})],
    "dear": [traj({"gpt": 1}), traj({"gpt": 2, "search": 1}), traj({"gpt": 1})],
}


def bars(fig: go.Figure) -> dict[str, dict[str, float]]:
    """tool → x → bar height."""
    return {t.name: dict(zip(t.x, t.y)) for t in fig.data if t.type == "bar"}


def test_tool_distribution_per_policy_shares_are_call_counts_over_all_calls():
    fig = viz.tool_distribution(POLICIES)
    got = bars(fig)
    # cheap: calculator 3, search 1 (4 calls); dear: gpt 4, search 1 (5 calls)
    assert got["calculator"] == {"cheap": 3 / 4, "dear": 0.0}
    assert got["search"] == {"cheap": 1 / 4, "dear": 1 / 5}
    assert got["gpt"] == {"cheap": 0.0, "dear": 4 / 5}
    assert fig.layout.barmode == "stack"
    for policy in POLICIES:
        assert sum(h[policy] for h in got.values()) == pytest.approx(1.0)


def test_tool_distribution_means_counts_and_grouping_by_profile():
    mean = bars(viz.tool_distribution(POLICIES, value="mean"))
    assert mean["calculator"]["cheap"] == pytest.approx(3 / 3) and mean["gpt"]["dear"] == pytest.approx(4 / 3)
    count = bars(viz.tool_distribution(POLICIES, value="count"))
    assert count["search"] == {"cheap": 1, "dear": 1}
    trajs = [traj({"a": 1}, profile="fast"), traj({"a": 1, "b": 3}, profile="thrifty"), traj({"b": 1}, profile="fast")]
    got = bars(viz.tool_distribution(trajs, by="profile", value="count"))
    assert got == {"a": {"fast": 1, "thrifty": 1}, "b": {"fast": 1, "thrifty": 3}}
    by_cat = bars(viz.tool_distribution([traj({"a": 1}, category="x"), traj({"a": 2}, category="y")], by="category",
                               value="count"))
    assert by_cat == {"a": {"x": 1, "y": 2}}
    with pytest.raises(ValueError):
        viz.tool_distribution(trajs, by="colour")


def test_tool_distribution_accepts_reports_and_keeps_given_colours():
    report = SimpleNamespace(trajectories=POLICIES["cheap"])
    fig = viz.tool_distribution({"r": report}, colors={"calculator": "#000000", "search": "#ffffff"})
    assert bars(fig)["calculator"] == {"r": 0.75}
    assert {t.name: t.marker.color for t in fig.data} == {"calculator": "#000000", "search": "#ffffff"}


HISTORY = [
    {"step": 1.0, "reward": 0.1, "reward/accuracy": 0.2, "reward/thrift": -0.1, "share/a": 1.0, "calls/a": 2.0,
     "profile/fast/reward": 0.3},
    {"step": 2.0, "reward": 0.4, "reward/accuracy": 0.5, "reward/thrift": -0.1, "share/a": 0.25, "share/b": 0.75,
     "calls/a": 0.5, "calls/b": 1.5, "accuracy": 0.5},
]


def test_tool_mix_over_steps_reads_share_and_fills_missing_tools_with_zero():
    fig = viz.tool_mix_over_steps(HISTORY)
    got = {t.name: list(t.y) for t in fig.data}
    assert got == {"a": [1.0, 0.25], "b": [0.0, 0.75]}
    assert all(list(t.x) == [1.0, 2.0] for t in fig.data) and all(t.stackgroup for t in fig.data)
    calls = {t.name: list(t.y) for t in viz.tool_mix_over_steps(HISTORY, value="calls").data}
    assert calls == {"a": [2.0, 0.5], "b": [0.0, 1.5]}


def test_tool_mix_over_steps_sums_names_outside_the_toolbox_into_unknown():
    history = [{"step": 1.0, "share/a": 0.5, "share/{": 0.25, "share/calc": 0.25}, {"step": 2.0, "share/a": 1.0}]
    got = {t.name: list(t.y) for t in viz.tool_mix_over_steps(history, tools=["a", "b"]).data}
    assert got == {"a": [0.5, 1.0], "b": [0.0, 0.0], "unknown": [0.5, 0.0]}
    assert "unknown" not in {t.name for t in viz.tool_mix_over_steps(HISTORY, tools=["a", "b"]).data}


def test_tool_mix_over_steps_takes_step_reports_and_trainers():
    reports = [SimpleNamespace(metrics=m) for m in HISTORY]
    trainer = SimpleNamespace(history=HISTORY)
    for source in (reports, trainer):
        assert [list(t.y) for t in viz.tool_mix_over_steps(source).data] == [[1.0, 0.25], [0.0, 0.75]]


def test_reward_curves_plot_reward_terms_profiles_and_extra_keys():
    fig = viz.reward_curves(HISTORY + [{"step": 3.0, "reward": 0.6, "reward/reward": 0.6}], profiles=True,
                            keys=("accuracy",))
    got = {t.name: list(t.y) for t in fig.data}
    assert fig.data[0].name == "reward" and got["reward"] == [0.1, 0.4, 0.6]
    assert got["accuracy"] == [None, 0.5, None] and got["thrift"] == [-0.1, -0.1, None]
    assert got["reward (fast)"] == [0.3, None, None]
    assert set(got) == {"reward", "accuracy", "thrift", "reward (fast)"}  # no duplicate "reward/reward" line
    assert list(fig.data[0].x) == [1.0, 2.0, 3.0]
    assert [t.name for t in viz.reward_curves(HISTORY, terms=False).data] == ["reward"]


def test_cost_accuracy_points_and_frontier_by_hand():
    pts = {"a": (0.01, 0.5), "b": (0.02, 0.9), "c": (0.03, 0.8), "d": (0.005, 0.2)}
    fig = viz.cost_accuracy(pts)
    scatter, front = fig.data
    assert dict(zip(scatter.text, zip(scatter.x, scatter.y))) == pts
    # c is dearer and less accurate than b; every other point is best at its cost
    assert list(front.text) == ["d", "a", "b"] and list(front.x) == [0.005, 0.01, 0.02]
    assert len(viz.cost_accuracy(pts, show_frontier=False).data) == 1


def test_cost_accuracy_from_trajectories_and_reports():
    trajs = [traj({}, outcome=1.0, cost=0.01), traj({}, outcome=0.0, cost=0.03)]
    report = SimpleNamespace(metrics={"overall": {"cost_usd": 0.5, "accuracy": 0.25}})
    fig = viz.cost_accuracy({"t": trajs, "r": report}, log_cost=True)
    pts = dict(zip(fig.data[0].text, zip(fig.data[0].x, fig.data[0].y)))
    assert pts["t"] == pytest.approx((0.02, 0.5)) and pts["r"] == (0.5, 0.25)
    assert fig.layout.xaxis.type == "log"


def timeline_trajectory() -> Trajectory:
    turn1 = Turn(text="two calls", calls=[ToolCall(name="calc"), ToolCall(name="search")],
                 observations=[Observation(content="4", tool="calc", latency_s=1.0, cost_usd=0.0),
                               Observation(content="doc", tool="search", latency_s=2.0, cost_usd=0.01)],
                 gen_latency_s=0.5, latency_s=2.5, cost_usd=0.0101, tokens_out=10)
    malformed = Observation(content="Error", error="bad", error_kind="malformed_call")
    turn2 = Turn(text="<tool_call>oops", observations=[malformed],
                 gen_latency_s=0.25, latency_s=0.25, cost_usd=0.0002, tokens_out=5)
    turn3 = Turn(text="", calls=[ToolCall(name="calc"), ToolCall(name="calc")],
                 observations=[Observation(content="1", tool="calc", latency_s=0.1),
                               Observation(content="", tool="calc", latency_s=0.3, error="boom",
                                           error_kind="tool_failure", cost_usd=0.002)],
                 gen_latency_s=0.2, latency_s=0.5, cost_usd=0.0021)
    return Trajectory(task_id="x", turns=[turn1, turn2, turn3], outcome=1.0, cost_usd=0.0124, latency_s=3.25)


def test_timeline_bars_start_after_generation_and_turns_follow_each_other():
    fig = viz.timeline(timeline_trajectory())
    bar = fig.data[0]
    rows = {y: (b, x) for y, b, x in zip(bar.y, bar.base, bar.x)}
    # turn 1 starts at 0; its two calls run side by side after the 0.5 s of generation
    assert rows["turn 1 · policy"] == (0.0, 0.5)
    assert rows["turn 1 · calc"] == (0.5, 1.0) and rows["turn 1 · search"] == (0.5, 2.0)
    # turn 2 starts when turn 1 ended (2.5 s); turn 3 after turn 2's 0.25 s
    assert rows["turn 2 · policy"] == (2.5, 0.25)
    assert rows["turn 3 · policy"] == (2.75, 0.2)
    assert rows["turn 3 · calc"] == (2.95, 0.1) and rows["turn 3 · calc (2)"] == pytest.approx((2.95, 0.3))
    costs = {y: c[0] for y, c in zip(bar.y, bar.customdata)}
    assert costs["turn 1 · search"] == 0.01 and costs["turn 1 · policy"] == pytest.approx(0.0001)
    colors = dict(zip(bar.y, bar.marker.color))
    assert colors["turn 3 · calc (2)"] == "#d62728" != colors["turn 3 · calc"]  # a failed call is red
    marks = fig.data[1]  # the malformed call of turn 2: no tool ran, a cross where calls would start
    assert marks.name == "error" and list(marks.x) == [2.75] and list(marks.y) == ["turn 2 · policy"]


def test_explain_figure_bars_are_the_contributions_and_add_up_to_the_reward():
    reward = Reward.from_string("name: r\nterms:\n  acc: outcome\n  spend: -10 * cost\nreward: acc + spend")
    group = [traj({}, outcome=1.0, cost=0.01), traj({}, outcome=0.0, cost=0.02), traj({}, outcome=1.0, cost=0.0)]
    fig = viz.explain_figure(reward.explain(group), labels=["a", "b", "c"])
    got = {t.name: list(t.y) for t in fig.data}
    assert got["acc"] == [1.0, 0.0, 1.0]
    assert got["spend"] == pytest.approx([-0.1, -0.2, 0.0])
    assert got["reward"] == pytest.approx([0.9, -0.2, 1.0])
    assert fig.layout.barmode == "relative" and list(fig.data[0].x) == ["a", "b", "c"]
    with pytest.raises(ValueError):
        viz.explain_figure(reward.explain(group), labels=["a"])


def test_every_figure_serialises_to_json():
    figs = [viz.tool_distribution(POLICIES), viz.tool_mix_over_steps(HISTORY), viz.reward_curves(HISTORY),
            viz.cost_accuracy({"a": (0.1, 0.5)}), viz.timeline(timeline_trajectory()),
            viz.explain_figure(Reward.from_string("outcome").explain([traj({})]))]
    for fig in figs:
        assert isinstance(fig, go.Figure) and fig.to_json()


def test_push_and_share_draws_each_profiles_share_and_push_with_gaps_where_the_tool_was_not_called():
    history = [{"step": 1.0, "profile/accuracy/share/gen": 0.5, "profile/accuracy/advantage/gen": 0.4,
                "profile/thrifty/share/gen": 0.25, "profile/thrifty/advantage/gen": -0.3},
               {"step": 2.0, "profile/accuracy/share/gen": 0.75, "profile/accuracy/advantage/gen": 0.1,
                "profile/thrifty/share/cheap": 1.0}]  # no thrifty rollout called gen: share 0, no push
    fig = viz.push_and_share(history, "gen")
    top = {t.name: list(t.y) for t in fig.data if t.yaxis == "y"}
    bottom = {t.name: list(t.y) for t in fig.data if t.yaxis == "y2"}
    assert top == {"accuracy": [0.5, 0.75], "thrifty": [0.25, 0.0]}
    assert bottom == {"accuracy": [0.4, 0.1], "thrifty": [-0.3, None]}
    assert [list(t.x) for t in fig.data] == [[1.0, 2.0]] * 4
    assert sum(t.showlegend is not False for t in fig.data) == 2  # one legend entry per profile
