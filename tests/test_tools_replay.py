"""Replay tools read back real recorded answers: RouteLLM's GSM8K recording (wide CSV) and recordings as
rows (JSONL/CSV: response, grade, input/output/reasoning/cached tokens, latency, many models per file).
Costs and grades are compared with sums written out by hand over the recording."""

from __future__ import annotations

import csv
import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from orchlib import recordings
from orchlib.env import Environment
from orchlib.cards import CardError, Price, load_card
from orchlib.tasks import Task, check_answer
from orchlib.tools import ToolContext, approx_tokens, build_tool, replay_lookup
from orchlib.recordings import (RecordingError, ReplaySettings, load_recording, parse_grade, read_recording,
                                write_recording)
from orchlib.tools.replay import replay_cards
from orchlib.trajectory import Observation

REPO = Path(__file__).resolve().parents[1]
RECORDING = REPO / "orchlib" / "data" / "routellm" / "gsm8k_responses.csv"
# SHA-256 of the files as published (lm-sys/RouteLLM @ 0b64fdaf, routellm/evals/gsm8k/ and LICENSE)
RECORDING_SHA256 = "1f38ed03db354a020f71e92022383dc3cf37bbf2694dea4daaeea7b6c43fe57b"
LICENSE_SHA256 = "43070e2d4e532684de521b885f385d0841030efa2b1a20bafb76133a5e1379c1"
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
    import hashlib

    assert hashlib.sha256(RECORDING.read_bytes()).hexdigest() == RECORDING_SHA256
    assert hashlib.sha256((RECORDING.parent / "LICENSE").read_bytes()).hexdigest() == LICENSE_SHA256


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
    assert obs.latency_s == card.latency.sample(3, card.name, "gsm8k-0")  # no latency recorded: the declared one
    assert obs.meta == {"grade": 1.0 if row[model] == "True" else 0.0}


def test_grades_are_readable_and_match_the_recording():
    correct = {"mixtral": 0.0, "gpt4": 0.0}
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
    assert obs.error_kind == "tool_failure" and "no model 'llama' in this recording; it records " in obs.error
    assert "'gpt-4-1106-preview'" in obs.error


# ---------------------------------------------------------------------------------------------- grades
@pytest.mark.parametrize("value", ["1", "1.0", " true ", "True", "yes", 1, 1.0, True])
def test_a_grade_of_one_in_any_spelling_reads_one(value):
    assert parse_grade(value) == 1.0


@pytest.mark.parametrize("value", ["0", "0.0", "false", "False", "no", 0, 0.0, False])
def test_a_grade_of_zero_in_any_spelling_reads_zero(value):
    assert parse_grade(value) == 0.0


def test_partial_and_missing_and_bad_grades():
    assert parse_grade("0.25") == 0.25 and parse_grade(None) is None and parse_grade("  ") is None
    for bad in ("maybe", "1.5", -1, 2, float("inf")):
        with pytest.raises(ValueError, match="not a grade"):
            parse_grade(bad)


# ---------------------------------------------------------------------------------------------- rows
# Two models of one benchmark in one file, the shape public recordings have: one row per (question,
# model), token counts with reasoning apart, a latency, and a grade in the spellings found in the wild.
Q = ["What is 2 + 3?", "How many legs do 3 spiders have?", "Name the capital of France."]
RECORDS = [
    {"prompt": Q[0], "model": "o-think", "response": "5", "grade": "1", "input_tokens": 20, "output_tokens": 3,
     "reasoning_tokens": 900, "cached_tokens": 8, "latency_s": 11.5},
    {"prompt": Q[1], "model": "o-think", "response": "24", "grade": 1.0, "input_tokens": 25, "output_tokens": 4,
     "reasoning_tokens": 1500, "cached_tokens": 0, "latency_s": 20.0},
    {"prompt": Q[2], "model": "o-think", "response": "", "grade": "", "input_tokens": 22, "output_tokens": 0,
     "reasoning_tokens": 300, "cached_tokens": 0, "latency_s": 4.0},
    {"prompt": Q[0], "model": "small", "response": "6", "grade": "false", "input_tokens": 20, "output_tokens": 2,
     "reasoning_tokens": 0, "cached_tokens": 0, "latency_s": 0.5},
    {"prompt": Q[1], "model": "small", "response": "24 legs", "grade": True, "input_tokens": 25,
     "output_tokens": 5, "reasoning_tokens": 0, "cached_tokens": 0, "latency_s": 0.75},
    {"prompt": Q[2], "model": "small", "response": "Paris", "grade": 0, "input_tokens": 22, "output_tokens": 2,
     "reasoning_tokens": 0, "cached_tokens": 0, "latency_s": 0.25},
]
PRICES = {"o-think": Price(per_m_input=1.25, per_m_output=10.0), "small": Price(per_m_input=0.2, per_m_output=0.4)}


