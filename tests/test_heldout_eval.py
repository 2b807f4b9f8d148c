"""The held-out evaluation (orchlib.evaluate.heldout): hand-written trajectories with exact numbers, and a
scripted policy on orchestra-read's held-out test space."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from orchlib.cards import Latency, Price
from orchlib.configuration_record import Configuration, OfferedTool
from orchlib.configurations import draw
from orchlib.envs import make_environment
from orchlib.evaluate import HeldoutNumbers, format_heldout, heldout_summary
from orchlib.rollout import RolloutConfig, rollout
from orchlib.testing import ScriptedEngine
from orchlib.trajectory import Observation, ToolCall, Trajectory, Turn


PER_CALL = {"mixtral": 0.001, "calculator": 0.0}  # every other backend: 0.01 a call


def conf(*pairs: tuple[str, str]) -> Configuration:
    """A configuration offering alias → backend pairs in this order."""
    return Configuration(tools=tuple(OfferedTool(alias=a, backend=b, price=Price(per_call=PER_CALL.get(b, 0.01)),
                                                 latency=Latency(seconds=1.0), description="A tool.")
                                     for a, b in pairs), space="held-out", held_out=("aliases",))


def episode(profile: str, configuration: Configuration | None, calls: list[str], outcome: float, cost: float,
            latency: float, malformed: bool = False, category: str = "gsm8k") -> Trajectory:
    obs = [Observation(content="error", error="bad", error_kind="malformed_call")] if malformed else \
        [Observation(content="18") for _ in calls]
    turn = Turn(text="...", calls=[ToolCall(name=c) for c in calls], observations=obs)
    return Trajectory(task_id=f"q{len(calls)}", preference={"name": profile}, category=category, turns=[turn],
                      outcome=outcome, cost_usd=cost, latency_s=latency, configuration=configuration)


def hand_written() -> list[Trajectory]:
    return [
        # accuracy: the second-listed generalist, the first-listed gpt4, an unknown name, a call that did not parse
        episode("accuracy", conf(("a1", "mixtral"), ("a2", "generalist")), ["a2"], 1, 0.25, 30),
        episode("accuracy", conf(("b1", "gpt4"), ("b2", "mixtral")), ["b1"], 1, 0.5, 12),
        episode("accuracy", conf(("c1", "generalist"), ("c2", "mixtral")), ["nope"], 0, 0, 1),
        episode("accuracy", conf(("d1", "mixtral"), ("d2", "gpt4")), [], 0, 0, 0, malformed=True),
        # thrifty: mixtral first-listed once, second-listed once
        episode("thrifty", conf(("e1", "mixtral"), ("e2", "generalist")), ["e1"], 0, 0.125, 4),
        episode("thrifty", conf(("f1", "generalist"), ("f2", "mixtral")), ["f2"], 1, 0.125, 4),
        # another category: left out by category="gsm8k"
        episode("thrifty", conf(("g1", "calculator"), ("g2", "generalist")), ["g2"], 1, 1.0, 30, category="arithmetic"),
    ]


def test_hand_written_numbers_per_profile():
    got = heldout_summary(hand_written(), category="gsm8k")
    assert got == {
        "accuracy": HeldoutNumbers(episodes=4, calls=2, backend_share={"generalist": 0.5, "gpt4": 0.5},
                                   first_listed=0.5, cheapest_shown=0.0, well_formed=0.5, accuracy=0.5,
                                   cost_usd=0.1875, latency_s=10.75),
        "thrifty": HeldoutNumbers(episodes=2, calls=2, backend_share={"mixtral": 1.0}, first_listed=0.5,
                                  cheapest_shown=1.0, well_formed=1.0, accuracy=0.5, cost_usd=0.125, latency_s=4.0)}


def test_every_category_and_the_table():
    got = heldout_summary(hand_written())
    assert got["thrifty"].backend_share == {"generalist": 1 / 3, "mixtral": 2 / 3}
    assert got["thrifty"].first_listed == 1 / 3 and got["thrifty"].episodes == 3
    assert got["thrifty"].cheapest_shown == 2 / 3  # the generalist beside the free calculator is not
    only = heldout_summary(hand_written(), offer="generalist+mixtral")  # the backends offered, whatever the order
    assert {p: r.episodes for p, r in only.items()} == {"accuracy": 2, "thrifty": 2}
    table = format_heldout({"after RL": heldout_summary(hand_written(), category="gsm8k")},
                           backends=("mixtral", "gpt4", "generalist"))
    rows = table.splitlines()
    assert rows[2] == "| after RL | accuracy | 0.0 | 50.0 | 50.0 | 50.0 | 0.0 | 50.0 | 0.500 | 0.18750 | 10.75 |"
    assert rows[3] == "| after RL | thrifty | 100.0 | 0.0 | 0.0 | 50.0 | 100.0 | 100.0 | 0.500 | 0.12500 | 4.00 |"


def test_no_calls_and_no_record():
    silent = episode("accuracy", conf(("a1", "mixtral"), ("a2", "gpt4")), [], 0, 0, 0, malformed=True)
    got = heldout_summary([silent])["accuracy"]
    assert (got.calls, got.first_listed, got.backend_share, got.well_formed) == (0, None, {}, 0.0)
    with pytest.raises(ValueError, match="task 'q1' has no configuration record"):
        heldout_summary([episode("accuracy", None, ["mixtral"], 1, 0.5, 4)])


def first_listed(text: str, turn: int) -> str:
    """A policy that reads nothing but the list: it calls the first tool of the prompt's <tools> block."""
    block = text[text.index("<tools>"):]
    name = re.search(r'"name": "([^"]+)"', block).group(1)
    return f'<tool_call>{{"name": "{name}", "arguments": {{}}}}</tool_call>'


