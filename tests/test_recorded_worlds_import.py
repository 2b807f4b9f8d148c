"""The pieces of a recorded world one at a time: the recording reader's bad inputs (each an error naming
file:line, or a skipped row listed with it), the OpenAI-messages importer, the replayed user's stop
marker, scripts keyed by task id, database domains from foreign tools, and evaluation's warnings and
undefined metrics. Expected values are written out by hand."""

from __future__ import annotations

import asyncio
import csv
import json

import pytest

from orchlib.env import Environment
from orchlib.chat import render_assistant
from orchlib.engines.base import SamplingParams
from orchlib.engines.scripted import ScriptedEngine, ScriptExhausted
from orchlib.envs.db import DBDomain, mentions_number, state_hash
from orchlib.users import ReplayedUser
from orchlib.evaluate import EVAL_ROLLOUT, Undefined, apgr, evaluate, pgr
from orchlib.models import build_tokenizer
from orchlib.openai_messages import from_openai_messages, to_openai_messages
from orchlib.rollout import RolloutConfig, rollout
from orchlib.tasks import Task
from orchlib.tools import Toolbox
from orchlib.recordings import RecordingError, read_recording
from orchlib.trajectory import ToolCall, UserTurn

TOK = build_tokenizer()
ROW = {"prompt": "q1", "model": "m", "response": "a", "input_tokens": 3, "output_tokens": 2}


