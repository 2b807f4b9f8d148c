"""What a tool call costs: `Price` (USD per call, per million tokens of each class, per second, or a row
of the price table) and `Latency` (the seconds a card declares, drawn reproducibly by simulated and replay
tools)."""

from __future__ import annotations

import random
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["Price", "Latency", "MAX_PRICE", "CALL_TOKENS", "price_per_call"]

# The most any price may be, in USD (per call, per second, per million tokens). 1e9 per million tokens
# is $1,000 a token: a million times the dearest output price in the price table (~$600 per million),
# so no real price is refused (and made-up prices that keep a test's amounts exact in binary fit);
# and a cost from such a price overflows a float only past ~1e305 tokens (or calls, or seconds), so
# every cost computed from a card, and every sum of a run's costs, stays finite.
MAX_PRICE = 1e9


class Price(BaseModel):
    """What one call costs, in USD. All parts add up; 0 means free."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    # Every part is finite, >= 0 and at most MAX_PRICE (see there: no cost computed from a card overflows).
    per_call: float = Field(0.0, ge=0, le=MAX_PRICE, description="flat fee per call (the ToolOrchestra web "
                            "search: 0.01)")
    per_m_input: float = Field(0.0, ge=0, le=MAX_PRICE, description="per million input tokens (gpt-5: 1.25)")
    per_m_output: float = Field(0.0, ge=0, le=MAX_PRICE, description="per million output tokens (gpt-5: 10)")
    per_second: float = Field(0.0, ge=0, le=MAX_PRICE, description="per second of run time (code interpreter: "
                              "0.0000083)")
    per_m_reasoning: float | None = Field(None, ge=0, le=MAX_PRICE, description="per million reasoning tokens; "
                                          "unset: the output price (providers bill reasoning tokens as output)")
    per_m_cached_input: float | None = Field(None, ge=0, le=MAX_PRICE, description="per million input tokens "
                                             "read from the provider's cache; unset: the input price")
    table: str | None = Field(None, description="a model of orchlib's price table (orchlib/data/prices.yaml, each "
                                                "row with its source and date): its input, output, reasoning and "
                                                "cached-input prices fill those fields, which must then agree with "
                                                "it where written too")

    @model_validator(mode="before")
    @classmethod
    def _from_table(cls, data: Any) -> Any:
        """The token prices of the `table` row, merged into what the card wrote (which must agree)."""
        if not isinstance(data, dict) or data.get("table") is None:
            return data
        from orchlib.prices import load_prices  # prices imports nothing of cards: no circle

        try:
            row = load_prices().row(str(data["table"]))
        except KeyError as e:
            raise ValueError(e.args[0]) from None
        out = dict(data)
        for key, value in row.price_fields().items():
            if key in out and out[key] != value:
                raise ValueError(f"{key} is {out[key]} but the price table's {row.model!r} row says {value} "
                                 f"({row.source}, {row.date}); write one or the other")
            out[key] = value
        return out

    @classmethod
    def from_table(cls, model: str, table: Any = None, **more: float) -> Price:
        """The price of `model` in `table` (an `orchlib.prices.PriceTable`; default the shipped one), plus
        `more` fields (per_call, per_second). From the shipped table the price remembers its row (`table`)."""
        if table is None:
            return cls(table=model, **more)
        return cls(**table.row(model).price_fields(), **more)

    def cost(self, tokens_in: int = 0, tokens_out: int = 0, seconds: float = 0.0, calls: int = 1,
             tokens_reasoning: int = 0, tokens_cached: int = 0) -> float:
        """USD for `calls` calls that read `tokens_in`, wrote `tokens_out` and ran `seconds` in all.
        As OpenAI's `usage` counts them, `tokens_reasoning` are part of `tokens_out` and `tokens_cached`
        part of `tokens_in`; they change the cost only where the card prices them apart."""
        reasoning = self.per_m_output if self.per_m_reasoning is None else self.per_m_reasoning
        cached = self.per_m_input if self.per_m_cached_input is None else self.per_m_cached_input
        # The two differences are exactly 0.0 for a card that does not price them apart: same sum as before.
        return (calls * self.per_call + tokens_in * self.per_m_input / 1e6
                + tokens_out * self.per_m_output / 1e6 + seconds * self.per_second
                + tokens_reasoning * (reasoning - self.per_m_output) / 1e6
                + tokens_cached * (cached - self.per_m_input) / 1e6)

    def describe(self) -> str:
        parts = [f"${_usd(v)} {unit}" for v, unit in ((self.per_call, "per call"),
                                                   (self.per_m_input, "per million input tokens"),
                                                   (self.per_m_cached_input, "per million cached input tokens"),
                                                   (self.per_m_output, "per million output tokens"),
                                                   (self.per_m_reasoning, "per million reasoning tokens"),
                                                   (self.per_second, "per second")) if v]
        return ", ".join(parts) or "free"


class Latency(BaseModel):
    """Declared latency. Simulated and replay tools report a draw from it instead of sleeping, so runs
    are reproducible; real tools are timed and this is only what the card promises."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    seconds: float = Field(0.0, ge=0, description="mean seconds per call")
    jitter: float = Field(0.0, ge=0, lt=1, description="relative half-width: draws are uniform in "
                          "seconds × [1 - jitter, 1 + jitter]; 0 reports exactly `seconds`")

    def sample(self, *key: Any) -> float:
        """A draw that depends only on `key` (e.g. seed, tool name, task id): same key, same seconds."""
        if not self.jitter:
            return self.seconds
        # random.Random seeds a str through SHA-512, so the draw is stable across processes
        # (unlike hash(), which PYTHONHASHSEED randomises).
        u = random.Random(":".join(map(str, key))).uniform(-1.0, 1.0)
        return self.seconds * (1.0 + self.jitter * u)


def _usd(value: float) -> str:
    """0.0000083 rather than 8.3e-06: prices are read by people and small models."""
    return f"{value:g}" if value >= 1e-3 else f"{value:.10f}".rstrip("0").rstrip(".")


# the call prices are compared by, where a prompt or a report ranks tools: as many input as output tokens
CALL_TOKENS = 1000


def price_per_call(price: Price, latency: Latency) -> float:
    """USD for one call of CALL_TOKENS input and CALL_TOKENS output tokens at the declared latency: the key
    tools' prices are ranked by (`RolloutConfig.price_order`, `ConfigurationSpace.price_ranks`,
    `heldout_summary`'s `cheapest_shown`)."""
    return price.cost(CALL_TOKENS, CALL_TOKENS, latency.seconds)