@pytest.fixture
def recording(tmp_path) -> Path:
    return write_recording(RECORDS, tmp_path / "rec.jsonl")


def _call(card, prompt, seed=0):
    return build_tool(card).call_sync({}, ToolContext(task_id="t", prompt=prompt, seed=seed))


def test_rows_recording_prices_reasoning_as_output_and_keeps_the_recorded_latency(recording):
    cards = {c.name: c for c in replay_cards(recording, prices=PRICES, latency={"seconds": 99.0})}
    assert sorted(cards) == ["o-think", "small"]
    for r in RECORDS:
        if not r["response"]:
            continue
        obs = _call(cards[r["model"]], r["prompt"])
        p = PRICES[r["model"]]
        # Written out: input at the input price, visible output and reasoning both at the output price.
        out = r["output_tokens"] + r["reasoning_tokens"]
        want = r["input_tokens"] * p.per_m_input / 1e6 + out * p.per_m_output / 1e6
        assert obs.cost_usd == pytest.approx(want, rel=1e-12)
        assert obs.tokens_out == out and obs.tokens_reasoning == r["reasoning_tokens"]
        assert obs.latency_s == r["latency_s"]  # recorded, not the card's 99 s
        assert obs.meta["grade"] == parse_grade(r["grade"]) and obs.content == r["response"] and obs.final


def test_a_card_may_price_reasoning_and_cached_tokens_apart(recording):
    price = Price(per_m_input=1.0, per_m_output=8.0, per_m_reasoning=2.0, per_m_cached_input=0.1)
    card = replay_cards(recording, ["o-think"], prices={"o-think": price})[0]
    obs = _call(card, Q[0])
    r = RECORDS[0]
    want = ((r["input_tokens"] - r["cached_tokens"]) * 1.0 + r["cached_tokens"] * 0.1 + r["output_tokens"] * 8.0
            + r["reasoning_tokens"] * 2.0) / 1e6
    assert obs.cost_usd == pytest.approx(want, rel=1e-12) and obs.tokens_cached == 8
    assert "$2 per million reasoning tokens" in price.describe()
    assert Price(per_m_input=3, per_m_output=5).cost(10, 7, tokens_reasoning=4, tokens_cached=2) == \
        Price(per_m_input=3, per_m_output=5).cost(10, 7)  # unset: billed as output and as input


def test_a_price_table_prices_every_recorded_model_per_token_class(tmp_path):
    """Models named as configurations of table rows ("gpt-5/high"), billed per token class at the
    table's rates; a model the table does not price is an error, not a free tool."""
    from orchlib.prices import load_prices

    table = load_prices()
    rows = [{**RECORDS[0], "model": "gpt-5/high"}, {**RECORDS[0], "model": "deepseek-reasoner"}]
    path = write_recording(rows, tmp_path / "r.jsonl")
    cards = {c.name: c for c in replay_cards(path, prices=table)}
    r = RECORDS[0]  # 20 in (8 cached), 3 out + 900 reasoning
    for name, model in (("gpt-5_high", "gpt-5"), ("deepseek-reasoner", "deepseek-r1")):
        row = table.row(model)
        want = ((20 - 8) * row.input + 8 * row.cached_input + (3 + 900) * row.output) / 1e6
        obs = _call(cards[name], Q[0])
        assert obs.cost_usd == pytest.approx(want, rel=1e-12) and obs.latency_s == r["latency_s"]
    with pytest.raises(ValueError, match="no price for 'o-think'"):
        replay_cards(write_recording(RECORDS, tmp_path / "s.jsonl"), prices=table)


