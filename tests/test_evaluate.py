"""Evaluation: metrics, baselines (the oracle against brute force), APGR, AIQ, frontier — all against
values computed by hand or by an independent route."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from orchlib.env import Environment
from orchlib.baselines import RouteResult, choose, make_baselines, route_stats, routes, try_routes
from orchlib.chat import render_call
from orchlib.engines.scripted import ScriptedEngine
from orchlib.envs import make_suite
from orchlib.evaluate import (EvalReport, Undefined, UndefinedMetricError, aiq, apgr, compare, compute_metrics,
                              evaluate, frontier, pgr, preference_adherence, reward_across, summarize)
from orchlib.reward import Reward
from orchlib.tasks import PROFILES, Task
from orchlib.trajectory import Observation, ToolCall, Trajectory, Turn, read_jsonl


# ---------------------------------------------------------------------------------------------- metrics
def _traj(task_id, category, profile, outcome, cost, latency, calls, errors, observations):
    return Trajectory(task_id=task_id, category=category, preference=PROFILES[profile].model_dump(),
                      outcome=outcome, cost_usd=cost, latency_s=latency, calls=calls, errors=errors,
                      finish_reason="answer", turns=[Turn(text="", observations=observations)])


HAND = [
    _traj("t1", "a", "accuracy", 1.0, 0.01, 2.0, {"calc": 1}, {}, [Observation(content="4", tool="calc")]),
    _traj("t2", "a", "thrifty", 0.0, 0.03, 4.0, {"calc": 2, "gen": 1}, {"timeout": 1},
          [Observation(content="x", tool="gen", error="slow", error_kind="timeout")]),
    _traj("t3", "b", "thrifty", 1.0, 0.0, 0.0, {}, {"malformed_call": 1},
          [Observation(content="bad", error="bad", error_kind="malformed_call")]),
]


def test_summary_by_hand():
    s = summarize(HAND, rewards=[1.0, 0.0, 0.5])
    assert s["n"] == 3
    assert s["accuracy"] == pytest.approx(2 / 3)
    assert s["cost_usd"] == pytest.approx(0.04 / 3)
    assert s["latency_s"] == pytest.approx(2.0)
    assert s["calls_per_task"] == pytest.approx(4 / 3)
    assert s["calls"] == {"calc": {"count": 3, "mean": 1.0, "share": 0.75},
                          "gen": {"count": 1, "mean": pytest.approx(1 / 3), "share": 0.25}}
    assert s["errors"] == {"total": 2, "per_task": pytest.approx(2 / 3), "tasks_with_errors": pytest.approx(2 / 3),
                           "by_kind": {"malformed_call": 1, "timeout": 1}, "by_tool": {"(policy)": 1, "gen": 1}}
    assert s["reward"] == pytest.approx(0.5)
    with pytest.raises(ValueError):
        summarize(HAND, rewards=[1.0])


def test_metrics_by_category_and_profile():
    m = compute_metrics(HAND, rewards=[1.0, 0.0, 0.5])
    assert m["by_category"]["a"]["accuracy"] == 0.5 and m["by_category"]["b"]["accuracy"] == 1.0
    assert m["by_profile"]["thrifty"]["n"] == 2 and m["by_profile"]["thrifty"]["reward"] == pytest.approx(0.25)
    assert m["by_profile"]["accuracy"]["cost_usd"] == pytest.approx(0.01)


def test_report_table_json_and_save(tmp_path):
    rep = EvalReport("hand", compute_metrics(HAND), HAND)
    table = rep.table()
    assert table.splitlines()[0] == "policy: hand"
    overall = next(line for line in table.splitlines() if line.startswith("overall"))
    assert overall.split()[:7] == ["overall", "3", "0.667", "0.01333", "2.00", "1.33", "2"]
    assert "calc:75% gen:25%" in overall
    folder = rep.save(tmp_path / "out")
    assert json.loads((folder / "metrics.json").read_text())["metrics"]["overall"]["n"] == 3
    assert read_jsonl(folder / "trajectories.jsonl") == HAND
    assert (folder / "table.txt").read_text().strip() == table
    assert "hand" in compare({"hand": rep}, extra={"x": {"hand": 0.25}})


def test_reward_across_policies_by_hand():
    """ToolOrchestra reward over a group of two policies' runs of one task (thrifty: cost weight 1)."""
    cheap = _traj("t", "a", "thrifty", 1.0, 0.01, 1.0, {"calc": 1}, {}, [])
    dear = _traj("t", "a", "thrifty", 1.0, 0.03, 1.0, {"gen": 1}, {}, [])
    wrong = _traj("t", "a", "thrifty", 0.0, 0.00, 1.0, {}, {}, [])
    runs = [("cheap", cheap), ("dear", dear), ("wrong", wrong)]
    reps = {n: EvalReport(n, compute_metrics([t]), [t]) for n, t in runs}
    got = reward_across(reps, Reward.load("rewards/toolorchestra.yaml"))
    # outcome minmax over (1, 1, 0) = (1, 1, 0); -cost minmax over (-.01, -.03, 0) = (2/3, 0, 1);
    # latency and tool terms are 0 (equal latencies; thrifty has no tool weights); wrong earns 0.
    assert got == {"cheap": pytest.approx(1 + 2 / 3), "dear": pytest.approx(1.0), "wrong": 0.0}


