"""The record of one episode's tool configuration (`Configuration`), as a trajectory keeps it.

Apart from `orchlib.configurations` (which draws it) because `orchlib.trajectory` holds it and imports
nothing of the tools: P is kept as a dict of `orchlib.tasks.Preference`'s fields, as
`Trajectory.preference` keeps it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchlib.cards.costs import Latency, Price

__all__ = ["OfferedTool", "Configuration"]


class OfferedTool(BaseModel):
    """One tool as an episode offers it: shown as `alias`, answered by `backend`, at `price`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    alias: str = Field(description="the name the policy reads and calls")
    backend: str = Field(description="the environment's tool that answers for it")
    price: Price = Field(description="shown and charged: the call is billed at these prices")
    latency: Latency = Field(description="declared: what a stand-in backend reports, and the prompt shows")
    description: str = Field(description="shown to the policy (the price line is added when `show_prices`)")
    factor: float | None = Field(None, description="the drawn factor on the list price (None: prices drawn apart)")


class Configuration(BaseModel):
    """The concrete configuration of one episode: the offered tools in the order shown, and P."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    tools: tuple[OfferedTool, ...] = Field(description="the offered tools, in the order the list shows them")
    preference: dict[str, Any] | None = Field(None, description="the episode's P (Preference's fields); None: "
                                                                  "the task's own")
    show_prices: bool = Field(False, description="each description ends with its price and latency")
    price_ranks: bool = Field(False, description="...and with where its price per call stands among the offered "
                                                 "tools' (lowest, highest, between)")
    space: str = Field("", description="the space it was drawn from")
    held_out: tuple[str, ...] = Field((), description="parts training never showed (the space's declaration)")
    seed: int | None = Field(None, description="the draw's seed (None: not drawn, e.g. written by hand)")
    episode: int | None = Field(None, description="the episode index it was drawn for")

    @property
    def aliases(self) -> dict[str, str]:
        """alias → backend, in the order shown."""
        return {t.alias: t.backend for t in self.tools}

    def backend_of(self, name: str) -> str:
        """The backend behind an offered alias; a name not offered, as written."""
        return next((t.backend for t in self.tools if t.alias == name), name)

    def summary(self) -> str:
        """One line: `alias→backend ($in/$out per M), …`."""
        return ", ".join(f"{t.alias}→{t.backend} ({t.price.describe()})" for t in self.tools)