def _jsonl(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------- reader
def test_a_csv_field_over_128_kib_is_read(tmp_path):
    long = "x" * 200_000  # csv's default limit is 131,072 characters: the old reader raised _csv.Error
    path = tmp_path / "long.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([["prompt", "model", "response"], ["q", "m", long]])
    assert read_recording(path).answers("m")["q"].text == long
    assert csv.field_size_limit() == 131_072  # the process-wide setting is left as it was


@pytest.mark.parametrize("content, problem", [
    ("prompt,model,response,model\nq,m,a,n\n", ":1: header: column(s) ['model'] appear more than once"),
    ('prompt,model,response\nq,m,a\n"q2,m,a\n', ":3: (row): 1 fields, the header names 3"),
    ("prompt,model,response\nq,m\n", ":2: (row): 2 fields, the header names 3"),
])
def test_malformed_csv_names_the_line(tmp_path, content, problem):
    path = tmp_path / "bad.csv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(RecordingError) as e:
        read_recording(path)
    assert str(e.value).startswith(f"{path}{problem}")


def test_a_deep_jsonl_row_and_a_truncated_parquet_name_where(tmp_path):
    deep = _jsonl(tmp_path / "deep.jsonl", [json.dumps(ROW), '{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}"])
    with pytest.raises(RecordingError, match=r"deep.jsonl:2: not readable: JSON nested too deeply"):
        read_recording(deep)
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    whole = tmp_path / "whole.parquet"
    pq.write_table(pa.Table.from_pylist([ROW] * 50), whole)
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    with pytest.raises(RecordingError, match=r"cut.parquet:0: not a readable Parquet file"):
        read_recording(cut)


@pytest.mark.parametrize("line, problem", [
    ('{"prompt": "q2", "model": "m", "response": "a", "output_tokens": NaN}', "2: output_tokens: not a token count"),
    ('{"prompt": "q2", "model": "m", "response": "a", "latency_s": NaN}', "2: latency_s: not a latency"),
    ('{"prompt": "q2", "model": "m", "response": "a", "input_tokens": 1e12}', "2: input_tokens: not a token count"),
    ('{"prompt": "q2", "model": NaN, "response": "a"}', "2: model: not a model name: nan"),
    ('{"prompt": "q2", "model": {"name": "m"}, "response": "a"}', "2: model: not a model name"),
    ('{"prompt": "q2", "model": "m", "response": "a", "cost_usd": -1}', "2: cost_usd: not a cost in USD"),
])
def test_values_that_were_accepted_silently_are_errors(tmp_path, line, problem):
    path = _jsonl(tmp_path / "r.jsonl", [json.dumps(ROW), line])
    with pytest.raises(RecordingError) as e:
        read_recording(path)
    assert str(e.value).startswith(f"{path}:{problem}")


def test_conflicting_duplicates_are_an_error_unless_the_user_says_which_wins(tmp_path):
    other = {**ROW, "prompt": " q1 ", "response": "b"}  # the same question once whitespace is collapsed
    path = _jsonl(tmp_path / "d.jsonl", [json.dumps(ROW), json.dumps({**ROW, "model": "n"}), json.dumps(other)])
    with pytest.raises(RecordingError, match=r"d.jsonl:3: prompt: this question is recorded for 'm' at line 1 too"):
        read_recording(path)
    assert read_recording(path, duplicates="first").answers("m")["q1"].text == "a"
    assert read_recording(path, duplicates="last").answers("m")["q1"].text == "b"
    same = _jsonl(tmp_path / "s.jsonl", [json.dumps(ROW), json.dumps(ROW)])  # an identical repeat is fine
    assert read_recording(same).answers("m")["q1"].text == "a"


def test_skip_lists_every_bad_row_with_its_line_and_reads_the_rest(tmp_path):
    path = _jsonl(tmp_path / "r.jsonl", [json.dumps(ROW), "{not json",
                                          json.dumps({**ROW, "prompt": "q3", "grade": -0.033}),
                                          json.dumps({**ROW, "prompt": "q4"}), "[1]"])
    rec = read_recording(path, on_error="skip")
    assert sorted(rec.answers("m")) == ["q1", "q4"]
    assert rec.skipped == [f"{path}:2: not JSON: Expecting property name enclosed in double quotes (column 2)",
                           f"{path}:5: a row must be a JSON object, got list",
                           f"{path}:3: grade: not a grade: -0.033 (use 1/0, true/false, or a score in [0, 1]; a "
                           "score on another scale needs grade_scale)"]
    # the same score on a scale that holds it: (-0.033 - (-1)) / (1 - (-1)) = 0.967 / 2
    scaled = read_recording(path, on_error="skip", grade_scale=(-1, 1))
    assert scaled.answers("m")["q3"].grade == pytest.approx(0.4835)


def test_nested_fields_are_read_by_path(tmp_path):
    row = {"prompt": "q", "model": "m", "response": "a", "usage": {"prompt_tokens": 7, "details": {"cached": 2}}}
    path = _jsonl(tmp_path / "n.jsonl", [json.dumps(row)])
    got = read_recording(path, tokens_in_column="usage.prompt_tokens", tokens_cached_column="usage.details.cached")
    assert (got.answers("m")["q"].tokens_in, got.answers("m")["q"].tokens_cached) == (7, 2)
    with pytest.raises(RecordingError, match=r"no column\(s\) \['cost.usd'\]"):  # named, so it must be there
        read_recording(path, cost_column="cost.usd")


# ---------------------------------------------------------------------------------------------- messages
def _call(i, name, **args):
    return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


MESSAGES = [
    {"role": "user", "content": "Where is order 7?"},
    {"role": "assistant", "content": "Looking.", "tool_calls": [_call(1, "find", order=7), _call(2, "eta", order=7)]},
    {"role": "tool", "tool_call_id": "c2", "content": "tomorrow"},  # results may come in any order
    {"role": "tool", "tool_call_id": "c1", "content": "shipped"},
    {"role": "assistant", "content": "It shipped and arrives tomorrow."},
    {"role": "user", "content": "Thanks ###STOP###"},
]


def test_openai_messages_become_a_trajectory_and_go_back():
    t = from_openai_messages(MESSAGES, "t7")
    assert t.prompt == "Where is order 7?" and t.finish_reason == "user_stop"
    first = t.turns[0]
    assert first.text == render_assistant("Looking.", [ToolCall(name="find", arguments={"order": 7}),
                                                       ToolCall(name="eta", arguments={"order": 7})])
    assert [(o.tool, o.content) for o in first.observations] == [("find", "shipped"), ("eta", "tomorrow")]
    assert t.turns[1].user == UserTurn(text="Thanks ###STOP###", done=True, label="recorded")
    back = to_openai_messages(t)
    assert back == [MESSAGES[0], MESSAGES[1], MESSAGES[3], MESSAGES[2], *MESSAGES[4:]]  # results in call order
    assert from_openai_messages(back, "t7") == t


@pytest.mark.parametrize("messages, problem", [
    ([{"role": "robot", "content": "x"}], "messages[0].role: 'robot' is not one of"),
    ([MESSAGES[0], {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}],
     "messages[1].tool_calls[0].function.arguments: not JSON"),
    ([MESSAGES[0], MESSAGES[1], MESSAGES[2], MESSAGES[4]], "messages[3]: the calls ['c1'] of the assistant message"),
    ([MESSAGES[0], {"role": "tool", "tool_call_id": "c1", "content": "x"}], "messages[1]: a tool result with no call"),
    ([{"role": "assistant", "content": "hi"}], "messages[0]: the assistant speaks before the user"),
])
def test_malformed_conversations_name_the_message_and_field(messages, problem):
    with pytest.raises(ValueError) as e:
        from_openai_messages(messages, "t", source="convs.jsonl:4")
    assert str(e.value).startswith(f"convs.jsonl:4: {problem}")


# ---------------------------------------------------------------------------------------------- users
def test_a_replayed_user_honours_its_stop_marker():
    user = ReplayedUser(["Yes please.", "Thanks! ###STOP###", "never asked"])
    replies = [asyncio.run(user.reply([])) for _ in range(2)]
    assert [(r.text, r.done, r.label) for r in replies] == [("Yes please.", False, "replay"),
                                                            ("Thanks!", True, "replay")]
    custom = ReplayedUser([UserTurn(text="ok <END>", cost_usd=0.5)], stop="<END>")
    reply = asyncio.run(custom.reply([]))
    assert (reply.text, reply.done, reply.cost_usd) == ("ok", True, 0.5)  # its recorded bill kept


# ---------------------------------------------------------------------------------------------- scripts
def test_tasks_that_open_alike_each_get_their_own_script():
    tasks = [Task(id=f"t{i}", prompt="Hello, I need help.", answer=str(i), checker="exact") for i in range(3)]
    scripts = {"t0": ["zero"], "t1": ["one"], "t2": [["two-a"], ["two-b"]]}  # t2: one script per episode
    engine = ScriptedEngine(TOK, scripts, tasks=tasks)  # the old engine refused: "same prompt"
    got = rollout(Environment(train=tasks, tools=Toolbox([])), engine, config=RolloutConfig(max_turns=2), group_size=2)
    assert [(t.task_id, t.group_index, t.final_answer) for t in got] == [
        ("t0", 0, "zero"), ("t0", 1, "zero"), ("t1", 0, "one"), ("t1", 1, "one"),
        ("t2", 0, "two-a"), ("t2", 1, "two-b")]
    # outside a rollout nothing says which task an episode is, and the words cannot tell
    prompt = TOK.encode(TOK.apply_chat_template([{"role": "user", "content": "Hello, I need help."}], tokenize=False,
                                                add_generation_prompt=True), add_special_tokens=False)
    with pytest.raises(ScriptExhausted, match=r"tasks \['t0', 't1', 't2'\] open with the same words"):
        ScriptedEngine(TOK, scripts, tasks=tasks).generate([prompt], SamplingParams(max_new_tokens=8))


# ---------------------------------------------------------------------------------------------- domains
def test_numbers_are_matched_without_thousands_separators():
    assert mentions_number("Refunded $23,553 today.", "23553")
    assert mentions_number("1,234,567 points", "1234567") and mentions_number("total 23553", "23,553")
    assert not mentions_number("$123,553", "23553") and not mentions_number("items 2, 3", "23")


def test_a_domain_from_schemas_and_callables_with_any_state_name_and_its_own_answer_rule():
    db = {"stock": {"pen": 3}}

    def invoke(data, item, count=1):  # a benchmark's tool: the state is `data`, the name is not the tool's
        data["stock"][item] -= count
        return f"{data['stock'][item]} left"

    schema = {"type": "function", "function": {"name": "take", "description": "Take items from stock.",
                                               "parameters": {"type": "object", "properties": {
                                                   "item": {"type": "string"}, "count": {"type": "integer"}},
                                                   "required": ["item"]}}}
    mcp = {"name": "look", "description": "How many are left.", "inputSchema": {
        "type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]}}
    domain = DBDomain("shop", lambda task: db, [(schema, invoke), (mcp, lambda data, item: data["stock"][item])],
                      state="data", answer_rule=lambda said, fact: fact.upper() in said)
    assert sorted(domain.functions) == ["look", "take"] and domain.cards()[1].parameters["required"] == ["item"]
    task = Task(id="t", prompt="Take two pens.", meta={"required": ["ok"]},
                golden={"calls": [{"name": "take", "arguments": {"item": "pen", "count": 2}}]})
    env = domain.make_state(task)
    assert env == db and env is not db and env["stock"] is not db["stock"]  # a copy per episode
    domain.replay(task, [ToolCall(name="take", arguments={"item": "pen", "count": 2})])
    assert db == {"stock": {"pen": 3}}  # the shared initial state is never changed
    after = domain.replay(task)
    assert after == {"stock": {"pen": 1}} and domain.golden_hash(task) == state_hash({"stock": {"pen": 1}})
    assert domain.check("OK, done", task, after) == 1.0 and domain.check("ok, done", task, after) == 0.0


def test_a_state_json_cannot_carry_is_deep_copied():
    initial = {"seats": (1, 2), 7: "int key"}  # a tuple and an integer key would not come back from JSON
    domain = DBDomain("d", lambda task: initial, [])
    env = domain.make_state(Task(id="t", prompt="p"))
    assert env == initial and env is not initial and type(env["seats"]) is tuple and 7 in env


# ---------------------------------------------------------------------------------------------- evaluation
def test_episodes_cut_by_the_token_budget_before_any_call_are_warned_about():
    tasks = [Task(id="t", prompt="What is 2 + 2? " * 20, answer="4", checker="exact")]
    config = EVAL_ROLLOUT.model_copy(update={"max_total_tokens": 16})  # the prompt alone is longer
    with pytest.warns(UserWarning, match=r"1 of 1 episodes ended on the token budget before any tool call"):
        report = evaluate(ScriptedEngine(TOK, ["4"]), Environment(test=tasks, tools=Toolbox([])), config=config)
    assert report.trajectories[0].finish_reason == "token_budget"


def test_pgr_and_apgr_are_undefined_without_a_gap_never_infinite():
    for value in (apgr([(0, 0.9), (1, 0.9)], 0.9, 0.9), apgr([(0, 0.9), (0.5, 0.7)], 0.9, 0.6), pgr(0.8, 0.9, 0.9)):
        assert isinstance(value, Undefined)
        assert repr(value).startswith("undefined here, because the strong reference")
    assert apgr([(0, 0.6), (1, 1.0)], 0.6, 1.0) == pytest.approx(0.5)

