"""The tool-call parser turns every hostile body into ToolCallParseError, and the rollout goes on."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchlib.env import Environment
from orchlib.chat import TOOL_CALL, TOOL_CALL_END, ToolCallParseError, parse_tool_calls, render_call
from orchlib.rollout import RolloutConfig, rollout
from orchlib.safejson import MAX_DEPTH
from orchlib.tasks import Task
from orchlib.testing import ScriptedEngine
from orchlib.tools import Toolbox
from orchlib.tools.function import FunctionTool


def wrap(body: str) -> str:
    return f"{TOOL_CALL}\n{body}\n{TOOL_CALL_END}"


def nested(depth: int) -> str:
    return '{"name": "echo", "arguments": {"x": ' + "[" * depth + "]" * depth + "}}"


@pytest.mark.parametrize("depth", [MAX_DEPTH, 1_000, 100_000])
def test_deep_nesting_is_a_parse_error_not_a_recursion_error(depth):
    with pytest.raises(ToolCallParseError, match=f"nested deeper than {MAX_DEPTH} levels"):
        parse_tool_calls(wrap(nested(depth)))


def test_nesting_just_under_the_limit_is_read_back_exactly():
    # arguments = {"x": [[...]]}: the object is level 1, so MAX_DEPTH - 2 lists still fit
    depth = MAX_DEPTH - 2
    [call] = parse_tool_calls(wrap(nested(depth)))[1]
    value, levels = call.arguments["x"], 0
    while isinstance(value, list):
        value, levels = (value[0] if value else None), levels + 1
    assert levels == depth


@pytest.mark.parametrize("body, needle", [
    ('{"name": "echo", "arguments": {"x": ' + "7" * 5000 + "}}", "4300 digits"),
    ('{"name": "echo\\ud800", "arguments": {}}', "unpaired surrogate"),
    ('{"name": "echo", "arguments": {"\\udfff": 1}}', "unpaired surrogate"),
])
def test_values_python_cannot_carry_on_are_parse_errors(body, needle):
    with pytest.raises(ToolCallParseError, match=needle):
        parse_tool_calls(wrap(body))


def echo(x: str = "") -> str:
    """Say what came in.

    Args:
        x: anything
    """
    return json.dumps(x)


def test_a_deeply_nested_call_is_an_error_observation_and_the_rollout_goes_on(tiny_policy):
    _, tok = tiny_policy
    box = Toolbox([FunctionTool.from_function(echo)])
    task = Task(id="t", prompt="Say 3.", answer="3", checker="numeric")
    engine = ScriptedEngine(tok, [wrap(nested(1_000)), "3"])
    [traj] = rollout(Environment(train=[task], tools=box), engine, config=RolloutConfig(max_turns=3))
    assert traj.errors == {"malformed_call": 1}
    assert traj.final_answer == "3" and traj.outcome == 1.0


# The fuzz itself (bytes and structured JSON) is benchmarks/bench_fuzz.py, with a short run in
# tests/test_hardening_fuzz.py; here, what is accepted must survive rendering.
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                           lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(), kids, max_size=4),
                           max_leaves=30)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["name", "arguments", "extra"]), json_values, max_size=3))
def test_an_accepted_call_renders_and_parses_back_the_same(obj):
    try:
        _, calls = parse_tool_calls(wrap(json.dumps(obj)))
    except ToolCallParseError:
        return
    # whatever is accepted renders and parses back to the same call
    assert parse_tool_calls(render_call(calls[0]))[1] == calls
