"""Simulated experts: declared accuracy per category, reproducible draws, plausible wrong answers,
declared latency without sleeping, and "simulated" wherever the answer is shown."""

from __future__ import annotations

import asyncio
import math
import random
import time
from pathlib import Path

import pytest

from orchlib.cards import CardError, load_card
from orchlib.tools import ToolContext, Toolbox, build_tool
from orchlib.tools.simulated import wrong_answer
from orchlib.trajectory import ToolCall

CARDS = Path(__file__).resolve().parents[1] / "toolcards"
SPECIALIST = load_card(CARDS / "specialist.yaml")
GENERALIST = load_card(CARDS / "generalist.yaml")


def answers(card, category: str, n: int, seed: int = 0, answer: str = "42") -> list[str]:
    tool = build_tool(card)

    async def run():
        return await asyncio.gather(*(tool({}, ToolContext(task_id=f"t{i}", prompt="q", category=category,
                                                           answer=answer, seed=seed)) for i in range(n)))

    return [o.content for o in asyncio.run(run())]


@pytest.mark.parametrize("card, category", [(SPECIALIST, "arithmetic"), (SPECIALIST, "hard"),
                                            (SPECIALIST, "lookup"), (GENERALIST, "hard"),
                                            (GENERALIST, "never-declared")])
def test_accuracy_matches_the_card(card, category):
    n = 2000
    p = card.backend["accuracy"].get(category, card.backend["accuracy"]["default"])
    right = sum(c == f"[simulated {card.name}] The answer is 42." for c in answers(card, category, n))
    assert abs(right / n - p) < 4 * math.sqrt(p * (1 - p) / n) + 1e-9  # within four standard errors


def test_the_specialist_is_cheap_and_fast_the_generalist_dear_and_slow():
    ctx = ToolContext(task_id="t", prompt="What is 6 * 7?", category="arithmetic", answer="42")
    cheap, dear = (build_tool(c).call_sync({}, ctx) for c in (SPECIALIST, GENERALIST))
    assert cheap.cost_usd * 50 < dear.cost_usd and cheap.latency_s * 5 < dear.latency_s
    assert SPECIALIST.backend["accuracy"]["hard"] < 0.3 < 0.8 < GENERALIST.backend["accuracy"]["hard"]
    assert SPECIALIST.backend["accuracy"]["lookup"] < 0.3 < 0.8 < GENERALIST.backend["accuracy"]["lookup"]


def test_reproducible_given_seed_name_and_task():
    first = answers(SPECIALIST, "hard", 50, seed=1)
    assert answers(SPECIALIST, "hard", 50, seed=1) == first
    assert answers(SPECIALIST, "hard", 50, seed=2) != first


def test_declared_latency_is_reported_not_slept_and_labelled():
    ctx = ToolContext(task_id="t7", prompt="q", category="gsm8k", answer="18", seed=5)
    t0 = time.perf_counter()
    obs = build_tool(GENERALIST).call_sync({}, ctx)
    assert time.perf_counter() - t0 < 1
    assert obs.latency_s == GENERALIST.latency.sample(5, "generalist", "t7") and 21 <= obs.latency_s <= 39
    assert obs.label == "simulated" and "simulated" in obs.content and obs.final
    # tokens: 1500 out (declared) and the task's approximate tokens in, at gpt-5 prices
    assert obs.tokens_out == 1500 and obs.tokens_in == 1
    assert obs.cost_usd == pytest.approx(1 * 1.25e-6 + 1500 * 10e-6)
    assert "(simulated)" in GENERALIST.to_openai()["function"]["description"]


def test_declared_latency_over_the_timeout_is_a_timeout():
    box = Toolbox([build_tool(GENERALIST)])
    [obs] = box.call_many_sync([ToolCall(name="generalist")], ToolContext(task_id="t", answer="1"), timeout_s=5)
    assert obs.error_kind == "timeout" and obs.latency_s == 5 and "declares" in obs.error


def test_wrong_answers_are_plausible_and_wrong():
    rng = random.Random(0)
    for truth in ["18", "2.5", "-273.15", "0", "1,000"]:
        for _ in range(200):
            wrong = wrong_answer(truth, rng)
            value, true = float(wrong), float(truth.replace(",", ""))
            assert value != true
            step = 10 ** -len(truth.split(".")[1]) if "." in truth else 1
            assert abs(value - true) <= max(step, 0.2 * abs(true)) + 1e-9
    capitals = {wrong_answer("Paris", rng) for _ in range(50)}
    assert "Paris" not in capitals and {"Berlin", "Madrid"} & capitals  # other capitals from the corpus
    assert wrong_answer("Neon", rng, ["Argon", "neon "]) == "Argon"
    assert wrong_answer("something nobody listed", rng) == "unknown"


def test_needs_the_reference_answer_and_valid_accuracies():
    obs = build_tool(SPECIALIST).call_sync({}, ToolContext(task_id="t"))
    assert obs.error_kind == "tool_failure" and "needs the task's reference answer" in obs.error
    bad = SPECIALIST.model_copy(update={"backend": {"accuracy": {"arithmetic": 1.5}}})
    with pytest.raises(CardError, match=r"backend.accuracy: Value error, needs a 'default' entry"):
        build_tool(bad)
