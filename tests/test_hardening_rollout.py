"""A policy's output and a task's checker never end a whole rollout: a call with non-finite JSON is an
error observation, a checker that raises is its episode's counted error; and a scripted engine replays
each episode's own turns even where two conversations are the same so far."""

from __future__ import annotations

import pytest

from orchlib.chat import TOOL_CALL, TOOL_CALL_END, ToolCallParseError, parse_tool_calls, render_call
from orchlib.env import Environment
from orchlib.envs.db import DBDomain
from orchlib.models import build_tokenizer
from orchlib.rollout import RolloutConfig, rollout
from orchlib.tasks import Task
from orchlib.testing import ScriptedEngine
from orchlib.tools import Toolbox
from orchlib.tools.function import FunctionTool
from orchlib.trajectory import ToolCall

TOK = build_tokenizer()
CONFIG = RolloutConfig(max_turns=4, max_new_tokens=64)


def pay(env: dict, amount: float) -> str:
    """Pay an amount.

    Args:
        amount: how much, in dollars
    """
    env["paid"] = amount
    return f"paid {amount}"


PAYING = DBDomain("paying", lambda task: {"paid": 0}, [pay])


def _call(amount_json: str) -> str:
    return f'{TOOL_CALL}\n{{"name": "pay", "arguments": {{"amount": {amount_json}}}}}\n{TOOL_CALL_END}'


@pytest.mark.parametrize("word", ["NaN", "Infinity", "-Infinity"])
def test_a_non_finite_number_is_not_json_and_the_parser_says_so(word):
    with pytest.raises(ToolCallParseError, match=f"{word} is not a JSON number"):
        parse_tool_calls(_call(word))
    assert parse_tool_calls(_call("1e308"))[1] == [ToolCall(name="pay", arguments={"amount": 1e308})]


@pytest.mark.parametrize("word", ["NaN", "Infinity", "-Infinity"])
def test_a_call_with_non_finite_arguments_is_an_error_observation_and_the_rollout_goes_on(word):
    tasks = [Task(id=f"t{i}", prompt=f"Pay for order {i}.", state=PAYING.make_state, checker=PAYING.check)
             for i in (1, 2)]
    engine = ScriptedEngine(TOK, {"t1": [_call(word), "Sorry, I could not pay."],
                                  "t2": [_call("7"), "Paid 7."]}, tasks=tasks)
    trajs, envs = rollout(Environment(train=tasks, tools=PAYING.toolbox), engine, config=CONFIG, return_states=True)
    assert [t.task_id for t in trajs] == ["t1", "t2"]
    first, second = trajs
    [obs] = first.turns[0].observations
    assert obs.error_kind == "malformed_call" and f"{word} is not a JSON number" in obs.error
    assert first.errors == {"malformed_call": 1} and first.calls == {}
    assert first.final_answer == "Sorry, I could not pay." and first.finish_reason == "answer"
    assert envs[0] == {"paid": 0}  # nothing reached the tool
    # no golden calls: the golden state is the initial one, which t1 kept and t2 changed
    assert first.outcome == 1.0 and "checker_error" not in first.meta
    assert second.errors == {} and envs[1] == {"paid": 7} and second.outcome == 0.0
    assert [o.content for o in second.turns[0].observations] == ["paid 7"]


def test_an_api_policys_call_with_non_finite_arguments_is_malformed():
    from orchlib.engines.openai import _native_call

    bad = _native_call({"id": "c1", "function": {"name": "pay", "arguments": '{"amount": NaN}'}})
    assert bad.call is None and bad.error == "malformed tool call: arguments of 'pay': NaN is not a JSON number " \
                                             "(a number must be finite)"
    ollama = _native_call({"id": "c2", "function": {"name": "pay", "arguments": {"amount": float("-inf")}}})
    assert ollama.call is None and "-Infinity is not a JSON number" in ollama.error
    good = _native_call({"id": "c3", "function": {"name": "pay", "arguments": '{"amount": 2.5}'}})
    assert good.call == ToolCall(name="pay", arguments={"amount": 2.5})


def echo(x: str) -> str:
    """Say it back.

    Args:
        x: anything
    """
    return x


def judge_down(answer, task, state=None):
    raise RuntimeError("judge unreachable")


