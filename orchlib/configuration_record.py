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
    alias: str
    backend: str
    price: Price
    latency: Latency
    description: str
    factor: float | None = Field(None, description="the drawn factor on the list price (None: prices drawn apart)")


class Configuration(BaseModel):
    """The concrete configuration of one episode: the offered tools in the order shown, and P."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    tools: tuple[OfferedTool, ...]
    preference: dict[str, Any] | None = Field(None, description="the episode's P (Preference's fields); None: "
                                                                  "the task's own")
    show_prices: bool = False
    space: str = Field("", description="the space it was drawn from")
    held_out: tuple[str, ...] = Field((), description="parts training never showed (the space's declaration)")
    seed: int | None = None
    episode: int | None = None

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
