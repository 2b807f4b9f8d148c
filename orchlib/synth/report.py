"""The synthesis report: kept and refused per stage and reason, and what the writer model cost."""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel, ConfigDict, Field

from orchlib.synth.llm import Usage

__all__ = ["StageCount", "SynthReport"]


class StageCount(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kept: int = 0
    refused: dict[str, int] = Field(default_factory=dict, description="reason -> count")
    examples: dict[str, str] = Field(default_factory=dict, description="reason -> the first refusal's message")

    def refuse(self, reason: str, message: str) -> None:
        self.refused = dict(Counter(self.refused) + Counter({reason: 1}))
        self.examples.setdefault(reason, message)


class SynthReport(BaseModel):
    model_config = ConfigDict(extra="forbid")
    domain: str
    package: str
    stages: dict[str, StageCount] = Field(default_factory=dict)
    llm: Usage = Field(default_factory=Usage)

    def stage(self, name: str) -> StageCount:
        return self.stages.setdefault(name, StageCount())

    def table(self) -> str:
        """A plain-text table a terminal or notebook prints as is."""
        lines = [f"{'stage':<8} {'kept':>5} {'refused':>8}  reasons"]
        for name, s in self.stages.items():
            reasons = ", ".join(f"{r} {n}" for r, n in sorted(s.refused.items())) or "-"
            lines.append(f"{name:<8} {s.kept:>5} {sum(s.refused.values()):>8}  {reasons}")
        u = self.llm
        lines.append(f"LLM: {u.requests} requests, {u.cached} stages from cache; {u.tokens_in} tokens in, "
                     f"{u.tokens_out} out; ${u.cost_usd:.6f} (${u.cost_usd_this_run:.6f} this run)")
        return "\n".join(lines)
