"""Tool cards: shipped cards load, round-trip with comments, validate with file:line: field messages,
export to schemas that validate against the OpenAI / MCP formats, import from OpenAI and functions."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Literal, Optional

import jsonschema
import pytest

from orchlib.cards import CardError, Latency, Price, ToolCard, load_card, load_cards, save_card
from orchlib.cli import main
from orchlib.tools import validate_cards

REPO = Path(__file__).resolve().parents[1]
TEST_DATA = REPO / "tests" / "data"
CARDS = REPO / "toolcards"
SHIPPED = {"calculator", "python", "search", "mixtral", "gpt4", "specialist", "generalist"}

# The OpenAI chat-completions `tools` entry (function tools), from the API reference.
OPENAI_TOOL = {
    "type": "object", "required": ["type", "function"], "additionalProperties": False,
    "properties": {
        "type": {"const": "function"},
        "function": {"type": "object", "required": ["name"], "additionalProperties": False, "properties": {
            "name": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"},
            "description": {"type": "string"},
            "parameters": {"type": "object"},
            "strict": {"type": ["boolean", "null"]}}}},
}
# The Model Context Protocol `Tool` (schema/2025-06-18/schema.json, definitions.Tool).
MCP_TOOL = {
    "type": "object", "required": ["inputSchema", "name"],
    "properties": {
        "name": {"type": "string"}, "title": {"type": "string"}, "description": {"type": "string"},
        "inputSchema": {"type": "object", "required": ["type"], "properties": {
            "type": {"type": "string", "const": "object"},
            "properties": {"type": "object", "additionalProperties": {"type": "object"}},
            "required": {"type": "array", "items": {"type": "string"}}}},
        "annotations": {"type": "object", "properties": {"title": {"type": "string"}}},
    },
}


def test_shipped_cards_load_sorted_and_examples_are_separate():
    cards = load_cards(CARDS)
    names = [c.name for c in cards]
    assert names == sorted(names) and SHIPPED <= set(names)  # other parts of the library add cards too
    by = {c.name: c for c in cards}
    assert by["mixtral"].price == Price(per_m_input=0.6, per_m_output=0.6)
    assert by["gpt4"].price == Price(per_m_input=10, per_m_output=30)
    assert by["python"].price.per_second == 0.0000083
    for name in ("mixtral", "gpt4", "specialist", "generalist"):
        assert by[name].final and by[name].input == "task"
    examples = {c.name: c for c in load_cards(CARDS / "examples")}
    assert examples["gpt5"].backend["model"] == "gpt-5" and examples["gpt5"].price == Price(per_m_input=1.25,
                                                                                              per_m_output=10)
    assert examples["gpt5"].backend["api_key_env"] == "OPENAI_API_KEY"
    assert examples["local-math"].backend["client"] == "transformers"
    assert validate_cards([CARDS, CARDS / "examples"]) == []


@pytest.mark.parametrize("path", sorted(CARDS.glob("*.yaml")) + sorted((CARDS / "examples").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_round_trip_keeps_text_comments_and_equality(path, tmp_path):
    card = load_card(path)
    out = save_card(card, tmp_path / path.name)
    comments = [line for line in path.read_text().splitlines() if line.lstrip().startswith("#")]
    assert [line for line in out.read_text().splitlines() if line.lstrip().startswith("#")] == comments
    if card.name in SHIPPED or path.parent.name == "examples":  # written in the style save_card uses
        assert out.read_text() == path.read_text()  # unchanged card: byte-identical file
    assert load_card(out) == card


def test_changed_card_keeps_comments_and_only_changes_values(tmp_path):
    card = load_card(CARDS / "python.yaml")
    changed = card.model_copy(update={"price": Price(per_second=0.00002), "final": False,
                                      "latency": Latency(seconds=0.1, jitter=0.5)})
    text = save_card(changed, tmp_path / "p.yaml").read_text()
    assert "# wall clock, then the whole process group is killed" in text
    assert "per_second: 0.00002\n" in text and "jitter: 0.5" in text
    assert "final:" not in text  # still the default: not written
    assert load_card(tmp_path / "p.yaml") == changed
    original, new = (CARDS / "python.yaml").read_text().splitlines(), text.splitlines()
    assert [line for line in new if line not in original] == ["  per_second: 0.00002", "  jitter: 0.5"]


def test_card_made_in_code_saves_and_loads_equal(tmp_path):
    card = ToolCard(name="echo", kind="function", description="Say it back.\nSecond line.",
                    parameters={"type": "object", "properties": {"text": {"type": "string"}}},
                    backend={"callable": "builtins:str"}, tags=["x"], price=Price(per_call=0.01))
    path = save_card(card, tmp_path / "sub" / "echo.yaml")
    assert load_card(path) == card
    assert "description: |-\n  Say it back.\n  Second line.\n" in path.read_text()
    assert not list((tmp_path / "sub").glob(".*"))  # no temporary file left by the atomic write


BAD_CARD = """\
name: Bad Name
kind: function
description: adds
parameters:
  type: object
  properties:
    x:
      type: integr
