"""Prices per token class, from a table that says where each price came from and when.

    from orchlib.prices import load_prices
    table = load_prices()               # the shipped table, orchlib/data/prices.yaml
    table.row("gpt-5").output           # 10.0 USD per million output tokens
    replay_cards(path, prices=table)    # every recorded model priced from the table

A table is YAML: a `prices:` list of rows, each with the model's name (and `aliases`, other names the
same model goes by), USD per million `input`, `output`, `reasoning` and `cached_input` tokens, the
`source` the prices were read from and the `date` they held on. `reasoning: null` means reasoning
tokens are billed as output (every provider in the shipped table does), `cached_input: null` that
cached input is billed as input. A card takes a row with `price: {table: gpt-5}`
(`orchlib.cards.Price`), and `replay_cards(prices=table)` prices every model of a recording from it.

A name is found as written, or as one of a row's aliases, or as a configuration of one: "gpt-5/high"
and "gpt-5 (high)" are priced as "gpt-5". A malformed table names the file, line and field.
Prices change: each row carries its date so a reader can tell how old a figure is.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from orchlib import safeyaml

__all__ = ["PriceRow", "PriceTable", "PriceTableError", "load_prices", "SHIPPED_PRICES"]

SHIPPED_PRICES = "orchlib:data/prices.yaml"
_CONFIG_MARKS = ("/", " (", " ", ":", "@")  # what separates a model from its configuration in a name


class PriceTableError(ValueError):
    """A malformed price table: `"{file}:{line}: {field}: {problem}"`."""


class PriceRow(BaseModel):
    """One model's prices, USD per million tokens, with where and when they were read."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    model: str = Field(min_length=1, description="the model's name, as providers and recordings write it")
    aliases: list[str] = Field(default_factory=list, description="other names of the same model")
    # at most 1e9 USD per million tokens, as a card's price (orchlib.cards.costs.MAX_PRICE says why)
    input: float = Field(ge=0, le=1e9, description="USD per million input (prompt) tokens")
    output: float = Field(ge=0, le=1e9, description="USD per million output tokens, visible and reasoning")
    reasoning: float | None = Field(None, ge=0, le=1e9, description="USD per million reasoning tokens; null: "
                                                                    "the output price")
    cached_input: float | None = Field(None, ge=0, le=1e9, description="USD per million input tokens read from "
                                                                       "the provider's prompt cache; null: the "
                                                                       "input price")
    source: str = Field(min_length=1, description="where the prices were read (a URL)")
    date: dt.date = Field(description="the day they held on (YYYY-MM-DD)")

    @field_validator("source")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("a price needs its source")
        return value

    def price_fields(self) -> dict[str, float | None]:
        """The per-token fields of `orchlib.cards.Price` this row fills."""
        return {"per_m_input": self.input, "per_m_output": self.output, "per_m_reasoning": self.reasoning,
                "per_m_cached_input": self.cached_input}


class PriceTable:
    """Rows by model name (and alias). `path` is the file it was read from, if any."""

    def __init__(self, rows: list[PriceRow], path: Path | None = None):
        self.rows, self.path = list(rows), path
        self._by_name: dict[str, PriceRow] = {}
        for row in self.rows:
            for name in [row.model, *row.aliases]:
                if name in self._by_name:
                    raise ValueError(f"{path or 'price table'}: {name!r} is listed twice")
                self._by_name[name] = row

    @property
    def models(self) -> list[str]:
        return [r.model for r in self.rows]

    def find(self, model: str) -> PriceRow | None:
        """The row of `model`: its name or alias as written, else the longest name of which `model` is a
        configuration ("gpt-5/high", "gpt-5 (high)" → "gpt-5"); None when there is none."""
        found = self._by_name.get(model)
        if found is not None:
            return found
        best = ""
        for name in self._by_name:
            if len(name) > len(best) and model.startswith(name) and model[len(name):].startswith(_CONFIG_MARKS):
                best = name
        return self._by_name[best] if best else None

    def row(self, model: str) -> PriceRow:
        """The row of `model` (see `find`); KeyError naming the table and the models it prices."""
        found = self.find(model)
        if found is None:
            shown = ", ".join(self.models[:12]) + (" …" if len(self.models) > 12 else "")
            raise KeyError(f"no price for {model!r} in {self.path or 'the price table'} (it prices {shown})")
        return found

    def __contains__(self, model: object) -> bool:
        return isinstance(model, str) and self.find(model) is not None

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        return f"PriceTable({len(self.rows)} models{', ' + str(self.path) if self.path else ''})"


# ---------------------------------------------------------------------------------------------- loading
_CACHE: dict[tuple[str, int, int], PriceTable] = {}
_LOCK = threading.Lock()


def load_prices(path: str | os.PathLike | None = None) -> PriceTable:
    """The price table at `path` (default: the shipped one), read once per version of the file."""
    file = _resolve(path if path is not None else SHIPPED_PRICES)
    st = file.stat()
    key = (str(file.resolve()), st.st_mtime_ns, st.st_size)
    with _LOCK:
        found = _CACHE.get(key)
        if found is None:
            found = _CACHE[key] = read_prices(file)
    return found


def _resolve(spec: str | os.PathLike) -> Path:
    spec = os.fspath(spec)
    if spec.startswith("orchlib:"):
        return Path(str(resources.files("orchlib").joinpath(spec[len("orchlib:"):])))
    return Path(os.path.expanduser(spec))


def read_prices(path: str | os.PathLike) -> PriceTable:
    """Parse a price table (no cache). Raises PriceTableError naming the file, line and field."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise PriceTableError(f"{path}:0: not UTF-8 ({e.reason})") from None
    try:
        tree = safeyaml.load(YAML(typ="rt"), text)
    except safeyaml.YAMLInputError as e:
        raise PriceTableError(f"{path}:{e.line}: {e.problem}") from None
    if not isinstance(tree, CommentedMap) or not isinstance(tree.get("prices"), CommentedSeq):
        raise PriceTableError(f"{path}:1: prices: the table must be a mapping with a `prices:` list of rows")
    rows = []
    for i, item in enumerate(tree["prices"]):
        line = tree["prices"].lc.item(i)[0] + 1
        if not isinstance(item, CommentedMap):
            raise PriceTableError(f"{path}:{line}: prices[{i}]: a row must be a mapping")
        try:
            rows.append(PriceRow.model_validate(_plain(item)))
        except ValidationError as e:
            err = e.errors()[0]
            field = str(err["loc"][0]) if err["loc"] else "(row)"
            where = item.lc.key(field)[0] + 1 if field in item else line
            msg = "unknown field" if err["type"] == "extra_forbidden" else (
                "required field is missing" if err["type"] == "missing" else err["msg"])
            raise PriceTableError(f"{path}:{where}: prices[{i}].{field}: {msg}") from None
    try:
        return PriceTable(rows, path)
    except ValueError as e:
        raise PriceTableError(str(e)) from None


def _plain(obj: Any) -> Any:
    """ruamel's round-trip values as plain Python ones (a date stays a date)."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, (dt.date, dt.datetime)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    return str(obj)
