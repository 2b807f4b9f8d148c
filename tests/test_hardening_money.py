"""Money that is not money: a negative, NaN or infinite cost, a price so large that a cost overflows,
a bill whose sum does not fit a float, a price table's free row and a factor of inf. Each is refused
where it enters, in one line naming where it is (CLI: exit 2), or handled and said."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import pytest
from pydantic import ValidationError

from orchlib.audit import check_prices
from orchlib.cards import CardError, Price, ToolCard, load_card
from orchlib.cli import main
from orchlib.ledger import LedgerError, ledger
from orchlib.prices import PriceTableError, read_prices
from orchlib.rollout import RolloutConfig
from orchlib.trajectory import Observation, Trajectory, Turn, UserTurn, read_jsonl

NOT_MONEY = [-5.0, -1e-300, math.nan, math.inf, -math.inf]


# ---------------------------------------------------------------------------------------------- prices
@pytest.mark.parametrize("field", ["per_call", "per_m_input", "per_m_output", "per_second", "per_m_reasoning",
                                   "per_m_cached_input"])
@pytest.mark.parametrize("value", [1e308, 1.0000001e9, -1.0, math.nan, math.inf])
def test_a_card_price_is_finite_non_negative_and_bounded(field, value):
    with pytest.raises(ValidationError, match=field):
        Price(**{field: value})
    assert Price(**{field: 1e9}).model_dump()[field] == 1e9  # the bound itself is a price


def test_the_largest_price_cannot_overflow_a_cost():
    # before the bound, a price of 1e308 per million tokens made ten million tokens cost inf
    dearest = Price(per_call=1e9, per_m_input=1e9, per_m_output=1e9, per_second=1e9)
    assert dearest.cost(tokens_in=10**12, tokens_out=10**12, seconds=1e9, calls=10**6) == 1.003e18  # 3 × 1e15 + 1e18


def test_a_card_file_with_a_huge_price_names_the_file_line_and_field(tmp_path):
    path = tmp_path / "dear.yaml"
    path.write_text("name: dear\nkind: simulated\ndescription: d\nprice:\n  per_m_input: 1e308\n")
    with pytest.raises(CardError) as e:
        load_card(path)
    assert str(e.value).startswith(f"{path}:5: price.per_m_input:") and "\n" not in str(e.value)


def test_a_price_table_row_is_bounded_like_a_card(tmp_path):
    path = tmp_path / "table.yaml"
    path.write_text("prices:\n  - model: x\n    input: 1.0\n    output: 1e308\n    source: s\n    date: 2025-01-01\n")
    with pytest.raises(PriceTableError, match=rf"^{path}:4: prices\[0\].output: "):
        read_prices(path)


def test_the_policy_price_is_bounded():
    for value in (1e308, math.inf, math.nan, -1.0):
        with pytest.raises(ValidationError, match="policy_price_in"):
            RolloutConfig(policy_price_in=value)


# ---------------------------------------------------------------------------------------------- records
@pytest.mark.parametrize("value", NOT_MONEY)
def test_records_refuse_a_cost_that_is_not_money(value):
    for build in (lambda: Observation(content="", cost_usd=value), lambda: UserTurn(text="", cost_usd=value),
                  lambda: Turn(text="", cost_usd=value), lambda: Trajectory(task_id="t", cost_usd=value),
                  lambda: Trajectory(task_id="t", user_cost_usd=value)):
        with pytest.raises(ValidationError, match="cost_usd"):
            build()


def test_a_jsonl_cost_that_is_not_money_names_the_file_line_and_field(tmp_path):
    good = Trajectory(task_id="a", turns=[Turn(text="x", cost_usd=1.0,
                                               observations=[Observation(content="", cost_usd=1.0)])], cost_usd=1.0)
    line = json.loads(good.model_dump_json())
    for where, value in ((("cost_usd",), -5), (("turns", 0, "cost_usd"), "NaN"),
                         (("turns", 0, "observations", 0, "cost_usd"), "Infinity")):
        bad = json.loads(json.dumps(line))
        target = bad
        for key in where[:-1]:
            target = target[key]
        target[where[-1]] = value
        path = tmp_path / "run.jsonl"
        # json.dumps writes NaN and Infinity, and json.loads reads them back: a file can hold them
        path.write_text(good.model_dump_json() + "\n" + json.dumps(bad).replace('"NaN"', "NaN")
                        .replace('"Infinity"', "Infinity") + "\n")
        with pytest.raises(ValueError) as e:
            read_jsonl(path)
        message = str(e.value)
        assert message.startswith(f"{path}:2: {'.'.join(map(str, where))}: ") and "\n" not in message


# ---------------------------------------------------------------------------------------------- the ledger
@pytest.mark.parametrize("value", [-5.0, math.nan, math.inf])
def test_the_ledger_refuses_a_cost_that_skipped_validation(value):
    # model_construct (as the rollout's fast paths) skips validation: the ledger checks again. Before,
    # -5 gave a bill that "adds up exactly" at -$5 and NaN / inf raised from inside Fraction.
    turn = Turn.model_construct(text="", cost_usd=0.0, observations=[
        Observation.model_construct(content="", tool="gen", cost_usd=value, tokens_in=0, tokens_out=0,
                                    tokens_cached=0, tokens_reasoning=0, latency_s=0.0)], user=None)
    t = Trajectory.model_construct(task_id="t", group_index=3, cost_usd=0.0, user_cost_usd=0.0, turns=[turn])
    with pytest.raises(LedgerError) as e:
        ledger([t])
    assert str(e.value) == f"t #3 turn 1: observations[0].cost_usd: {value!r} is not a cost (USD, finite and >= 0)"


def test_the_ledger_refuses_a_bill_whose_sum_overflows_a_float():
    obs = Observation(content="", tool="gen", cost_usd=1e308)
    # each cost is finite; two turns of 1e308 add up to 2e308, beyond the largest float
    turns = [Turn(text="", cost_usd=1e308, observations=[obs]) for _ in range(2)]
    with pytest.raises(LedgerError, match=r"^\(run\): total: 1 episodes' costs add up to more than the largest"):
        ledger([Trajectory(task_id="t", cost_usd=1e308, turns=turns)])
    # the same across episodes: each bill fits, the run's does not
    one = Trajectory(task_id="t", cost_usd=1e308, turns=turns[:1])
    with pytest.raises(LedgerError, match="2 episodes"):
        ledger([one, one])
    assert ledger([one]).total == Fraction(1e308)  # one of them is a bill


def test_prices_ledger_command_names_the_line_of_a_negative_cost(tmp_path, capsys):
    good = Trajectory(task_id="a", turns=[Turn(text="x", cost_usd=1.0)], cost_usd=1.0)
    bad = json.loads(good.model_dump_json())
    bad["turns"][0]["cost_usd"] = -5.0
    path = tmp_path / "run.jsonl"
    path.write_text(good.model_dump_json() + "\n" + json.dumps(bad) + "\n")
    assert main(["prices", "ledger", str(path), "--cards", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("orchlib prices: ") and f"{path}:2: turns.0.cost_usd: " in err and "\n" not in err


# ---------------------------------------------------------------------------------------------- prices check
TABLE = """\
prices:
  - model: free
    input: 0
    output: 0
    source: https://example.com/free
    date: 2025-01-01
