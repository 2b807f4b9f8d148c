"""Function tools and the calculator: arguments checked before the call, sync and async functions,
`env` passed through, failures and import problems as clear errors."""

from __future__ import annotations

import asyncio
from fractions import Fraction
from pathlib import Path
from typing import Annotated

import pytest

from orchlib.cards import CardError, ToolCard, load_card
from orchlib.tools import STATE, FunctionTool, State, ToolContext, bind, build_tool
from orchlib.tools.calculator import calculate, evaluate

CARDS = Path(__file__).resolve().parents[1] / "toolcards"


@pytest.mark.parametrize("expression, expected", [
    ("(16 - 3 - 4) * 2", "18"),
    ("0.1 + 0.2", "0.3"),                 # exact, not 0.30000000000000004
    ("1/3", "1/3 ≈ 0.333333333333"),
    ("2^10", "1024"),
    ("7 // 2 + 7 % 2", "4"),
    ("-(3 - 5) * 1.5", "3"),
    ("-(3 - 5) * 1.25", "2.5"),
    ("1,000 * $3", "3000"),
    ("round(2/3, 2) + abs(-1) + max(1, 2, 3)", "4.67"),
    ("5 / 8", "0.625"),
    ("2 ** -2", "0.25"),
    ("10 × 3 ÷ 4", "7.5"),
])
def test_calculator_reference_values(expression, expected):
    assert calculate(expression) == expected


@pytest.mark.parametrize("expression, problem", [
    ("__import__('os').system('true')", "not allowed"),
    ("9 ** 9 ** 9", "exponent larger than 1000"),
    ("10 ** 999 * 10 ** 999", "more than 1000 digits"),
    ("1 / 0", "division by zero"),
    ("2 ** 0.5", "whole-number exponents"),
    ("x + 1", "Name is not allowed"),
    ("'a' * 3", "only numbers are allowed, not 'a'"),
    ("min()", "min needs at least one number"),
    ("1 +", "not an arithmetic expression"),
])
def test_calculator_refuses(expression, problem):
    with pytest.raises(ValueError, match=problem):
        evaluate(expression)


def test_calculator_card_matches_its_function_and_runs():
    card = load_card(CARDS / "calculator.yaml")
    assert card.parameters == ToolCard.from_function(calculate).parameters | {
        "properties": card.parameters["properties"]} and card.parameters["required"] == ["expression"]
    tool = build_tool(card)
    obs = tool.call_sync({"expression": "12 * (3 + 4)"})
    assert (obs.content, obs.error, obs.tool, obs.cost_usd) == ("84", None, "calculator", 0.0)
    assert 0 < obs.latency_s < 1
    bad = tool.call_sync({"expression": "open('x')"})
    assert bad.error_kind == "tool_failure" and bad.content.startswith("error: ")
    assert bad.error == "calculator failed: ValueError: function 'open' is not allowed (abs, min, max, round)"


calls: list[dict] = []


def add(a: int, b: int = 1) -> int:
    """Add two numbers.

    Args:
        a: first
        b: second
    """
    calls.append({"a": a, "b": b})
    return a + b


async def slow_upper(text: str) -> dict:
    """Upper-case after a pause.

    Args:
        text: what to shout
    """
    await asyncio.sleep(0.01)
    return {"shout": text.upper()}


def count_in_db(table: str, env) -> int:
    """Rows in a table of the episode's database.

    Args:
        table: table name
    """
    return len(env[table])


def broken(x: int) -> str:
    """Always fails.

    Args:
        x: anything
    """
    raise RuntimeError(f"cannot handle {x}")


def test_sync_async_and_env_functions():
    calls.clear()
    assert FunctionTool.from_function(add).call_sync({"a": 2, "b": 3}).content == "5"
    assert calls == [{"a": 2, "b": 3}]
    assert FunctionTool.from_function(slow_upper).call_sync({"text": "hi"}).content == '{"shout": "HI"}'
    tool = FunctionTool.from_function(count_in_db)
    assert "env" not in tool.card.parameters["properties"]
    obs = tool.call_sync({"table": "users"}, ToolContext(state={"users": [1, 2, 3]}))
    assert obs.content == "3"


def test_schema_violation_never_calls_the_function():
    calls.clear()
    tool = FunctionTool.from_function(add)
    for args, where in [({"a": "two"}, "at a: 'two' is not of type 'integer'"),
                        ({}, "at (arguments): 'a' is a required property"),
                        ({"a": 1, "c": 2}, None), ([1, 2], "must be a JSON object")]:
        obs = tool.call_sync(args)
        if where is None:  # extra properties are allowed unless the schema says otherwise,
            assert obs.error_kind == "tool_failure" and "unexpected keyword argument 'c'" in obs.error
            continue
        assert obs.error_kind == "schema_violation" and where in obs.error
        assert obs.cost_usd == 0 and obs.latency_s == 0
    assert calls == []


