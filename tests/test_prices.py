"""The price table: the shipped rows (each with its source and date), lookups by name, alias and
configuration, cards priced from it, and malformed tables named by file, line and field."""

from __future__ import annotations

import datetime as dt
import textwrap

import pytest

from orchlib.cards import CardError, Price, load_card
from orchlib.prices import PriceTableError, load_prices, read_prices


def test_every_shipped_row_says_where_and_when():
    table = load_prices()
    assert len(table) >= 10 and len(set(table.models)) == len(table)
    for row in table.rows:
        assert row.source.startswith("https://") and dt.date(2023, 1, 1) <= row.date <= dt.date.today()
        assert row.output >= row.input > 0  # output is never the cheaper side
        assert row.cached_input is None or row.cached_input < row.input


def test_names_aliases_and_configurations():
    table = load_prices()
    assert table.row("gpt-5").output == 10.0 and table.row("gpt-5").cached_input == 0.125
    assert table.row("deepseek-reasoner") is table.row("deepseek-r1")  # an alias
    assert table.row("gpt-5/high") is table.row("gpt-5") and table.row("gpt-5 (minimal)") is table.row("gpt-5")
    assert table.row("gpt-5-mini/low").model == "gpt-5-mini"  # the longest name wins, not gpt-5
    assert "gpt-5x" not in table and table.find("gpt-5x") is None  # not a configuration of gpt-5
    with pytest.raises(KeyError, match="no price for 'llama-9'"):
        table.row("llama-9")


def test_a_price_from_the_table_bills_each_token_class(tmp_path):
    price = Price.from_table("gpt-5")
    # 1,000 input of which 400 cached, 3,000 output of which 2,500 reasoning (billed as output)
    want = (600 * 1.25 + 400 * 0.125 + 3000 * 10.0) / 1e6
    assert price.cost(1000, 3000, tokens_reasoning=2500, tokens_cached=400) == pytest.approx(want, rel=1e-12)
    assert Price.model_validate(price.model_dump()) == price  # a card written back reads the same
    card = tmp_path / "m.yaml"
    card.write_text(textwrap.dedent("""\
        name: m
        kind: simulated
        description: a model priced from the table
        price:
          table: claude-opus-4.1
          per_call: 0.01
        """), encoding="utf-8")
    assert load_card(card).price.cost(10, 10) == pytest.approx(0.01 + (10 * 15 + 10 * 75) / 1e6)
    card.write_text(card.read_text(encoding="utf-8") + "  per_m_output: 70\n", encoding="utf-8")
    with pytest.raises(CardError, match=r"m.yaml:4: price: .*per_m_output is 70 but the price table's "
                                        r"'claude-opus-4.1' row says 75"):
        load_card(card)
    card.write_text(card.read_text(encoding="utf-8").replace("claude-opus-4.1", "claude-9"), encoding="utf-8")
    with pytest.raises(CardError, match="no price for 'claude-9'"):
        load_card(card)


ROW = """\
prices:
  - model: a
    input: 1
    output: 2
    source: https://example.com/a
    date: 2025-01-02
"""


@pytest.mark.parametrize("text, problem", [
    (ROW.replace("    source: https://example.com/a\n", ""), ":2: prices[0].source: required field is missing"),
    (ROW.replace("output: 2", "output: -2"), ":4: prices[0].output: Input should be greater than or equal to 0"),
    (ROW.replace("input: 1", "input: lots"), ":3: prices[0].input: Input should be a valid number"),
    (ROW.replace("date: 2025-01-02", "date: soon"), ":6: prices[0].date: Input should be a valid date"),
    (ROW + "    discount: 0.5\n", ":7: prices[0].discount: unknown field"),
    (ROW + ROW.split("\n", 1)[1], "'a' is listed twice"),
    ("models: []\n", ":1: prices: the table must be a mapping"),
    ("prices:\n  - just a name\n", ":2: prices[0]: a row must be a mapping"),
    (ROW + "  - model: [\n", ":8: "),
])
def test_a_malformed_table_names_the_file_line_and_field(tmp_path, text, problem):
    path = tmp_path / "prices.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PriceTableError) as e:
        read_prices(path)
    assert str(e.value).startswith(str(path)) and problem in str(e.value)


def test_a_table_of_ones_own_is_read_once_per_version(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(ROW, encoding="utf-8")
    first = load_prices(path)
    assert load_prices(path) is first and first.row("a").date == dt.date(2025, 1, 2)
    path.write_text(ROW.replace("output: 2", "output: 3.5"), encoding="utf-8")
    assert load_prices(path).row("a").output == 3.5