"""


def test_a_row_priced_zero_flags_a_card_that_charges_without_dividing_by_zero(tmp_path):
    table = tmp_path / "table.yaml"
    table.write_text(TABLE)
    charging = ToolCard(name="gen", kind="simulated", description="d", price=Price(per_m_input=1.0))
    free = ToolCard(name="gratis", kind="simulated", description="d")
    report = check_prices([charging, free], read_prices(table), models={"gen": "free", "gratis": "free"})
    (finding,) = [f for f in report.findings if f.card == "gen"]
    assert (finding.kind, finding.field, finding.card_value, finding.table_value) == ("off", "price.per_m_input",
                                                                                      1.0, 0.0)
    assert "charged here, free in the table" in finding.message
    # no ratio to a price of 0: the table shows "-" in the ratio column
    row = next(line for line in report.table().splitlines() if line.lstrip().startswith("gen"))
    assert row.split()[5] == "-"
    assert [f.kind for f in report.findings if f.card == "gratis"] == ["ok"]  # free, as the table says


@pytest.mark.parametrize("factor", ["inf", "nan", "-inf", "1", "0.5"])
def test_prices_check_factor_must_be_finite_and_above_one(tmp_path, capsys, factor):
    card = tmp_path / "gen.yaml"
    card.write_text("name: gen\nkind: simulated\ndescription: d\nprice: {per_m_input: 1.0}\n")
    assert main(["prices", "check", str(card), f"--factor={factor}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"orchlib prices: --factor {float(factor):g}: a factor must be a finite number above 1"
