"""The evidence-order lines (RolloutConfig.evidence_order, orchlib.prompting.evidence_order_lines): what they
say on tools written by hand, and what a prompt shows of cards described by `orchlib.describe`."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchlib.cards import load_card
from orchlib.chat import IM_END
from orchlib.describe import describe
from orchlib.envs import make_suite
from orchlib.prompting import evidence_order_lines, render_prompt, tool_schemas
from orchlib.rollout import RolloutConfig
from orchlib.tools import Toolbox

CARDS = Path(__file__).resolve().parents[1] / "toolcards"


def _tool(name: str, **rates: float) -> dict:
    return {"name": name, "arguments": [], "call_price": 0.0, **({"evidence": rates} if rates else {})}


def test_a_line_per_kind_names_the_tools_from_most_often_right():
    tools = [_tool("kemo", gsm8k=0.2, arithmetic=0.9), _tool("nupo", gsm8k=0.8, arithmetic=0.9),
             _tool("bada", gsm8k=0.5, lookup=0.4)]
    assert evidence_order_lines(tools) == [
        "Most often right on arithmetic: kemo, nupo.",   # a tie keeps the list's order; bada was not measured
        "Most often right on gsm8k: nupo, bada, kemo."]  # lookup: one tool measured, a line would order nothing
    assert evidence_order_lines(list(reversed(tools)))[0] == "Most often right on arithmetic: nupo, kemo."
    assert evidence_order_lines([_tool("kemo"), _tool("nupo")]) == []  # cards never described: nothing said
    # quoted, each name as a call writes it
    assert evidence_order_lines(tools, quoted=True) == [
        'Most often right on arithmetic: "kemo", "nupo".', 'Most often right on gsm8k: "nupo", "bada", "kemo".']


def test_quote_names_quotes_both_order_lines_and_changes_nothing_else(tiny_policy):
    from orchlib.tasks import PROFILES, Task

    _, tok = tiny_policy
    tools = [_tool("kemo", gsm8k=0.2, arithmetic=0.9), _tool("nupo", gsm8k=0.8, arithmetic=0.4)]
    tools[0]["call_price"] = 0.5
    task = Task(id="q", prompt="Ann has 3 apples and buys 4 more. How many?", category="gsm8k",
                preference=PROFILES["thrifty"])
    for at in ("system", "user"):
        config = RolloutConfig(tool_schema="compact", evidence_order=True, price_order=True, price_order_at=at,
                               max_turns=1)
        plain = render_prompt(task, tools, tok, config)
        quoted = render_prompt(task, tools, tok, config.model_copy(update={"quote_names": True}))
        changed = [(a, b) for a, b in zip(plain.splitlines(), quoted.splitlines()) if a != b]
        end = IM_END if at == "user" else ""  # the price line closes the user turn there
        assert changed == [("Most often right on arithmetic: kemo, nupo.",
                            'Most often right on arithmetic: "kemo", "nupo".'),
                           ("Most often right on gsm8k: nupo, kemo.", 'Most often right on gsm8k: "nupo", "kemo".'),
                           ("From the cheapest per call to the dearest: nupo, kemo." + end,
                            'From the cheapest per call to the dearest: "nupo", "kemo".' + end)]


@pytest.fixture(scope="module")
def described():
    suite = make_suite(0)
    results = [describe(load_card(CARDS / f"{n}.yaml"), suite.train, n=60, seed=0)
               for n in ("specialist", "generalist")]
    return suite, results


def test_a_prompt_shows_the_lines_of_described_cards_and_none_of_bare_ones(described, tiny_policy):
    _, tok = tiny_policy
    suite, (specialist, generalist) = described
    task = next(t for t in suite.test if t.category == "lookup")
    task = task.model_copy(update={"tools": ["specialist", "generalist"]})
    box = Toolbox.from_cards([specialist.card, generalist.card])
    schemas = tool_schemas(box, task, "compact")
    # each entry carries what its card measured, as `describe` rounded it into the card
    assert [s["evidence"] for s in schemas] == [
        {c: round(s.success_rate, 4) for c, s in r.stats.categories.items()} for r in (specialist, generalist)]
    # the cards declare lookup 0.15 and hard 0.1 for the specialist, 0.95 and 0.85 for the generalist: what
    # was measured keeps that order, so the listed-second generalist leads both lines
    for cat in ("hard", "lookup"):
        assert generalist.stats.categories[cat].success_rate > specialist.stats.categories[cat].success_rate
    config = RolloutConfig(tool_schema="compact", evidence_order=True, price_order=True, max_turns=1)
    text = render_prompt(task, schemas, tok, config)
    lines = text.splitlines()
    i = lines.index("Most often right on hard: generalist, specialist.")
    assert lines[i - 1].startswith("Most often right on arithmetic: ") and "specialist" in lines[i - 1]
    assert lines[i + 1] == "Most often right on lookup: generalist, specialist."
    assert lines[i + 2].startswith("From the cheapest per call to the dearest: ")
    assert "evidence" not in text and "success_rate" not in text  # the lines are all that is shown of it
    # the same cards without their evidence: the prompt is the one evidence_order=False renders
    bare = Toolbox.from_cards([r.card.model_copy(update={"auto_description": None}) for r in (specialist, generalist)])
    off = config.model_copy(update={"evidence_order": False})
    assert render_prompt(task, tool_schemas(bare, task, "compact"), tok, config) == \
        render_prompt(task, schemas, tok, off)
    assert "Most often right" not in render_prompt(task, schemas, tok, off)


def test_evidence_order_needs_a_compact_or_brief_list():
    with pytest.raises(ValueError, match="evidence_order: the lines follow the compact or brief list of tools; "
                                         "tool_schema is 'full'"):
        RolloutConfig(tool_schema="full", evidence_order=True)
    assert RolloutConfig(tool_schema="brief", evidence_order=True).evidence_order


def test_show_kind_names_the_tasks_kind_after_it_as_the_lines_label_it(tiny_policy):
    from orchlib.tasks import PROFILES, Task

    _, tok = tiny_policy
    tools = [_tool("kemo", gsm8k=0.2, arithmetic=0.9), _tool("nupo", gsm8k=0.8, arithmetic=0.4)]
    task = Task(id="q", prompt="Ann has 3 apples and buys 4 more. How many?", category="gsm8k",
                preference=PROFILES["thrifty"])
    config = RolloutConfig(tool_schema="compact", evidence_order=True, max_turns=1, preference_at="user",
                           show_kind=True)
    lines = render_prompt(task, tools, tok, config).splitlines()
    i = lines.index("Ann has 3 apples and buys 4 more. How many?")
    assert lines[i + 1] == "Kind of question: gsm8k."  # after the task, before P
    assert lines[i + 3].startswith("Preference (thrifty)")
    assert "Most often right on gsm8k: nupo, kemo." in lines  # the line the kind's word finds
    off = render_prompt(task, tools, tok, config.model_copy(update={"show_kind": False}))
    assert "Kind of question" not in off
    assert off.splitlines() == lines[:i + 1] + lines[i + 2:]  # the one line is all it adds