def test_a_checker_that_raises_is_that_episodes_error_and_the_others_are_scored():
    box = Toolbox([FunctionTool.from_function(echo)])
    tasks = [Task(id="judged", prompt="Say 3.", answer="3", checker=judge_down),
             Task(id="exact", prompt="Say 4.", answer="4", checker="exact")]
    engine = ScriptedEngine(TOK, {"judged": [render_call(ToolCall(name="echo", arguments={"x": "3"})), "3"],
                                  "exact": ["4"]}, tasks=tasks)
    judged, exact = rollout(Environment(train=tasks, tools=box), engine, config=CONFIG)
    assert judged.final_answer == "3" and judged.finish_reason == "answer"
    assert judged.errors == {"checker_failure": 1} and judged.num_errors == 1
    assert judged.meta["checker_error"] == "RuntimeError: judge unreachable"
    assert judged.outcome == 0.0
    assert exact.errors == {} and exact.outcome == 1.0 and "checker_error" not in exact.meta
    # the error is kept with the others, and counted after the tool errors of the same episode
    tasks[0] = tasks[0].model_copy(update={"id": "judged-2"})
    engine = ScriptedEngine(TOK, {"judged-2": [render_call(ToolCall(name="nope")), "3"]}, tasks=tasks[:1])
    [again] = rollout(Environment(train=tasks[:1], tools=box), engine, config=CONFIG)
    assert again.errors == {"checker_failure": 1, "unknown_tool": 1}


# ------------------------------------------------------------------ a scripted engine, episode by episode
def whose(env: dict) -> str:
    """Whose episode this is."""
    return env["who"]


def _whose_tasks(prompt: str = "Hello, I need help.") -> tuple[list[Task], Toolbox]:
    domain = DBDomain("who", lambda task: {"who": task.id}, [whose])
    return [Task(id=i, prompt=prompt, state=domain.make_state, checker="contains", answer="x") for i in ("a", "b")], \
        domain.toolbox


ASK = render_call(ToolCall(name="whose"))


def test_episodes_that_share_a_conversation_so_far_each_replay_their_own_script():
    # the same opening words, the same first reply, the same tool result (echo of the same text)
    box = Toolbox([FunctionTool.from_function(echo)])
    same = render_call(ToolCall(name="echo", arguments={"x": "hi"}))
    tasks = [Task(id=i, prompt="Hello, I need help.", answer=i, checker="exact") for i in ("alpha", "beta")]
    engine = ScriptedEngine(TOK, {"alpha": [same, "alpha"], "beta": [same, "beta"]}, tasks=tasks)
    trajs = rollout(Environment(train=tasks, tools=box), engine, config=CONFIG)
    assert [t.final_answer for t in trajs] == ["alpha", "beta"]
    assert [t.outcome for t in trajs] == [1.0, 1.0]


def test_an_episode_that_ends_early_does_not_hand_its_script_to_the_other():
    # a and b open alike and write the same first call; the tool answers each its own task id, a then
    # answers while b goes on for two more turns
    tasks, box = _whose_tasks()
    engine = ScriptedEngine(TOK, {"a": [ASK, "a"], "b": [ASK, ASK, "b"]}, tasks=tasks)
    a, b = rollout(Environment(train=tasks, tools=box), engine, config=CONFIG)
    assert [t.text for t in a.turns] == [ASK, "a"] and a.final_answer == "a"
    assert [t.text for t in b.turns] == [ASK, ASK, "b"] and b.final_answer == "b"
    assert [o.content for t in b.turns for o in t.observations] == ["b", "b"]


def test_episodes_of_one_task_each_replay_their_own_script():
    tasks, box = _whose_tasks()
    engine = ScriptedEngine(TOK, {"a": [[ASK, "first"], [ASK, "second"]]}, tasks=tasks[:1])
    trajs = rollout(Environment(train=tasks[:1], tools=box), engine, config=CONFIG, group_size=2)
    assert [(t.group_index, t.final_answer) for t in trajs] == [(0, "first"), (1, "second")]
    # and again: a second rollout on the same engine starts its episodes over
    trajs = rollout(Environment(train=tasks[:1], tools=box), engine, config=CONFIG, group_size=2)
    assert [(t.group_index, t.final_answer) for t in trajs] == [(0, "first"), (1, "second")]


def test_recorded_trajectories_replay_by_task_and_episode():
    tasks, box = _whose_tasks()
    scripts = {"a": [ASK, "a"], "b": [ASK, ASK, "b"]}
    env = Environment(train=tasks, tools=box)
    first = rollout(env, ScriptedEngine(TOK, scripts, tasks=tasks), config=CONFIG)
    again = rollout(env, ScriptedEngine.from_trajectories(TOK, first), config=CONFIG)
    assert [[t.text for t in tr.turns] for tr in again] == [[ASK, "a"], [ASK, ASK, "b"]]


def test_a_function_script_reads_its_own_conversation():
    tasks, box = _whose_tasks()

    def script(text: str, turn: int) -> str:  # answers with what the tool told it, after one call
        return ASK if turn == 0 else text.rsplit("<tool_response>\n", 1)[1].split("\n", 1)[0]

    trajs = rollout(Environment(train=tasks, tools=box), ScriptedEngine(TOK, script), config=CONFIG)
    assert [t.final_answer for t in trajs] == ["a", "b"]