price:
  per_call: -1
  per_token: 2
input: task
"""


def test_validation_names_file_line_and_field_path(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD_CARD)
    problems = [str(p) for p in validate_cards(bad)]
    assert problems == [
        f"{bad}:1: name: ' ' not allowed: a name uses letters, digits, '_', '-' and '.' (what OpenAI and MCP "
        "tool names use)",
        f"{bad}:8: parameters.properties.x.type: not valid JSON Schema: 'integr' is not valid under any of "
        "the given schemas",
        f"{bad}:10: price.per_call: Input should be greater than or equal to 0",
        f"{bad}:11: price.per_token: unknown field",
    ]
    with pytest.raises(CardError) as e:
        load_card(bad)
    assert e.value.file == str(bad) and e.value.line == 1 and e.value.field == "name"
    assert "and 3 more" in str(e.value)


def test_other_card_problems(tmp_path):
    (tmp_path / "syntax.yaml").write_text("name: x\nkind: [function\n")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    (tmp_path / "task.yaml").write_text("name: t\nkind: function\ndescription: d\ninput: task\n"
                                        "backend: {callable: 'builtins:str'}\n")
    (tmp_path / "array.yaml").write_text("name: arr\nkind: search\ndescription: d\nparameters:\n  type: array\n")
    (tmp_path / "missing.yaml").write_text("name: m\nkind: function\n")
    found = {Path(p.file).name: (p.line, p.field, p.problem) for p in validate_cards(tmp_path, build=False)}
    assert found["syntax.yaml"][:2] == (2, "(yaml)")  # where the unclosed [ opens
    assert found["list.yaml"] == (1, "(card)", "a card is a YAML mapping, got CommentedSeq")
    assert found["task.yaml"][1] == "(card)" and "input: task is only for model tools" in found["task.yaml"][2]
    assert found["array.yaml"][:2] == (5, "parameters.type")
    assert found["missing.yaml"] == (1, "description", "required field is missing")


def test_duplicate_names_and_backend_problems(tmp_path):
    body = "kind: function\ndescription: d\nbackend:\n  callable: {}\n"
    (tmp_path / "a.yaml").write_text("name: same\n" + body.format("orchlib.tools.calculator:calculate") +
                                     "parameters:\n  type: object\n  properties: {expression: {type: string}}\n"
                                     "  required: [expression]\n")
    (tmp_path / "b.yaml").write_text("name: same\n" + body.format("no_such_module:fn"))
    (tmp_path / "c.yaml").write_text("name: c\nkind: llm\ndescription: d\nbackend:\n  model: m\n")
    (tmp_path / "d.yaml").write_text("name: d\nkind: llm\ndescription: d\nbackend:\n  model: m\n  colour: red\n")
    with pytest.raises(CardError, match="duplicate tool name 'same'"):
        load_cards(tmp_path)
    problems = [str(p) for p in validate_cards(tmp_path)]
    assert problems == [
        f"{tmp_path / 'b.yaml'}:1: name: duplicate tool name 'same' (also in {tmp_path / 'a.yaml'})",
        f"{tmp_path / 'b.yaml'}:5: backend.callable: cannot import no_such_module:fn: ModuleNotFoundError: "
        "No module named 'no_such_module'",
        f"{tmp_path / 'c.yaml'}:4: backend: Value error, client openai needs base_url "
        "(e.g. https://api.openai.com/v1)",
        f"{tmp_path / 'd.yaml'}:6: backend.colour: unknown field",
    ]


def test_every_backend_setting_problem_and_a_binary_file_get_their_line(tmp_path):
    (tmp_path / "py.yaml").write_text("name: py\nkind: python\ndescription: d\nbackend:\n  timeout_s: -1\n"
                                      "  colour: red\n  cpu_s: lots\n")
    (tmp_path / "bin.yaml").write_bytes(b"name: bin\nkind: function\ndescription: \xff\n")
    problems = [str(p) for p in validate_cards(tmp_path)]
    assert problems == [
        f"{tmp_path / 'bin.yaml'}:3: (file): not UTF-8 text (byte 0xff at offset 38)",
        f"{tmp_path / 'py.yaml'}:5: backend.timeout_s: Input should be greater than 0",
        f"{tmp_path / 'py.yaml'}:7: backend.cpu_s: Input should be a valid integer, unable to parse string as an "
        "integer",
        f"{tmp_path / 'py.yaml'}:6: backend.colour: unknown field",
    ]
    with pytest.raises(CardError, match="not UTF-8 text"):
        load_card(tmp_path / "bin.yaml")


def test_exports_validate_against_openai_and_mcp_formats():
    for card in load_cards(CARDS) + load_cards(CARDS / "examples"):
        for with_costs in (False, True):
            jsonschema.validate(card.to_openai(with_costs), OPENAI_TOOL)
            jsonschema.validate(card.to_transformers(with_costs), OPENAI_TOOL)
            jsonschema.validate(card.to_mcp(with_costs), MCP_TOOL)
        jsonschema.Draft202012Validator.check_schema(card.to_mcp()["inputSchema"])
    gpt4 = next(c for c in load_cards(CARDS) if c.name == "gpt4")
    assert gpt4.to_openai(with_costs=True)["function"]["description"].endswith(
        "Price: $10 per million input tokens, $30 per million output tokens. Latency: about 12 s. (replay)")
    assert gpt4.to_mcp()["annotations"] == {"title": "gpt4 (replay)"}


def test_transformers_export_renders_in_the_chat_template(tiny_policy):
    from orchlib.chat import system_text

    _, tok = tiny_policy
    tools = [c.to_transformers() for c in load_cards(CARDS)]
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tools=tools, tokenize=False)
    assert text.startswith(system_text("", tools))


def test_price_cost_and_latency_draws():
    # gpt-5: 1000 input and 500 output tokens = 1000 × 1.25e-6 + 500 × 10e-6 = 0.00625 USD
    assert Price(per_m_input=1.25, per_m_output=10).cost(1000, 500) == pytest.approx(0.00625)
    # code interpreter, 3 s, plus a 0.01 fee on each of 2 calls
    assert Price(per_second=0.0000083, per_call=0.01).cost(seconds=3, calls=2) == pytest.approx(0.0200249)
    lat = Latency(seconds=10, jitter=0.2)
    draws = [lat.sample(0, "tool", f"task-{i}") for i in range(200)]
    assert all(8 <= d <= 12 for d in draws) and len(set(draws)) == 200
    assert lat.sample(0, "tool", "task-3") == draws[3]
    assert Latency(seconds=2).sample("anything") == 2
    with pytest.raises(ValueError):
        Latency(seconds=1, jitter=1.5)


def test_from_openai_imports_every_toolorchestra_tool():
    specs = json.loads((TEST_DATA / "toolorchestra" / "tools.json").read_text())
    cards = [ToolCard.from_openai(s) for s in specs]
    assert [c.name for c in cards] == ["enhance_reasoning", "answer", "search"]
    for spec, card in zip(specs, cards):
        assert card.to_openai() == spec  # nothing lost or added
        assert card.parameters["required"] == ["model"]
    assert ToolCard.from_openai(specs[1]["function"], kind="llm", final=True).final
    with pytest.raises(CardError, match="name: ' ' not allowed"):
        ToolCard.from_openai({"type": "function", "function": {"name": "x", "parameters": {}}}, name="Has Space")


class Unit(Enum):
    C = "celsius"
    F = "fahrenheit"


def convert(value: float, unit: Unit, digits: int = 2, env=None) -> str:
    """Convert a temperature.

    Works both ways.

    Args:
        value: the temperature
            to convert.
        unit (Unit): the unit of `value`.
        digits: decimals to keep.

    Returns:
        The converted temperature.
    """
    return ""


def lookup(ids: list[int], mode: Literal["fast", "exact"], note: Optional[str], table: dict[str, int]) -> str:
    """Look things up.

    Args:
        ids: the ids
        mode: how
        note: a note
        table: a table
    """
    return ""


def test_from_function_derives_the_schema():
    card = ToolCard.from_function(convert)
    assert card.name == "convert" and card.kind == "function"
    assert card.description == "Convert a temperature.\n\nWorks both ways."
    assert card.backend == {"callable": f"{__name__}:convert"}
    assert card.parameters == {
        "type": "object",
        "properties": {
            "value": {"type": "number", "description": "the temperature to convert."},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "the unit of `value`."},
            "digits": {"type": "integer", "description": "decimals to keep.", "default": 2},
        },
        "required": ["value", "unit"],
    }  # `env` is the episode's environment, not an argument


def test_from_function_agrees_with_transformers_get_json_schema():
    from transformers.utils import get_json_schema

    ours = ToolCard.from_function(lookup).to_transformers()
    theirs = get_json_schema(lookup)
    theirs.get("function", {}).pop("return", None)
    # transformers marks Optional with OpenAPI's "nullable"; JSON Schema says type: [..., "null"].
    note = theirs["function"]["parameters"]["properties"]["note"]
    assert note.pop("nullable") is True
    note["type"] = [note["type"], "null"]
    assert ours == theirs


def test_from_function_refuses_what_it_cannot_describe():
    def untyped(x):
        """No hints."""

    def star(*args: int):
        """Star."""

    with pytest.raises(TypeError, match="needs a type hint"):
        ToolCard.from_function(untyped)
    with pytest.raises(TypeError, match="cannot be described"):
        ToolCard.from_function(star)


def test_cli_cards_commands(tmp_path, capsys):
    assert main(["cards", "list"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["name", "kind", "price"]
    assert any(line.split()[:2] == ["mixtral", "replay"] for line in out.splitlines())
    assert "$0.0000083 per second" in out
    assert main(["cards", "validate", str(CARDS), str(CARDS / "examples")]) == 0
    count = len(list(CARDS.glob("*.yaml"))) + 2
    assert capsys.readouterr().out.strip() == f"ok: {count} card(s) in {CARDS}, {CARDS / 'examples'}"
    assert main(["cards", "show", "python", "--cards", str(CARDS), "--format", "mcp"]) == 0
    out = capsys.readouterr().out
    assert "# wall clock" in out and '"inputSchema"' in out
    assert main(["cards", "export", str(CARDS), "--format", "mcp", "--out", str(tmp_path / "t.json")]) == 0
    exported = json.loads((tmp_path / "t.json").read_text())
    assert SHIPPED <= {t["name"] for t in exported}
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "bad.yaml").write_text(BAD_CARD)
    assert main(["cards", "validate", str(tmp_path / "bad")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 4  # one line per problem
    assert main(["cards", "list", str(tmp_path / "bad")]) == 2
    assert "bad.yaml:1: name:" in capsys.readouterr().err
    assert main(["cards", "show", "nope", "--cards", str(CARDS)]) == 2
    assert "no card named 'nope'" in capsys.readouterr().err