# ---------------------------------------------------------------------------------------------- frontier
def test_frontier_by_hand():
    pts = {"a": (0, .5), "b": (1, .6), "c": (1, .5), "d": (2, 1.0), "e": (3, 1.0), "f": (2.5, .9)}
    assert frontier(pts) == ["a", "b", "d"]
    assert frontier([(1, .5), (0, .5)]) == [1]


def test_pgr_and_apgr_by_hand():
    assert pgr(0.8, 0.6, 1.0) == pytest.approx(0.5)
    same = pgr(0.5, 0.7, 0.7)  # no gap: a value that says why, not an exception, ±inf or NaN
    assert isinstance(same, Undefined) and "no gap to recover" in repr(same)
    with pytest.raises(UndefinedMetricError, match="no gap to recover"):  # a NaN would pass this check silently
        assert not abs(same - 0.5) > 0.01
    for use in (float, bool, lambda v: v < 1, lambda v: v == 0.5, lambda v: 1 - v):
        with pytest.raises(UndefinedMetricError):
            use(same)
    assert f"{same:.3f}|{same:>10.2f}" == "undefined| undefined" and same == pgr(0.4, 0.7, 0.7)
    # Points (0, .6), (.5, .9), (1, 1): PGR (0, .75, 1); trapezoids .5*(0+.75)/2 + .5*(.75+1)/2 = .625.
    assert apgr([(1, 1.0), (0, 0.6), (0.5, 0.9)], 0.6, 1.0) == pytest.approx(0.625)
    # The straight line from weak to strong (a random router) recovers half the gap on average.
    assert apgr([(0, 0.6), (1, 1.0)], 0.6, 1.0) == pytest.approx(0.5)
    # Over a part of the range: mean PGR there, (.25 + .5) / 2.
    assert apgr([(0.25, 0.7), (0.5, 0.8)], 0.6, 1.0) == pytest.approx(0.375)
    assert apgr([(0.3, 0.8)], 0.6, 1.0) == pytest.approx(0.5)  # one operating point: its PGR
    with pytest.raises(ValueError):
        apgr([(1.5, 0.8)], 0.6, 1.0)


def test_aiq_by_hand():
    # (1, .6) lies under the chord from (0, .5) to (2, 1): area of the trapezoid 2*(.5+1)/2 = 1.5, / 2.
    assert aiq([(0, .5), (1, .6), (2, 1.0)]) == pytest.approx(0.75)
    # Past the most accurate point the curve stays flat: (.5+.9)/2 + .9 = 1.6, / 2.
    assert aiq([(0, .5), (1, .9), (2, .8)]) == pytest.approx(0.8)
    # A common, wider range extends the flat part: (.7 + .9 * 3) / 4.
    assert aiq({"x": (0, .5), "y": (1, .9)}, cost_range=(0, 4)) == pytest.approx(0.85)
    # Same cost twice: the better one counts. A single cost: its accuracy.
    assert aiq([(0, .2), (0, .5), (1, .5)]) == pytest.approx(0.5)
    assert aiq([(3, .4)]) == pytest.approx(0.4)
    with pytest.raises(ValueError):
        aiq([(1, .5), (2, .6)], cost_range=(0, 2))


def test_aiq_matches_a_dense_numeric_integral():
    rng = np.random.default_rng(0)
    pts = [(float(c), float(a)) for c, a in zip(rng.uniform(0, 5, 12), rng.uniform(0, 1, 12))]
    grid = np.linspace(min(c for c, _ in pts), max(c for c, _ in pts), 20001)
    # Independent route: best accuracy reachable by mixing two points with cost <= c (brute force).
    best = np.full_like(grid, -np.inf)
    for (c1, a1), (c2, a2) in itertools.product(pts, pts):
        if c1 <= c2:
            inside = (grid >= c1) & (grid <= c2)
            w = (grid[inside] - c1) / (c2 - c1) if c2 > c1 else np.zeros(inside.sum())
            best[inside] = np.maximum(best[inside], a1 + w * (a2 - a1))
    best = np.maximum.accumulate(best)
    assert aiq(pts) == pytest.approx(float(np.trapezoid(best, grid) / (grid[-1] - grid[0])), abs=1e-4)