def test_output_that_already_counts_reasoning_is_not_counted_twice(recording):
    card = replay_cards(recording, ["o-think"], prices=PRICES, output_includes_reasoning=True)[0]
    obs = _call(card, Q[1])
    assert obs.tokens_out == 4 and obs.tokens_reasoning == 4  # reasoning can be no more than the output


def test_an_empty_response_is_a_tool_failure_not_an_empty_final_answer(recording):
    card = replay_cards(recording, ["o-think"], prices=PRICES)[0]
    obs = _call(card, Q[2])
    assert obs.error_kind == "tool_failure" and not obs.final and "recorded response" in obs.error
    assert obs.latency_s == 4.0 and obs.tokens_in == 22 and obs.tokens_out == 300  # charged as recorded
    assert obs.cost_usd == pytest.approx((22 * 1.25 + 300 * 10.0) / 1e6, rel=1e-12)


def test_a_recorded_latency_over_the_timeout_is_a_timeout(recording):
    card = replay_cards(recording, ["o-think"], prices=PRICES)[0]
    obs = build_tool(card).call_sync({}, ToolContext(prompt=Q[1]), timeout_s=15.0)
    assert obs.error_kind == "timeout" and obs.latency_s == 15.0


def test_csv_rows_and_lookup_by_task_id(tmp_path):
    path = tmp_path / "rec.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, ["qid", "config", "answer", "correct", "input_tokens", "output_tokens"])
        w.writeheader()
        w.writerow({"qid": "t-1", "config": "m", "answer": "42", "correct": "1.0", "input_tokens": "12",
                    "output_tokens": "3"})
    card = replay_cards(path, match="task_id", prompt_column="qid", model_column="config",
                        response_column="answer", grade_column="correct", prices={"m": Price(per_m_input=1)})[0]
    obs = build_tool(card).call_sync({}, ToolContext(task_id="t-1", prompt="whatever the task says"))
    assert obs.content == "42" and obs.meta == {"grade": 1.0} and obs.cost_usd == pytest.approx(12e-6)


