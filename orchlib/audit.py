"""Audit the bill: every card's token prices against a price table that says where each price came from.

    from orchlib.audit import check_prices
    report = check_prices("toolcards", factor=2.0, models={"generalist": "gpt-5"})
    print(report.table()); report.flagged          # the same as `orchlib prices check toolcards`

A price mistake moves every cost-aware result without a word: a frontier model priced 10x too low
looks like a bargain to the reward and to the cost–accuracy front. Each card is matched to a row of
the table (`orchlib.prices`, each row with its source and date) by the model it stands for: `models[card
name]` if given, else the card's `price.table`, else its backend's `model` setting (replay and llm
cards). Then, per card, one finding of a kind:

- `ok`: every token price the card writes is within `factor` of the row's (both ways);
- `off`: a price differs from the row's by more than `factor` (the card's and the row's values and
  their ratio are in the finding); a card that charges for a class the row prices 0 is `off` whatever
  the factor (no finite ratio: the ratio column shows "-");
- `swapped`: the card's input price is the row's output price and its output the row's input;
- `per_thousand`: the card's price is the row's / 1000 within `factor`: a price per thousand tokens
  written where the card wants one per million;
- `no_source`: the card charges for tokens but no row prices its model (none named, or not in the
  table): nothing says where its price came from;
- `no_tokens`: the card charges nothing per token (a function, a sandbox billed per second): there
  is nothing in a token price table to check it against; not flagged.

Cached-input and reasoning prices are compared only where the card writes them (left unset they
follow the input and output prices, which is how the card bills them). A finding names the card's file,
the line and the field, as every orchlib error does.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Mapping

from orchlib.cards import ToolCard, load_cards
from orchlib.evaluate import format_table
from orchlib.prices import PriceRow, PriceTable, load_prices

__all__ = ["PriceFinding", "PriceCheck", "check_prices", "FLAGGED_KINDS", "card_model"]

FLAGGED_KINDS: tuple[str, ...] = ("off", "swapped", "per_thousand", "no_source")

# card field → (row field, what an unset card field falls back to)
_FIELDS = {"per_m_input": "input", "per_m_output": "output", "per_m_cached_input": "cached_input",
           "per_m_reasoning": "reasoning"}


@dataclass(frozen=True)
class PriceFinding:
    """One card's verdict (or one of its problems). Prices in USD per million tokens."""

    card: str
    kind: str                     # ok, off, swapped, per_thousand, no_source, no_tokens
    file: str                     # the card's file, or `<card NAME>` for a card made in code
    line: int                     # 1-based line of `field` in the file; 0 when unknown
    field: str                    # e.g. "price.per_m_input"
    message: str
    model: str | None = None      # the table row's model it was compared with
    card_value: float | None = None
    table_value: float | None = None
    source: str | None = None     # where the row's prices were read
    date: str | None = None       # the day they held on

    @property
    def flagged(self) -> bool:
        return self.kind in FLAGGED_KINDS

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.field}: {self.kind}: {self.message}"


@dataclass
class PriceCheck:
    """Every card's findings (at least one per card), the factor used and the table's path."""

    findings: list[PriceFinding]
    factor: float
    table_path: str | None = None

    @property
    def flagged(self) -> list[PriceFinding]:
        return [f for f in self.findings if f.flagged]

    @property
    def ok(self) -> bool:
        return not self.flagged

    def table(self) -> str:
        """One row per finding: card, verdict, field, the card's and the table's price, their ratio, the
        row's model, source and date; then the flagged findings as `file:line: field: kind: message`."""
        rows = []
        for f in self.findings:
            ratio = (f"{f.card_value / f.table_value:.3g}" if f.card_value is not None and f.table_value
                     else "-")
            rows.append([f.card, f.kind.upper() if f.flagged else f.kind, f.field,
                         _num(f.card_value), _num(f.table_value), ratio, f.model or "-", f.source or "-",
                         f.date or "-"])
        head = ["card", "verdict", "field", "card $/M", "table $/M", "ratio", "table row", "source", "date"]
        text = format_table(head, rows)
        where = f" against {self.table_path}" if self.table_path else ""
        cards = len({f.card for f in self.findings})
        summary = (f"{len({f.card for f in self.flagged})} of {cards} cards flagged ({len(self.flagged)} findings)"
                   f"{where} (factor {self.factor:g})")
        return "\n".join([text, "", summary, *[str(f) for f in self.flagged]])


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"


def card_model(card: ToolCard, models: Mapping[str, str] | None = None) -> str | None:
    """The model a card stands for: `models[card.name]`, else its `price.table`, else `backend.model`."""
    if models and card.name in models:
        return models[card.name]
    if card.price.table:
        return card.price.table
    model = card.backend.get("model") if isinstance(card.backend, Mapping) else None
    return str(model) if model else None