def test_failing_function_is_an_error_observation_with_its_cost():
    tool = FunctionTool.from_function(broken, price={"per_call": 0.002})
    obs = tool.call_sync({"x": 7})
    assert obs.error == "broken failed: RuntimeError: cannot handle 7"
    assert obs.error_kind == "tool_failure" and obs.cost_usd == pytest.approx(0.002, rel=1e-3)
    assert not obs.final


def test_import_problems_name_the_card_and_path(tmp_path):
    card_file = tmp_path / "ghost.yaml"
    card_file.write_text("name: ghost\nkind: function\ndescription: d\nbackend:\n  callable: orchlib.nothing:fn\n")
    with pytest.raises(CardError) as e:
        build_tool(load_card(card_file))
    assert str(e.value) == (f"{card_file}:5: backend.callable: cannot import orchlib.nothing:fn: "
                            "ModuleNotFoundError: No module named 'orchlib.nothing'")
    card_file.write_text("name: ghost\nkind: function\ndescription: d\nbackend:\n  callable: orchlib.tools:nope\n")
    with pytest.raises(CardError, match="AttributeError"):
        build_tool(load_card(card_file))


def test_card_schema_must_fit_the_function():
    card = ToolCard(name="add", kind="function", description="d", backend={"callable": f"{__name__}:add"},
                    parameters={"type": "object", "properties": {"a": {"type": "integer"}, "z": {}}})
    with pytest.raises(CardError, match=r"parameters: does not match .*:add: properties \['z'\]"):
        build_tool(card)
    card = card.model_copy(update={"parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}})
    with pytest.raises(CardError, match=r"the function requires \['a'\]"):
        build_tool(card)


def test_fraction_parsing_keeps_decimals_exact():
    assert evaluate("0.1") == Fraction(1, 10)


# ------------------------------------------------------------------ the state parameter, bound functions
def stock(item: str, db: State) -> int:
    """Units of an item in the episode's store.

    Args:
        item: the item
    """
    return db[item]


def stock_typed(item: str, store: Annotated[dict, STATE]) -> int:
    """Units, with the state's own type kept for the reader.

    Args:
        item: the item
    """
    return store[item]


def stock_named(item: str, inventory: dict = None) -> int:
    """Units, the state parameter named in the card.

    Args:
        item: the item
    """
    return inventory[item]


def test_state_parameter_by_annotation_by_name_or_by_setting(tmp_path):
    ctx = ToolContext(state={"apple": 3})
    for fn, state in [(stock, None), (stock_typed, None), (stock_named, "inventory")]:
        tool = FunctionTool.from_function(fn, state=state)
        assert tool.card.parameters == {"type": "object", "properties": {"item": {"type": "string",
                                        "description": "the item"}}, "required": ["item"]}, fn
        assert tool.call_sync({"item": "apple"}, ctx).content == "3"
    # the same from a card file: the setting names the parameter, the annotation needs nothing
    card_file = tmp_path / "stock.yaml"
    card_file.write_text(f"name: stock\nkind: function\ndescription: d\nbackend:\n  callable: {__name__}:stock_named\n"
                         "  state: inventory\nparameters:\n  type: object\n  properties: {item: {type: string}}\n"
                         "  required: [item]\n")
    assert build_tool(load_card(card_file)).call_sync({"item": "apple"}, ctx).content == "3"
    card_file.write_text(card_file.read_text().replace("state: inventory", "state: warehouse"))
    with pytest.raises(CardError, match=r"stock.yaml:6: backend.state: .*no parameter 'warehouse'"):
        build_tool(load_card(card_file))

    def two(a: State, b: State) -> None:
        """Two states."""

    with pytest.raises(TypeError, match="are all marked State"):
        FunctionTool.from_function(two)
    clash = ToolCard(name="stock", kind="function", description="d", backend={"state": "db"},
                     parameters={"type": "object", "properties": {"item": {"type": "string"}, "db": {}}})
    with pytest.raises(CardError, match="'db' receives the episode's state"):
        FunctionTool(clash, fn=stock)


def test_a_function_object_needs_no_callable_path_and_a_schema_only_card_says_so():
    card = ToolCard(name="stock", kind="function", description="Units of an item.",
                    parameters={"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]})
    unbound = build_tool(card)
    assert not unbound.bound
    obs = unbound.call_sync({"item": "apple"})
    assert obs.error_kind == "tool_failure" and "has a schema and no implementation" in obs.error
    assert unbound.call_sync({"item": 3}).error_kind == "schema_violation"  # checked all the same
    tool = FunctionTool(card, fn=stock)  # no backend.callable needed
    assert tool.bound and tool.call_sync({"item": "apple"}, ToolContext(state={"apple": 5})).content == "5"
    assert bind(card, lambda item: item.upper()).call_sync({"item": "pear"}).content == "PEAR"
    assert unbound.bind(lambda item: 7).call_sync({"item": "x"}).content == "7"
    with pytest.raises(CardError, match=r"does not match .*the function requires \['qty'\]"):
        bind(card, lambda item, qty: 0)