# ---------------------------------------------------------------------------------------------- baselines
def test_choose_by_hand():
    t = Task(id="t", prompt="p", category="c")
    stats = {"c": {"a": {"accuracy": 0.9, "cost_usd": 0.5}, "b": {"accuracy": 0.9, "cost_usd": 0.1},
                   "z": {"accuracy": 0.2, "cost_usd": 0.0}}}
    assert choose("strongest", t, ["a", "b", "z"], stats) == "b"   # tie on accuracy: the cheaper
    assert choose("cheapest", t, ["a", "b", "z"], stats) == "z"
    assert choose("strongest", t, ["a", "q"], stats) == "a"        # a route never measured ranks last
    trial = {"a": RouteResult(1.0, 0.5, 1.0), "b": RouteResult(0.0, 0.1, 1.0), "z": RouteResult(1.0, 0.5, 0.5)}
    assert choose("oracle", t, ["a", "b", "z"], stats, trial) == "z"  # right; same cost; faster
    assert choose("random", t, ["a", "b"], stats, seed=3) == choose("random", t, ["b", "a"], stats, seed=3)
    with pytest.raises(KeyError):
        choose("psychic", t, ["a"], stats)


@pytest.fixture(scope="module")
def tokenizer():
    from orchlib.models import build_tokenizer

    return build_tokenizer()


@pytest.fixture(scope="module")
def small():
    suite = make_suite(seed=0, n_train=5, n_test=10)
    return suite, suite.toolbox()


@pytest.fixture(scope="module")
def trials(small, tokenizer):
    suite, box = small
    return try_routes(suite.test, box, tokenizer)


def test_routes_of_each_category(small):
    suite, box = small
    got = {t.category: sorted(routes(t, box.cards)) for t in suite.test}
    assert got["arithmetic"] == ["calculator", "generalist", "python", "specialist"]
    assert got["lookup"] == ["generalist", "search", "specialist"]
    assert got["gsm8k"] == ["gpt4", "mixtral"]
    assert got["hard"] == ["generalist", "specialist"]
    assert len(got["shop"]) == 1 and got["shop"][0].startswith("shop_")


def test_every_golden_route_is_right(trials):
    for t in trials.tasks:
        golden = "+".join(dict.fromkeys(c.name for c in t.golden.calls))
        if t.category in ("arithmetic", "lookup", "shop"):  # exact tools: the golden route must work
            assert trials.results[t.id][golden].outcome == 1.0, t.id
        for res in trials.results[t.id].values():
            assert res.cost_usd > 0 and res.latency_s > 0


def test_oracle_against_brute_force(small, tokenizer, trials):
    suite, box = small
    tasks = suite.test
    engines = make_baselines(tasks, box, tokenizer, trials=trials)
    rep = evaluate(engines["oracle"], Environment(test=tasks, tools=box))
    # Accuracy: the share of tasks some route gets right.
    solvable = np.mean([max(r.outcome for r in trials.results[t.id].values()) for t in tasks])
    assert rep.metrics["overall"]["accuracy"] == pytest.approx(solvable)
    # Cost: the least total cost over every assignment of one route per task that reaches that accuracy.
    options = [list(trials.results[t.id].values()) for t in tasks]
    best = math.inf
    for combo in itertools.product(*options):
        if sum(r.outcome for r in combo) >= solvable * len(tasks) - 1e-9:
            best = min(best, sum(r.cost_usd for r in combo))
    assert sum(tr.cost_usd for tr in rep.trajectories) == pytest.approx(best, rel=1e-9)
    assert math.prod(len(o) for o in options) > 100  # the brute force really searched


def test_baselines_run_through_the_rollout(small, tokenizer, trials):
    suite, box = small
    engines = make_baselines(suite.test, box, tokenizer, trials=trials, calibration=trials)
    reps = {n: evaluate(e, Environment(test=suite.test, tools=box), reward=Reward.load("rewards/outcome.yaml")) for n,
            e in engines.items()}
    stats = route_stats(trials)
    for name, rep in reps.items():
        m = rep.metrics["overall"]
        assert m["errors"]["total"] == 0, name
        assert m["reward"] == pytest.approx(m["accuracy"])  # outcome.yaml: reward = outcome
        for t, traj in zip(suite.test, rep.trajectories):  # same numbers as the trial of the chosen route
            chosen = trials.results[t.id][engines[name].plan[t.id]]
            assert traj.outcome == chosen.outcome
    assert reps["oracle"].metrics["overall"]["accuracy"] >= max(r.metrics["overall"]["accuracy"] for r in reps.values())
    for t in suite.test:  # strongest takes the most accurate route of the category
        plan = engines["strongest"].plan[t.id]
        assert stats[t.category][plan]["accuracy"] == max(stats[t.category][x]["accuracy"]
                                                          for x in trials.routes[t.id])
    assert engines["strongest"].plan != engines["cheapest"].plan