def test_a_first_listed_policy_on_held_out_configurations(tiny_policy):
    _, tok = tiny_policy
    env = make_environment("orchestra-read", seed=3, n_train=4, n_test=24)
    gsm = [t for t in env.test if t.category == "gsm8k"]
    trajs = rollout(env, ScriptedEngine(tok, first_listed), tasks=gsm,
                    config=RolloutConfig(max_turns=1, tool_schema="brief"))  # the list orchestra-read is read with
    got = heldout_summary(trajs)
    # independently: the first offered backend of each task's drawn configuration (episode 0, the test space)
    space = env.test_configurations
    firsts: dict[str, Counter] = {}
    for t in gsm:
        offered = [o.backend for o in draw(space, space.seed, t.id, 0).tools if o.backend in t.tools]
        firsts.setdefault(t.preference.name, Counter())[offered[0]] += 1
    assert sorted(got) == ["accuracy", "thrifty"]
    for profile, counts in firsts.items():
        n = sum(counts.values())
        assert got[profile].backend_share == {b: k / n for b, k in sorted(counts.items())}
        assert (got[profile].first_listed, got[profile].well_formed, got[profile].calls) == (1.0, 1.0, n)
    assert all(t.configuration.space == "held-out" for t in trajs)
    # the draw really varies the first-listed backend: a policy that followed the list is not one backend's
    assert len(set().union(*firsts.values())) >= 2


class Report:
    def __init__(self, trajectories):
        self.trajectories, self.trajectories_path = trajectories, None


def test_run_summary_holds_the_held_out_numbers_of_a_policy_run_on_configurations():
    from orchlib.train.evaluation import run_summary

    plain = [t.model_copy(update={"configuration": None, "calls": {"mixtral": 1}}) for t in hand_written()]
    reports = {"after RL": Report(hand_written()), "cheapest": Report(plain)}
    summary = run_summary(reports, lambda group, P=None: [t.outcome for t in group])
    assert summary["held_out"] == {"after RL": {p: r.model_dump() for p, r in heldout_summary(hand_written()).items()}}
    by_offer = summary["held_out_by_offer"]["after RL"]
    assert sorted(by_offer) == ["calculator+generalist", "generalist+mixtral", "gpt4+mixtral"]
    assert by_offer["gpt4+mixtral"]["accuracy"]["episodes"] == 2 and "cheapest" not in summary["held_out_by_offer"]


def test_choice_cosine_is_one_where_p_is_hidden_and_counts_each_question_once(tiny_policy):
    from orchlib.evaluate.gradients import configured_profile_cosine
    from orchlib.train.evaluation import RunEvaluation, choice_cosine

    model, tok = tiny_policy
    env = make_environment("orchestra-read", seed=3, n_train=4, n_test=8)
    both = sorted({t.id.rsplit("@", 1)[0] for t in env.test if {"generalist", "mixtral"} <= set(t.tools)})
    assert both  # GSM8K questions offering Mixtral beside the generalist
    settings = RunEvaluation(cosine=("generalist", "mixtral"), cosine_tasks=10)
    hidden = RolloutConfig(tool_schema="brief", show_preference=False)
    got = choice_cosine(model, tok, env, hidden, settings)
    assert got["n"] == len(both) and got["mean"] == pytest.approx(1.0, abs=1e-9)  # the two passes are one pass
    shown = RolloutConfig(tool_schema="brief")
    firsts = [next(t for t in env.test if t.id.startswith(q + "@")) for q in both]
    by_hand = configured_profile_cosine(model, tok, env, firsts, shown, ("generalist", "mixtral"))
    got = choice_cosine(model, tok, env, shown, settings)
    assert got["n"] == len(both) and got["mean"] == pytest.approx(sum(by_hand) / len(by_hand), rel=1e-12)
    assert got["min"] == pytest.approx(min(by_hand), rel=1e-12) and got["mean"] < 1
