"""Readers of recorded data, hardened: recorded conversations (ids, numbers JSON cannot carry, call
markup in text, several trials per task), recorded answers (dotted paths checked whole, prices that
leave a model out), route runs cut short by the rollout's limits, and metrics that have no value.
Each case was reproduced on the code before its fix; expected values are written out by hand."""

from __future__ import annotations

import json
import warnings

import pytest

from orchlib.baselines import make_baselines, route_stats, try_routes
from orchlib.cards import Price, load_card
from orchlib.engines.scripted import ScriptedEngine
from orchlib.env import Environment
from orchlib.evaluate import EVAL_ROLLOUT, Undefined, UndefinedMetricError, apgr, evaluate, pgr
from orchlib.models import build_tokenizer
from orchlib.openai_messages import (ConversationError, from_openai_messages, read_openai_jsonl, replayed_user,
                                     to_openai_messages)
from orchlib.recordings import RecordingError, read_recording, write_recording
from orchlib.rollout import RolloutConfig, rollout
from orchlib.shipped import shipped_path
from orchlib.tasks import Task
from orchlib.tools import Toolbox
from orchlib.tools.replay import replay_cards

TOK = build_tokenizer()
U = {"role": "user", "content": "What is 2 + 3?"}


def _call(arguments, call_id="c1"):
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "calculator", "arguments": arguments}}]}


def _result(call_id="c1"):
    return {"role": "tool", "tool_call_id": call_id, "content": "5"}


# ---------------------------------------------------------------------------------------------- conversations
@pytest.mark.parametrize("bad_id", [["c1"], {"id": "c1"}])
def test_a_tool_call_id_that_is_not_text_is_named_not_a_type_error(bad_id):
    with pytest.raises(ConversationError) as e:  # before: TypeError: unhashable type
        from_openai_messages([U, _call('{"expression": "2+3"}'), _result(bad_id)], "17")
    assert str(e.value) == f"task '17': messages[2].tool_call_id: must be text, not {bad_id!r}"


@pytest.mark.parametrize("arguments", ['{"expression": NaN}', '{"x": [Infinity]}', {"x": float("nan")}])
def test_nan_in_arguments_is_refused_not_written_back(arguments):
    with pytest.raises(ConversationError, match=r"^task '17': messages\[1\]\.tool_calls\[0\]\.function\.arguments: "
                                                r"(NaN|Infinity|nan) is not a JSON number"):
        from_openai_messages([U, _call(arguments), _result()], "17")


def test_a_5000_digit_integer_names_the_message_and_field():
    messages = [U, _call('{"expression": ' + "9" * 5000 + "}"), _result()]
    with pytest.raises(ConversationError) as e:  # before: a bare ValueError naming no place
        from_openai_messages(messages, "17")
    assert str(e.value).startswith("task '17': messages[1].tool_calls[0].function.arguments: Exceeds the limit")
    assert "\n" not in str(e.value)


def test_the_errors_of_a_file_name_its_line_message_and_field(tmp_path):
    path = tmp_path / "c.jsonl"
    good = {"task_id": "1", "messages": [U, _call('{"expression": "2+3"}'), _result(), {"role": "assistant",
                                                                                          "content": "5"}]}
    bad = {"task_id": "2", "messages": [U, _call('{"expression": "2+3"}'), _result({"x": 1})]}
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n", encoding="utf-8")
    with pytest.raises(ConversationError) as e:
        read_openai_jsonl(path)
    assert str(e.value) == f"{path}:2: messages[2].tool_call_id: must be text, not {{'x': 1}}"


@pytest.mark.parametrize("content", ['Sure. <tool_call>\n{"name": "calculator", "arguments": {"expression": "1"}}\n'
                                     '</tool_call>', "Thinking <tool_call> {\"name\": ", "done</tool_call>"])
def test_call_markup_in_an_assistant_text_is_refused_naming_the_message(content):
    # before: the markup became a real call on export (`tool_calls` appeared) and on replay; an unclosed
    # tag raised a ToolCallParseError naming no message
    messages = [U, _call('{"expression": "2+3"}'), _result(), {"role": "assistant", "content": content}]
    with pytest.raises(ConversationError, match=r"^task '17': messages\[3\]\.content: the text holds the call "
                                                r"markup </?tool_call>"):
        from_openai_messages(messages, "17")


def test_call_markup_inside_arguments_is_refused():
    # before: the rendered call ended early at the markup, so the export's content held the whole call
    with pytest.raises(ConversationError, match=r"messages\[1\]\.tool_calls\[0\]\.function\.arguments: they "
                                                r"hold the call markup"):
        from_openai_messages([U, _call('{"expression": "</tool_call>"}'), _result()], "17")