def test_parquet_rows_read_as_the_same_recording_as_jsonl(tmp_path, recording):
    """A Parquet file (typed columns, nulls for missing values) replays exactly what the JSONL does."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    # Parquet columns have one type each: grades as text (their spellings), one count missing (null).
    rows = [{**r, "grade": str(r["grade"]), "cached_tokens": None if i == 1 else r["cached_tokens"]}
            for i, r in enumerate(RECORDS)]
    path = tmp_path / "rec.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    table = read_recording(path)
    jsonl = read_recording(recording)
    assert table.layout == "rows" and table.models == jsonl.models == ["o-think", "small"]
    for model in table.models:
        for q, rec in jsonl.answers(model).items():
            got = table.answers(model)[q]
            want = replace(rec, tokens_cached=None) if (model, q) == ("o-think", Q[1]) else rec
            assert got == want
    # Through a card and a call: the same cost, latency and grade as the JSONL recording gives.
    for a, b in zip(replay_cards(path, prices=PRICES), replay_cards(recording, prices=PRICES)):
        assert _call(a, Q[0]) == _call(b, Q[0])
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist([{**rows[0], "output_tokens": -3}]), bad)
    with pytest.raises(RecordingError, match=r"bad.parquet:1: output_tokens: not a token count"):
        read_recording(bad)


@pytest.mark.parametrize("row, problem", [
    ({"grade": "maybe"}, "3: grade: not a grade: 'maybe'"),
    ({"output_tokens": -4}, "3: output_tokens: not a token count"),
    ({"output_tokens": 2.5}, "3: output_tokens: not a token count"),
    ({"latency_s": "fast"}, "3: latency_s: not a latency"),
    ({"prompt": ""}, "3: prompt: no question"),
    ({"model": None}, "3: model: no model named"),
    ({"response": {"text": "5"}}, "3: response: a response must be text"),
])
def test_bad_values_name_the_file_line_and_column(tmp_path, row, problem):
    rows = [RECORDS[0], RECORDS[1], {**RECORDS[3], **row}]
    path = write_recording(rows, tmp_path / "bad.jsonl")
    with pytest.raises(RecordingError) as e:
        read_recording(path)
    assert str(e.value).startswith(f"{path}:{problem}")


def test_missing_columns_and_unreadable_lines(tmp_path):
    path = write_recording([{"prompt": "q", "model": "m", "text": "a"}], tmp_path / "r.jsonl")
    with pytest.raises(RecordingError, match=r"no column\(s\) \['response'\]"):
        read_recording(path)
    with pytest.raises(RecordingError, match=r"no column\(s\) \['tokens'\]"):  # named, so it must be there
        read_recording(path, response_column="text", tokens_out_column="tokens")
    assert read_recording(path, response_column="text").answers("m")["q"].tokens_out is None  # optional: absent
    bad = tmp_path / "b.jsonl"
    bad.write_text('{"prompt": "q", "model": "m", "response": "a"}\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(RecordingError, match=r"b.jsonl:2: a row must be a JSON object"):
        read_recording(bad)
    latin = tmp_path / "l.csv"
    latin.write_bytes(b"prompt,model,response\nq,m,caf\xe9\n")
    with pytest.raises(RecordingError, match=r"l.csv:2: not UTF-8 \(byte 0xe9\)"):
        read_recording(latin)
    with pytest.raises(RecordingError, match="unknown recording format '.txt'"):
        read_recording(tmp_path / "x.txt")


def test_write_recording_takes_a_table_and_refuses_non_rows(tmp_path):
    class Int:  # a numpy integer: .item() gives the Python number
        def item(self):
            return 7

    class Frame:  # what pandas offers: to_dict("records"), numpy scalars and NaN for missing values
        def iterrows(self):
            raise AssertionError("records are read with to_dict")

        def to_dict(self, orient):
            assert orient == "records"
            return [{"prompt": "q", "model": "m", "response": "a", "grade": float("nan"), "output_tokens": Int()}]

    class Dataset:  # what datasets offers: rows when iterated; to_dict gives columns, not rows
        def __iter__(self):
            return iter([{"prompt": "q2", "model": "m", "response": "b"}])

        def to_dict(self):
            raise AssertionError("a Dataset is iterated")

    rec = read_recording(write_recording(Frame(), tmp_path / "f.jsonl"))
    assert rec.answers("m")["q"] == recordings.Recorded(text="a", grade=None, tokens_out=7)
    assert read_recording(write_recording(Dataset(), tmp_path / "d.jsonl")).answers("m")["q2"].text == "b"
    with pytest.raises(TypeError, match="row 1: expected a mapping"):
        write_recording([["q", "a"]], tmp_path / "g.jsonl")
    assert not (tmp_path / "g.jsonl").exists()  # nothing half-written


def test_replay_cards_names_and_unknown_models(tmp_path):
    rows = [{**RECORDS[0], "model": "openai/gpt-5 (high)"}, {**RECORDS[0], "model": "openai/gpt-5_high"}]
    path = write_recording(rows, tmp_path / "r.jsonl")
    with pytest.raises(ValueError, match="both become the tool name 'openai_gpt-5_high'"):
        replay_cards(path)
    assert [c.name for c in replay_cards(path, ["openai/gpt-5 (high)"])] == ["openai_gpt-5_high"]
    with pytest.raises(RecordingError, match="no model 'claude'"):
        replay_cards(path, ["claude"])


# ---------------------------------------------------------------------------------------------- cache
def test_many_recordings_are_each_read_once(tmp_path, monkeypatch):
    reads: list[Path] = []
    real = recordings.read_recording
    monkeypatch.setattr(recordings, "read_recording",
                        lambda path, s=None, **kw: reads.append(path) or real(path, s, **kw))
    recordings.clear_recordings()
    paths = [write_recording([{**r, "model": f"{r['model']}-{i}"} for r in RECORDS], tmp_path / f"r{i}.jsonl")
             for i in range(40)]
    cards = [c for p in paths for c in replay_cards(p)]
    tools = [build_tool(c) for c in cards]
    for _ in range(3):
        for tool in tools:
            assert tool.call_sync({}, ToolContext(prompt=Q[1])).content in ("24", "24 legs")
    assert sorted(reads) == sorted(paths)  # 40 files, 3 rounds: one read each (a 16-entry cache re-read them)


def test_threads_share_one_read_and_a_changed_file_is_read_again(tmp_path, monkeypatch):
    path = write_recording(RECORDS, tmp_path / "r.jsonl")
    reads: list[Path] = []
    real = recordings.read_recording
    monkeypatch.setattr(recordings, "read_recording", lambda p, s=None, **kw: reads.append(p) or real(p, s, **kw))
    recordings.clear_recordings()
    s = ReplaySettings(path=str(path), model="small")
    got: list = []
    threads = [threading.Thread(target=lambda: got.append(load_recording(path, s))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(reads) == 1 and all(g is got[0] for g in got)
    write_recording([{**RECORDS[3], "response": "7"}], path)  # rewritten: another size
    assert load_recording(path, s).answers("small")[Q[0]].text == "7" and len(reads) == 2


# ---------------------------------------------------------------------------------------------- checker
def test_the_recorded_checker_scores_with_the_grade_and_falls_back_without_one():
    task = Task(id="a", prompt=Q[0], answer="5", checker="recorded")
    graded = Observation(content="five", meta={"grade": 1.0})
    assert check_answer(task, "five", observation=graded) == 1.0  # the text alone would not pass
    assert check_answer(task, "5", observation=Observation(content="5", meta={"grade": 0.0})) == 0.0
    assert check_answer(task, "5") == 1.0 and check_answer(task, "6") == 0.0  # no grade: exact
    numeric = task.model_copy(update={"meta": {"fallback_checker": "numeric"}})
    assert check_answer(numeric, "It is 5.") == 1.0
    with pytest.raises(ValueError, match="fallback_checker cannot be 'recorded'"):
        check_answer(task.model_copy(update={"meta": {"fallback_checker": "recorded"}}), "5")


def test_recorded_grades_score_episodes_end_to_end(recording):
    """Through the rollout: a `final` replay tool's grade is the episode's outcome."""
    from orchlib.engines.scripted import ScriptedEngine
    from orchlib.models import build_tokenizer
    from orchlib.rollout import RolloutConfig, rollout
    from orchlib.tools import Toolbox

    box = Toolbox.from_cards(replay_cards(recording, prices=PRICES))
    tasks = [Task(id=f"t{i}", prompt=q, answer="unused", checker="recorded") for i, q in enumerate(Q)]
    engine = ScriptedEngine(build_tokenizer(), ['<tool_call>\n{"name": "small", "arguments": {}}\n</tool_call>'])
    out = rollout(Environment(train=tasks, tools=box), engine, config=RolloutConfig(max_new_tokens=64,
                                                                                    max_total_tokens=4096))
    want = [parse_grade(r["grade"]) for r in RECORDS if r["model"] == "small"]
    assert [t.outcome for t in out] == want and [t.finish_reason for t in out] == ["final_tool"] * 3
    assert json.loads(out[0].model_dump_json())["turns"][0]["observations"][0]["meta"] == {"grade": 0.0}