def _cards(cards: Any) -> list[ToolCard]:
    if isinstance(cards, (str, os.PathLike)):
        return load_cards(cards)
    if isinstance(cards, ToolCard):
        return [cards]
    found = getattr(cards, "cards", None)  # a Toolbox
    if found is not None and not callable(found):
        return list(found.values()) if isinstance(found, Mapping) else list(found)
    out: list[ToolCard] = []
    for item in cards:
        out += [item] if isinstance(item, ToolCard) else load_cards(item)
    return out


def check_prices(cards: Any, table: PriceTable | str | os.PathLike | None = None, factor: float = 2.0,
                 models: Mapping[str, str] | None = None) -> PriceCheck:
    """Check every card's token prices against `table` (default the shipped one; a path reads one).

    `cards`: a card file or folder, a list of those or of ToolCards, or a Toolbox. `factor` (> 1): how
    far a price may be from the row's, either way, before it is `off`. `models`: card name → the table
    model it stands for, for cards whose backend does not say (a simulated model priced as gpt-5).
    A malformed card or table raises its own error naming the file, line and field."""
    if not (isinstance(factor, (int, float)) and math.isfinite(factor) and factor > 1):
        raise ValueError(f"factor must be a finite number above 1, got {factor!r}")
    rows = table if isinstance(table, PriceTable) else load_prices(table)
    findings: list[PriceFinding] = []
    for card in _cards(cards):
        findings += _check_card(card, rows, float(factor), models)
    return PriceCheck(findings, float(factor), str(rows.path) if rows.path else None)


def _where(card: ToolCard, field: str) -> tuple[str, int]:
    e = card.error(tuple(field.split(".")), "")
    return e.file, e.line


def _finding(card: ToolCard, kind: str, field: str, message: str, row: PriceRow | None = None,
             card_value: float | None = None, table_value: float | None = None) -> PriceFinding:
    file, line = _where(card, field)
    return PriceFinding(card.name, kind, file, line, field, message, row.model if row else None, card_value,
                        table_value, row.source if row else None, str(row.date) if row else None)


def _close(a: float, b: float, factor: float) -> bool:
    if a == b:
        return True
    if a <= 0 or b <= 0:
        return False
    return max(a / b, b / a) <= factor


def _check_card(card: ToolCard, table: PriceTable, factor: float, models: Mapping[str, str] | None
                ) -> list[PriceFinding]:
    price = card.price
    written = {f: getattr(price, f) for f in _FIELDS if getattr(price, f) is not None}
    charges_tokens = any(v > 0 for v in written.values())
    model = card_model(card, models)
    row = table.find(model) if model else None
    if row is None:
        if not charges_tokens:
            return [_finding(card, "no_tokens", "price", "charges nothing per token: no token price to check")]
        why = (f"its model {model!r} is not in the price table" if model else
               "it names no model (backend.model, price.table, or models= / --model CARD=MODEL)")
        return [_finding(card, "no_source", "price", f"charges for tokens but {why}, so nothing says where "
                                                     "its price came from")]
    ci, co, ti, to = price.per_m_input, price.per_m_output, row.input, row.output
    if (ti != to and _close(ci, to, factor) and _close(co, ti, factor)
            and not (_close(ci, ti, factor) and _close(co, to, factor))):
        return [_finding(card, "swapped", "price.per_m_input",
                         f"input {ci:g} and output {co:g} are the table's output {to:g} and input {ti:g} "
                         f"({row.model}, {row.source}, {row.date}): input and output swapped", row, ci, ti)]
    out = []
    for field, row_field in _FIELDS.items():
        if field not in written:
            continue
        mine = written[field]
        theirs = getattr(row, row_field)
        if theirs is None:  # the row bills these as input (cached) or output (reasoning)
            theirs = row.input if row_field == "cached_input" else row.output
        if _close(mine, theirs, factor):
            continue
        what = f"{row_field.replace('_', ' ')} price {mine:g} per million"
        cite = f"{row.model}: {theirs:g} ({row.source}, {row.date})"
        if mine > 0 and theirs > 0 and abs(math.log(mine * 1000 / theirs)) <= math.log(factor):
            out.append(_finding(card, "per_thousand", f"price.{field}",
                                f"{what} is the table's per thousand tokens ({cite} per million ÷ 1000): "
                                "a price per thousand written as one per million", row, mine, theirs))
        else:
            # A row priced 0 (a free model) has no ratio to a card that charges: the card bills what the
            # table says is free, `off` whatever the factor (the table's ratio column shows "-").
            ratio = ("free here" if mine == 0 else "charged here, free in the table" if theirs == 0
                     else f"{mine / theirs:.3g}x the table's")
            out.append(_finding(card, "off", f"price.{field}", f"{what} is {ratio} ({cite}), beyond the "
                                                               f"factor {factor:g}", row, mine, theirs))
    if out:
        return out
    return [_finding(card, "ok", "price", f"within {factor:g}x of {row.model}", row, ci, ti)]