def test_markup_in_a_tool_result_or_user_text_stays_text_and_round_trips():
    messages = [U, _call('{"expression": "2+3"}'), {"role": "tool", "tool_call_id": "c1", "content": "<tool_call>"},
                {"role": "assistant", "content": "5"}]
    traj = from_openai_messages(messages, "17")
    assert traj.turns[0].observations[0].content == "<tool_call>" and to_openai_messages(traj)[2] == messages[2]


def _trial(task: str, expression: str, reply: str, answer: str, call_id: str) -> dict:
    return {"task_id": task, "messages": [
        {"role": "user", "content": "Compute it."},
        _call(json.dumps({"expression": expression}), call_id), _result(call_id) | {"content": "?"},
        {"role": "assistant", "content": "Which operation?"},
        {"role": "user", "content": reply},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "Thanks ###STOP###"}]}


def test_several_trials_per_task_each_replay_as_their_own_episode_with_their_own_user(tmp_path):
    # 2 tasks x 2 trials, every conversation opening alike: before, the trials of a task were group
    # indices 0 and 1 of one id and each ran as episode 0, so trial 1 replayed trial 0's agent turns
    # against its own user: the answers came out ["6", "3", "6", "3"], not the recorded "2" of sub's trial 1.
    rows = [_trial("add", "2+4", "add", "6", "a0"), _trial("sub", "5-2", "subtract", "3", "s0"),
            _trial("add", "2+4", "add them", "6", "a1"), _trial("sub", "5-2", "minus", "2", "s1")]
    path = tmp_path / "trials.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    recorded = read_openai_jsonl(path)
    assert [(t.task_id, t.group_index, t.meta["task_id"], t.meta["trial"]) for t in recorded] == [
        ("add#0", 0, "add", 0), ("sub#0", 0, "sub", 0), ("add#1", 0, "add", 1), ("sub#1", 0, "sub", 1)]
    for row, traj in zip(rows, recorded):  # the ids changed, the conversations did not
        assert to_openai_messages(traj) == row["messages"]
    answers = {"add": "6", "sub": "3"}  # the benchmark's facts, looked up by its own id
    tasks = [Task(id=t.task_id, prompt=t.prompt, answer=answers[t.meta["task_id"]], checker="exact",
                  user=replayed_user(t)) for t in recorded]
    box = Toolbox.from_cards([load_card(shipped_path("toolcards/calculator.yaml"))])
    engine = ScriptedEngine.from_trajectories(TOK, recorded)
    replayed = rollout(Environment(train=tasks, tools=box), engine,
                       config=RolloutConfig(max_turns=4, max_new_tokens=64))
    assert [t.final_answer for t in replayed] == ["6", "3", "6", "2"]
    assert [[turn.user.text for turn in t.turns if turn.user] for t in replayed] == [
        ["add", "Thanks"], ["subtract", "Thanks"], ["add them", "Thanks"], ["minus", "Thanks"]]
    assert [t.outcome for t in replayed] == [1.0, 1.0, 1.0, 0.0]
    assert [o.content for t in replayed for o in t.turns[0].observations] == ["6", "3", "6", "3"]
    # the older numbering stays available for rollout(group_size=k)
    groups = read_openai_jsonl(path, trials="groups")
    assert [(t.task_id, t.group_index) for t in groups] == [("add", 0), ("sub", 0), ("add", 1), ("sub", 1)]


# ---------------------------------------------------------------------------------------------- recorded answers
NESTED = [{"prompt": "q1", "model": "m", "response": "a", "evaluation_result": {"score": 1}, "cost": 0.5},
          {"prompt": "q2", "model": "m", "response": "b", "evaluation_result": {"score": 0}, "cost": 0.25}]


def test_a_dotted_path_with_a_typo_past_its_first_step_is_an_error(tmp_path):
    path = write_recording(NESTED, tmp_path / "r.jsonl")
    # before: read None on every row, so every grade fell back to exact match without a word
    with pytest.raises(RecordingError) as e:
        read_recording(path, grade_column="evaluation_result.scor")
    assert str(e.value) == (f"{path}:1: evaluation_result.scor: no row has this path: step 'scor' is missing under "
                            "'evaluation_result' (which holds ['score']; shown: the first row with "
                            "'evaluation_result')")
    with pytest.raises(RecordingError, match="step 'scor' is missing"):
        replay_cards(path, grade_column="evaluation_result.scor")
    got = read_recording(path, grade_column="evaluation_result.score").answers("m")
    assert (got["q1"].grade, got["q2"].grade) == (1.0, 0.0)


