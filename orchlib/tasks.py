"""Task and Preference: what the orchestrator is asked to do, and what the user cares about.

A Preference is the ToolOrchestra vector P: weights on outcome, cost, latency and on each tool's
calls (plus user-named entries). The orchestrator sees it rendered in its system prompt and the reward
reads the same numbers, so one policy can learn to condition on it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Preference", "PROFILES"]


class Preference(BaseModel):
    """The user's preference vector P (ToolOrchestra §3: R = M_norm · P)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field("custom", description="profile name shown to the user and in reports")
    outcome: float = Field(1.0, description="weight on the normalised outcome term")
    cost: float = Field(0.0, description="weight on normalised -cost (higher = thriftier)")
    latency: float = Field(0.0, description="weight on normalised -latency (higher = faster)")
    tools: dict[str, float] = Field(default_factory=dict, description="weight per tool on its call count")
    extra: dict[str, float] = Field(default_factory=dict, description="user-named entries, P.<name> in rewards")

    def render(self) -> str:
        """The line the orchestrator reads in its system turn (stable format: the policy learns it)."""
        parts = [f"accuracy={self.outcome:g}", f"cost={self.cost:g}", f"latency={self.latency:g}"]
        parts += [f"{t}={w:g}" for t, w in sorted(self.tools.items())]
        parts += [f"{k}={v:g}" for k, v in sorted(self.extra.items())]
        return f"Preference ({self.name}): " + ", ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump()


# Named profiles used by the default suite; "local-only" puts a negative weight on paid API tools,
# which the suite fills in per tool (see orchlib.envs).
PROFILES: dict[str, Preference] = {
    "accuracy": Preference(name="accuracy", outcome=1.0, cost=0.0, latency=0.0),
    "thrifty": Preference(name="thrifty", outcome=1.0, cost=1.0, latency=0.0),
    "fast": Preference(name="fast", outcome=1.0, cost=0.0, latency=1.0),
    "local-only": Preference(name="local-only", outcome=1.0, cost=0.5, latency=0.0),
}
