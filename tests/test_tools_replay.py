"""Replay tools read back real recorded answers (RouteLLM's GSM8K recording), price them from an
approximate token count, report the card's declared latency, and refuse questions not recorded."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from orchlib.cards import CardError, load_card
from orchlib.tools import ToolContext, approx_tokens, build_tool, replay_lookup

REPO = Path(__file__).resolve().parents[1]
RECORDING = REPO.parent / "shared" / "data" / "routellm" / "gsm8k_responses.csv"
MIXTRAL = load_card(REPO / "toolcards" / "mixtral.yaml")
GPT4 = load_card(REPO / "toolcards" / "gpt4.yaml")
ROWS = list(csv.DictReader(RECORDING.open(encoding="utf-8")))


def test_approx_tokens_by_hand():
    assert approx_tokens("Janet has 16 eggs, sells 9.") == 8  # Janet has 16 eggs , sells 9 .
    assert approx_tokens("extraordinarily") == 2               # a long word counts twice
    assert approx_tokens("1234567") == 3                       # digits in groups of three: 123 456 7
    assert approx_tokens("$18 = 9 * $2") == 7
    assert approx_tokens("") == 0


def test_shipped_copy_is_the_recording_and_keeps_its_licence():
    data = REPO / "orchlib" / "data" / "routellm"
    assert (data / "gsm8k_responses.csv").read_bytes() == RECORDING.read_bytes()
    assert (data / "LICENSE").read_text() == (RECORDING.parent / "LICENSE").read_text()


@pytest.mark.parametrize("card, model", [(MIXTRAL, "mistralai/Mixtral-8x7B-Instruct-v0.1"),
                                         (GPT4, "gpt-4-1106-preview")])
def test_replays_the_recorded_answer_with_its_price_and_declared_latency(card, model):
    row = ROWS[0]
    ctx = ToolContext(task_id="gsm8k-0", prompt=row["prompt"], category="gsm8k", seed=3)
    obs = build_tool(card).call_sync({}, ctx)
    assert obs.error is None and obs.content == row[f"{model}_response"].strip()
    assert obs.label == "replay" and obs.final and obs.tool == card.name
    assert obs.tokens_in == approx_tokens(row["prompt"]) and obs.tokens_out == approx_tokens(row[f"{model}_response"])
    assert obs.cost_usd == pytest.approx(card.price.cost(obs.tokens_in, obs.tokens_out, obs.latency_s))
    assert obs.latency_s == card.latency.sample(3, card.name, "gsm8k-0")  # declared, reproducible
    lo, hi = card.latency.seconds * (1 - card.latency.jitter), card.latency.seconds * (1 + card.latency.jitter)
    assert lo <= obs.latency_s <= hi


def test_grades_are_readable_and_match_the_recording():
    correct = {"mixtral": 0, "gpt4": 0}
    for row in ROWS:
        for card in (MIXTRAL, GPT4):
            text, graded = replay_lookup(card, row["prompt"])
            correct[card.name] += graded
    assert correct == {"mixtral": 842, "gpt4": 1130}  # the figures the data's README gives
    text, graded = replay_lookup(GPT4, "  " + ROWS[5]["prompt"].replace(" ", "\n  ") + " ")
    assert text == ROWS[5]["gpt-4-1106-preview_response"]  # found after whitespace normalisation
    with pytest.raises(KeyError, match="question not in the recording of gpt4"):
        replay_lookup(GPT4, "What is the airspeed of an unladen swallow?")


def test_unknown_question_is_an_error_never_an_answer():
    obs = build_tool(MIXTRAL).call_sync({}, ToolContext(task_id="x", prompt="What is 2 + 2?", seed=0))
    assert obs.error_kind == "tool_failure" and not obs.final
    assert obs.error == ("mixtral is a replay of recorded answers and this question is not in the recording "
                         "(gsm8k_responses.csv); no answer can be given")
    assert obs.tokens_out == 0 and obs.cost_usd == 0  # no tokens were produced, and no per-call fee


def test_argument_input_and_bad_settings(tmp_path):
    by_argument = MIXTRAL.model_copy(update={
        "input": "arguments", "parameters": {"type": "object", "properties": {"question": {"type": "string"}},
                                             "required": ["question"]}})
    obs = build_tool(by_argument).call_sync({"question": ROWS[1]["prompt"]})
    assert obs.content == ROWS[1]["mistralai/Mixtral-8x7B-Instruct-v0.1_response"].strip()
    with pytest.raises(CardError, match="backend.path: no such file"):
        build_tool(MIXTRAL.model_copy(update={"backend": {**MIXTRAL.backend, "path": str(tmp_path / "no.csv")}}))
    wrong_model = MIXTRAL.model_copy(update={"backend": {**MIXTRAL.backend, "model": "llama"}})
    obs = build_tool(wrong_model).call_sync({}, ToolContext(prompt=ROWS[0]["prompt"]))
    assert obs.error_kind == "tool_failure" and "no column(s) ['llama_response']" in obs.error