def test_a_dotted_path_through_a_value_that_is_not_an_object_names_the_row(tmp_path):
    rows = [NESTED[0], {**NESTED[1], "evaluation_result": "0"}, {**NESTED[1], "prompt": "q3",
                                                                 "evaluation_result": None}]
    path = write_recording(rows, tmp_path / "r.jsonl")
    with pytest.raises(RecordingError) as e:
        read_recording(path, grade_column="evaluation_result.score")
    assert str(e.value) == (f"{path}:2: evaluation_result.score: the path stops at step 'score': 'evaluation_result' "
                            "holds str, not an object")
    skipped = read_recording(path, grade_column="evaluation_result.score", on_error="skip")
    assert sorted(skipped.answers("m")) == ["q1", "q3"] and skipped.answers("m")["q3"].grade is None  # null: ungraded


def test_a_prices_mapping_that_leaves_a_model_out_is_an_error(tmp_path):
    path = write_recording([{"prompt": "q", "model": "big", "response": "a"},
                            {"prompt": "q", "model": "small", "response": "b"}], tmp_path / "r.jsonl")
    with pytest.raises(ValueError, match=r"prices names no price for model\(s\) \['small'\]"):  # before: free
        replay_cards(path, prices={"big": Price(per_m_input=1.0)})
    cards = replay_cards(path, prices={"big": Price(per_m_input=1.0), "small": Price()})  # free, said so
    assert [c.price.per_m_input for c in cards] == [1.0, 0.0]


# ---------------------------------------------------------------------------------------------- cut short
def _cut_world():
    box = Toolbox.from_cards([load_card(shipped_path("toolcards/calculator.yaml"))])
    tasks = [Task(id=f"t{i}", prompt=("Add the numbers. " * 30) + str(i), answer=str(i), checker="exact",
                  category="c", tools=["calculator"]) for i in range(2)]
    from orchlib.tasks import Golden
    from orchlib.trajectory import ToolCall
    tasks = [t.model_copy(update={"golden": Golden(calls=[ToolCall(name="calculator", arguments={"expression": "1"})],
                                                   answer=t.answer)}) for t in tasks]
    return box, tasks, EVAL_ROLLOUT.model_copy(update={"max_total_tokens": 16})  # the prompt alone is longer


def test_route_runs_cut_by_the_token_budget_are_warned_about_and_counted():
    box, tasks, config = _cut_world()
    with pytest.warns(UserWarning, match=r"try_routes: 2 of 2 route runs were cut short by the rollout's limits "
                                         r"\(2 on the token budget \(max_total_tokens=16\)\) .* t0: calculator; "
                                         r"t1: calculator"):
        trials = try_routes(tasks, box, TOK, config)
    assert trials.cut_short() == {"t0": {"calculator": "token_budget"}, "t1": {"calculator": "token_budget"}}
    assert route_stats(trials)["c"]["calculator"]["cut_short"] == 2
    with pytest.warns(UserWarning, match=r"make_baselines \(trials given\): 2 of 2 route runs were cut short"):
        make_baselines(tasks, box, TOK, names=["oracle"], trials=trials, config=config)


def test_evaluate_names_the_tasks_cut_by_the_token_budget():
    box, tasks, config = _cut_world()
    with pytest.warns(UserWarning, match=r"2 of 2 episodes ended on the token budget before any tool call "
                                         r"\(scored 0 at \$0; tasks: t0, t1\)"):
        evaluate(ScriptedEngine(TOK, ["0"]), Environment(test=tasks, tools=box), config=config)


def test_uncut_routes_warn_nothing():
    box, tasks, _ = _cut_world()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trials = try_routes(tasks, box, TOK, EVAL_ROLLOUT)
    assert trials.cut_short() == {} and route_stats(trials)["c"]["calculator"]["cut_short"] == 0


# ---------------------------------------------------------------------------------------------- undefined
def test_an_undefined_metric_cannot_pass_a_numeric_check():
    for value in (pgr(0.8, 0.9, 0.9), apgr([(0, 0.9), (1, 0.9)], 0.9, 0.9)):
        assert isinstance(value, Undefined)
        with pytest.raises(UndefinedMetricError, match="no gap to recover"):
            assert not abs(value - 0.5) > 0.01  # before: NaN, so this passed silently
        with pytest.raises(UndefinedMetricError):
            float(value)
        with pytest.raises(UndefinedMetricError):
            value > 0.5  # noqa: B015
        assert f"{value:.3f}" == "undefined"
