"""Auditing the bill: every kind of price mistake planted in a card and caught, named by file, line and
field; `orchlib prices check`; and a run's ledger that adds up exactly, by hand, with each kind of
bookkeeping mistake planted and reported."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from orchlib.audit import check_prices
from orchlib.cards import Price, ToolCard
from orchlib.cli import main
from orchlib.ledger import ledger
from orchlib.prices import read_prices
from orchlib.rollout import RolloutConfig
from orchlib.trajectory import Observation, Trajectory, Turn, UserTurn

TABLE = """\
prices:
  - model: big
    input: 2.0
    cached_input: 0.5
    output: 8.0
    source: https://example.com/big
    date: 2025-01-01
  - model: small
    input: 0.25
    output: 1.0
    source: https://example.com/small
    date: 2025-01-02
"""


def card(name: str, model: str | None, price: str, kind: str = "replay") -> str:
    backend = f"backend:\n  path: answers.csv\n  model: {model}\n" if model else ""
    return f"name: {name}\nkind: {kind}\ndescription: a model\n{backend}price:\n{price}"


CARDS = {  # name, kind, description, backend (3 lines) and `price:` come first: per_m_input is line 8
    "right.yaml": card("right", "big", "  per_m_input: 2.0\n  per_m_output: 8.0\n"),
    "tenfold.yaml": card("tenfold", "big", "  per_m_input: 0.2\n  per_m_output: 8.0\n"),   # input 10x too low
    "swapped.yaml": card("swapped", "big", "  per_m_input: 8.0\n  per_m_output: 2.0\n"),
    "thousand.yaml": card("thousand", "small", "  per_m_input: 0.00025\n  per_m_output: 0.001\n"),
    "nosource.yaml": card("nosource", None, "  per_m_input: 1.0\n  per_m_output: 1.0\n", kind="simulated"),
    "cached.yaml": card("cached", "big", "  per_m_input: 2.0\n  per_m_output: 8.0\n  per_m_cached_input: 5.0\n"),
    "free.yaml": card("free", "big", "  per_call: 0.0\n"),
    "adder.yaml": "name: adder\nkind: function\ndescription: adds\nprice:\n  per_call: 0.01\n",
}


@pytest.fixture()
def planted(tmp_path) -> tuple[Path, Path]:
    folder = tmp_path / "cards"
    folder.mkdir()
    for name, text in CARDS.items():
        (folder / name).write_text(text)
    table = tmp_path / "prices.yaml"
    table.write_text(TABLE)
    return folder, table


def by_card(report):
    out: dict[str, list] = {}
    for f in report.findings:
        out.setdefault(f.card, []).append(f)
    return out


def test_each_planted_price_mistake_is_caught_where_it_is(planted):
    folder, table = planted
    report = check_prices(folder, read_prices(table), factor=2.0)
    found = by_card(report)
    assert [f.kind for f in found["right"]] == ["ok"]
    assert found["right"][0].source == "https://example.com/big" and found["right"][0].date == "2025-01-01"

    (off,) = found["tenfold"]
    assert (off.kind, off.field, off.line, off.card_value, off.table_value) == ("off", "price.per_m_input", 8, 0.2, 2.0)
    assert off.file == str(folder / "tenfold.yaml") and "0.1x the table's" in off.message

    (swap,) = found["swapped"]
    assert (swap.kind, swap.field, swap.line) == ("swapped", "price.per_m_input", 8)

    assert [(f.kind, f.field, f.line) for f in found["thousand"]] == [("per_thousand", "price.per_m_input", 8),
                                                                      ("per_thousand", "price.per_m_output", 9)]
    (nosrc,) = found["nosource"]
    assert (nosrc.kind, nosrc.field, nosrc.line) == ("no_source", "price", 4)  # no backend: price is line 4

    (cached,) = found["cached"]
    assert (cached.kind, cached.field, cached.line, cached.card_value, cached.table_value) == (
        "off", "price.per_m_cached_input", 10, 5.0, 0.5)
    free = found["free"]  # names a priced model and charges nothing for its tokens
    assert [(f.kind, f.field) for f in free] == [("off", "price.per_m_input"), ("off", "price.per_m_output")]
    assert all("free here" in f.message for f in free)
    assert [f.kind for f in found["adder"]] == ["no_tokens"]  # nothing per token to check: not flagged

    assert {f.card for f in report.flagged} == {"tenfold", "swapped", "thousand", "nosource", "cached", "free"}
    assert not report.ok
    text = report.table()
    assert f"{folder / 'tenfold.yaml'}:8: price.per_m_input: off:" in text
    assert "6 of 8 cards flagged (8 findings)" in text


def test_the_factor_and_the_models_a_card_stands_for(planted):
    folder, table = planted
    rows = read_prices(table)
    assert [f.kind for f in by_card(check_prices(folder, rows, factor=20.0))["tenfold"]] == ["ok"]
    # the simulated card priced as `small`: input 1.0 vs 0.25 is 4x, off at factor 2, within factor 5;
    # its output, 1.0, is small's
    named = by_card(check_prices(folder, rows, factor=2.0, models={"nosource": "small"}))["nosource"]
    assert [(f.kind, f.field, f.model) for f in named] == [("off", "price.per_m_input", "small")]
    assert [f.kind for f in by_card(check_prices(folder, rows, factor=5.0, models={"nosource": "small"}))["nosource"]] \
        == ["ok"]
    unknown = by_card(check_prices(folder, rows, models={"nosource": "huge"}))["nosource"]
    assert unknown[0].kind == "no_source" and "'huge' is not in the price table" in unknown[0].message
    with pytest.raises(ValueError, match="above 1"):
        check_prices(folder, rows, factor=1.0)


def test_a_card_made_in_code_and_the_shipped_table():
    made = ToolCard(name="gpt", kind="llm", description="d", backend={"model": "gpt-5"},
                    price=Price(per_m_input=0.125, per_m_output=10.0))
    (f,) = check_prices([made]).findings  # the shipped table prices gpt-5's input at 1.25
    assert (f.kind, f.file, f.field, f.model) == ("off", "<card gpt>", "price.per_m_input", "gpt-5")


def test_prices_check_command(planted, capsys):
    folder, table = planted
    assert main(["prices", "check", str(folder / "right.yaml"), "--table", str(table)]) == 0
    assert main(["prices", "check", str(folder), "--table", str(table)]) == 1
    out = capsys.readouterr().out
    assert "SWAPPED" in out and f"{folder / 'thousand.yaml'}:9: price.per_m_output: per_thousand" in out
    assert main(["prices", "check", str(folder / "nosource.yaml"), "--table", str(table),
                 "--model", "nosource=small", "--factor", "5"]) == 0
    capsys.readouterr()
    assert main(["prices", "check", str(folder), "--table", str(table), "--model", "nosource"]) == 2
    assert "CARD=MODEL" in capsys.readouterr().err
    assert main(["prices", "check", str(folder), "--table", str(table), "--factor", "0.5"]) == 2
    bad = folder.parent / "bad.yaml"
    bad.write_text("prices:\n  - model: x\n    input: -1\n    output: 1\n    source: s\n    date: 2025-01-01\n")
    assert main(["prices", "check", str(folder), "--table", str(bad)]) == 2
    assert f"{bad}:3: prices[0].input:" in capsys.readouterr().err
    broken = folder / "broken.yaml"
    broken.write_text("name: broken\nkind: replay\ndescription: d\nprice:\n  per_m_input: lots\n")
    assert main(["prices", "check", str(folder), "--table", str(table)]) == 2
    assert f"{broken}:5: price.per_m_input:" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- the ledger
# Prices chosen so that every amount is exact in binary: per id, the policy reads at 0.125 and writes
# at 0.5 USD; the tool reads at 0.25, cached 0.0625, writes 1, reasons 2, and charges 0.5 per call.
POLICY = RolloutConfig(policy_price_in=125_000.0, policy_price_out=500_000.0)
GEN = Price(per_call=0.5, per_m_input=250_000.0, per_m_output=1_000_000.0, per_m_cached_input=62_500.0,
            per_m_reasoning=2_000_000.0)


def episode(tool_cost: float = 5.75, total: float | None = None) -> Trajectory:
    # ids: 8 of prompt, 4 sampled (turn 1), 3 of observation, 2 sampled (turn 2)
    obs = Observation(content="42", tool="gen", cost_usd=tool_cost, tokens_in=8, tokens_cached=4, tokens_out=3,
                      tokens_reasoning=1, latency_s=2.0)
    t1 = Turn(text="call", observations=[obs], tokens_out=4, cost_usd=3.0 + tool_cost)
    t2 = Turn(text="42", tokens_out=2, cost_usd=2.875, user=UserTurn(text="thanks", cost_usd=0.5, done=True))
    return Trajectory(task_id="t", prompt_len=8, ids=list(range(17)), mask=[0] * 8 + [1] * 4 + [0] * 3 + [1] * 2,
                      turns=[t1, t2], cost_usd=total if total is not None else t1.cost_usd + t2.cost_usd,
                      user_cost_usd=0.5)


def test_the_card_prices_as_the_ledger_splits():
    assert GEN.cost(tokens_in=8, tokens_out=3, seconds=2.0, tokens_reasoning=1, tokens_cached=4) == 5.75


def test_ledger_splits_by_payer_and_class_and_adds_up_exactly():
    bill = ledger([episode()], {"gen": GEN}, policy=POLICY)
    # turn 1: the policy read 8 ids (1.0) and wrote 4 (2.0); turn 2: read 15 (1.875), wrote 2 (1.0)
    # gen: 4 fresh input (1.0), 4 cached (0.25), 2 output (2.0), 1 reasoning (2.0), one call (0.5)
    assert bill.by_payer_and_class() == {"policy": {"input": 2.875, "output": 3.0},
                                         "gen": {"input": 1.0, "cached": 0.25, "output": 2.0, "reasoning": 2.0,
                                                 "call": 0.5},
                                         "user": {"other": 0.5}}
    assert bill.reconciles and not bill.warnings
    assert bill.total == Fraction(11.625) == bill.reported_total and bill.user_total == Fraction(1, 2)
    tokens = {(x.turn, x.payer, x.token_class): x.tokens for x in bill.episodes[0].lines}
    assert tokens[(1, "policy", "input")] == 8 and tokens[(2, "policy", "input")] == 15
    assert tokens[(1, "gen", "cached")] == 4 and tokens[(1, "gen", "reasoning")] == 1
    assert "the lines add up exactly" in bill.table()
    # without prices everything is still accounted for, as `other`
    plain = ledger([episode()])
    assert plain.reconciles and plain.by_payer_and_class()["gen"] == {"other": 5.75}


def test_ledger_reports_each_planted_bookkeeping_mistake():
    # a recorded cost its card does not explain: 1.0 more than the card charges
    dear = ledger([episode(tool_cost=6.75)], {"gen": GEN}, policy=POLICY)
    assert dear.by_payer_and_class()["gen"]["other"] == 1.0 and dear.reconciles
    assert len(dear.warnings) == 1 and "gen recorded $6.75, its card's price explains $5.75" in dear.warnings[0]
    # a reported total that is not the sum of its turns
    wrong = ledger([episode(total=12.0)], {"gen": GEN}, policy=POLICY)
    assert not wrong.reconciles and "cost_usd is $12 but its turns add up to $11.625" in wrong.warnings[0]
    assert "NOT" in wrong.table()
    # the policy's own tokens priced otherwise than the run did
    other = ledger([episode()], {"gen": GEN}, policy=RolloutConfig(policy_price_in=250_000.0,
                                                                   policy_price_out=500_000.0))
    assert other.reconciles and len(other.warnings) == 2 and "another price?" in other.warnings[0]


def test_ledger_of_a_float_run_adds_up_exactly_through_a_rounding_line():
    # 0.1 + 0.2 is not 0.3 in floats: the reported total is the float sum, the lines add up to it exactly
    t = Trajectory(task_id="r", turns=[Turn(text="a", cost_usd=0.1), Turn(text="b", cost_usd=0.2)],
                   cost_usd=0.1 + 0.2)
    bill = ledger([t])
    assert bill.reconciles and not bill.warnings
    assert bill.episodes[0].cost == Fraction(0.1 + 0.2)
