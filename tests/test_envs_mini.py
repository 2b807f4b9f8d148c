"""The default suite, orchestra-mini: splits, reproducibility, categories, golden answers and calls."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest

from orchlib.cards import load_cards
from orchlib.envs import ENVIRONMENTS, make_suite
from orchlib.envs.mini import CATEGORIES, CATEGORY_TOOLS, paid_api_tools, preference_for, shop_cards
from orchlib.envs.shop import replay
from orchlib.tasks import PROFILES, load_tasks

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "orchlib" / "data"


@pytest.fixture(scope="module")
def suite():
    return make_suite(seed=0, n_train=100, n_test=50)


@pytest.fixture(scope="module")
def toolbox(suite):
    return suite.toolbox()


def test_registry():
    import orchlib.envs
    from orchlib.envs import mini

    assert ENVIRONMENTS["orchestra-mini"] is mini.environment
    assert not hasattr(orchlib.envs, "SUITES")  # one registry of worlds
    env = ENVIRONMENTS["orchestra-mini"](seed=3, n_train=5, n_test=5)
    suite = make_suite(3, n_train=5, n_test=5)
    assert ([t.id for t in env.train], [t.id for t in env.test]) == ([t.id for t in suite.train],
                                                                     [t.id for t in suite.test])


def test_splits_are_disjoint_and_sized(suite):
    assert len(suite.train) == 100 and len(suite.test) == 50
    for split in (suite.train, suite.test):
        assert Counter(t.category for t in split) == {c: len(split) // 5 for c in CATEGORIES}
        assert len({t.id for t in split}) == len(split)
    assert not {t.id for t in suite.train} & {t.id for t in suite.test}
    assert not {t.prompt for t in suite.train} & {t.prompt for t in suite.test}


def test_same_seed_same_suite_other_seed_other_suite(suite):
    again = make_suite(seed=0, n_train=100, n_test=50)
    assert again.train == suite.train and again.test == suite.test
    other = make_suite(seed=1, n_train=100, n_test=50)
    assert {t.id for t in other.test} != {t.id for t in suite.test}


def test_tools_and_preferences(suite):
    cards = suite.cards
    assert paid_api_tools(cards) == ["generalist", "gpt4", "mixtral", "specialist"]
    for t in suite.train + suite.test:
        assert t.tools == CATEGORY_TOOLS[t.category]
        assert t.preference.name in PROFILES
        want = {n: -1.0 for n in t.tools if n in ("generalist", "gpt4", "mixtral", "specialist")}
        assert t.preference.tools == (want if t.preference.name == "local-only" else {})
    for cat in CATEGORIES:  # round-robin: each category sees every profile, evenly
        counts = Counter(t.preference.name for t in suite.train if t.category == cat)
        assert set(counts) == set(PROFILES) and max(counts.values()) - min(counts.values()) <= 1
    assert preference_for("thrifty", ["gpt4"], cards) == PROFILES["thrifty"]
    with pytest.raises(KeyError):
        preference_for("lavish", [], cards)


def test_every_golden_answer_scores_one(suite):
    for t in suite.train + suite.test:
        env = replay(t) if t.category == "shop" else t.make_state()
        assert t.score(t.golden.answer, env) == 1.0, t.id


def test_arithmetic_answers_by_independent_evaluation(suite):
    for t in suite.train + suite.test:
        if t.category == "arithmetic":
            expr = t.golden.calls[0].arguments["expression"]
            assert t.prompt == f"What is {expr}?"
            assert eval(expr) == int(t.answer)  # plain Python on a generated, trusted expression


def test_gsm8k_prompts_are_in_the_recording_with_the_dataset_answer(suite):
    with open(DATA / "routellm" / "gsm8k_responses.csv", encoding="utf-8", newline="") as f:
        recorded = {row["prompt"] for row in csv.DictReader(f)}
    gold = {}
    for line in (DATA / "gsm8k" / "test.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        gold[row["question"]] = row["answer"].split("####")[-1].strip().replace(",", "")
    tasks = [t for t in suite.train + suite.test if t.category == "gsm8k"]
    assert tasks
    for t in tasks:
        assert t.prompt in recorded and t.answer == gold[t.prompt]
        routes = [t.golden.calls] + t.golden.alternatives
        assert sorted(r[0].name for r in routes) == ["gpt4", "mixtral"]


def test_replay_tools_answer_the_gsm8k_tasks(suite, toolbox):
    from orchlib.tools import ToolContext
    from orchlib.trajectory import ToolCall

    t = next(t for t in suite.test if t.category == "gsm8k")
    ctx = ToolContext(task_id=t.id, prompt=t.prompt, category=t.category, answer=t.answer)
    for obs in toolbox.call_many_sync([ToolCall(name="mixtral"), ToolCall(name="gpt4")], ctx):
        assert obs.error is None and obs.final and obs.label == "replay"


def test_golden_calls_of_arithmetic_and_lookup_return_the_answer(suite, toolbox):
    from orchlib.tasks import answer_in_text
    from orchlib.tools import ToolContext

    for t in suite.train + suite.test:
        if t.category in ("arithmetic", "lookup"):
            (obs,) = toolbox.call_many_sync(t.golden.calls, ToolContext(task_id=t.id, prompt=t.prompt))
            assert obs.error is None and answer_in_text(t, obs.content), (t.id, obs.content)
            if t.category == "arithmetic":
                assert t.score(obs.content) == 1.0


def test_hard_tasks_route_to_generalist_or_specialist(suite):
    for t in suite.test:
        if t.category == "hard":
            assert sorted(r[0].name for r in [t.golden.calls] + t.golden.alternatives) == ["generalist", "specialist"]


def test_shipped_shop_cards_match_the_functions():
    shipped = {c.name: c for c in load_cards(REPO / "toolcards")}
    for card in shop_cards():
        assert shipped[card.name] == card


def test_save_round_trip(suite, tmp_path):
    suite.save(tmp_path)
    assert load_tasks(tmp_path / "test.jsonl") == suite.test
    assert load_tasks(tmp_path / "train.jsonl") == suite.train


@pytest.mark.parametrize("kw, match", [
    (dict(categories=["poetry"]), "unknown categories"),
    (dict(profiles=["lavish"]), "profiles"),
    (dict(categories=["shop"], n_train=600, n_test=0), "distinct tasks"),
])
def test_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        make_suite(**kw)