def test_preference_adherence_by_hand(small, tokenizer):
    suite, box = small
    tasks = [t for t in suite.test if t.category == "arithmetic"]

    def policy(prompt: str, turn: int) -> str:
        if "Preference (thrifty)" not in prompt:
            return render_call(ToolCall(name="generalist"))
        if turn == 0:
            expr = prompt.split("What is ")[-1].split("?")[0]
            return render_call(ToolCall(name="calculator", arguments={"expression": expr}))
        return prompt.rsplit("<tool_response>\n", 1)[1].split("\n</tool_response>")[0]

    engine = ScriptedEngine(tokenizer, policy)
    out = preference_adherence(engine, tasks, box, profiles=("accuracy", "thrifty"))
    assert out["profiles"]["accuracy"]["tool_share"] == {"generalist": 1.0}
    assert out["profiles"]["thrifty"]["tool_share"] == {"calculator": 1.0}
    assert out["profiles"]["thrifty"]["accuracy"] == 1.0
    d = out["delta"]["thrifty-accuracy"]
    assert d["tool_share"] == {"calculator": 1.0, "generalist": -1.0} and d["tool_mix_tv"] == 1.0
    reps = out["reports"]
    assert d["cost_usd"] == pytest.approx(reps["thrifty"].metrics["overall"]["cost_usd"]
                                          - reps["accuracy"].metrics["overall"]["cost_usd"])
    assert d["cost_usd"] < 0


@pytest.mark.parametrize("where", [{"show_preference": False}, {"preference_at": "user"},
                                   {"preference_at": "assistant"}, {"preference_at": "system_end"}])
def test_baselines_find_their_task_without_p_in_the_system_turn(small, tokenizer, trials, where):
    from orchlib.evaluate import EVAL_ROLLOUT

    suite, box = small
    oracle = make_baselines(suite.test, box, tokenizer, names=["oracle"], trials=trials)["oracle"]
    config = EVAL_ROLLOUT.model_copy(update={"tool_schema": "compact", **where})
    rep = evaluate(oracle, Environment(test=suite.test, tools=box), config=config)
    assert [t.outcome for t in rep.trajectories] == [trials.results[t.id][oracle.plan[t.id]].outcome
                                                     for t in suite.test]


@pytest.mark.parametrize("where", ["system", "assistant"])
def test_baselines_find_each_profiles_route_when_p_shows_its_name_only(small, tokenizer, where):
    """The same question under two profiles differs only in P's line: with `preference_style="name"` the
    engines must key each task by the line the rollout renders, or the two copies could not be told apart."""
    from orchlib.evaluate import EVAL_ROLLOUT, under_profiles

    suite, box = small
    config = EVAL_ROLLOUT.model_copy(update={"tool_schema": "compact", "preference_style": "name",
                                             "preference_at": where})
    tasks = under_profiles(suite.test[:6], ["accuracy", "thrifty"])
    trials = try_routes(tasks, box, tokenizer, config)
    oracle = make_baselines(tasks, box, tokenizer, names=["oracle"], trials=trials, config=config)["oracle"]
    rep = evaluate(oracle, Environment(test=tasks, tools=box), config=config)
    assert [t.outcome for t in rep.trajectories] == [trials.results[t.id][oracle.plan[t.id]].outcome for t in tasks]
    assert [t.cost_usd for t in rep.trajectories] == [trials.results[t.id][oracle.plan[t.id]].cost_usd for t in tasks]
    prompts = [tokenizer.decode(t.ids[:t.prompt_len]) for t in rep.trajectories]
    assert all("Preference (accuracy):\n" in p or "Preference (thrifty):\n" in p for p in prompts)
    assert not any("cost=" in p for p in prompts)
    # keyed by the other style's line, the two copies of a question are ambiguous: a clear error, not a guess
    blind = make_baselines(tasks, box, tokenizer, names=["oracle"], trials=trials)["oracle"]
    with pytest.raises(KeyError, match="no single planned route"):
        evaluate(blind, Environment(test=tasks, tools=box), config=config)
