"""The generation interface every engine implements (transformers now, vLLM next).

Token in, token out: prompts are token ids, results are the sampled ids with the log-probability of
each under the sampling distribution (softmax of logits / temperature, before any top-p/top-k
truncation — the distribution the trainer recomputes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, Sequence, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["SamplingParams", "Generation", "GenerateResult", "Engine"]


class SamplingParams(BaseModel):
    """How to sample one batch. Defaults: plain sampling at temperature 1 (what GRPO assumes)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    max_new_tokens: int = Field(64, ge=1, description="per call; a tool call of the tiny policy is ~30 tokens")
    temperature: float = Field(1.0, ge=0.0, description="0 means greedy; 1 keeps log-probs exact for RL")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling; 1 disables it")
    top_k: int = Field(0, ge=0, description="0 disables top-k")
    seed: int | None = Field(None, description="seed for this call's sampling; None continues the engine's RNG")


@dataclass
class Generation:
    """One prompt's continuation. `ids` include the stop token when one was sampled."""

    ids: list[int]
    logprobs: list[float]
    finish_reason: Literal["stop", "length"]


@dataclass
class GenerateResult:
    outputs: list[Generation]
    seconds: float                      # wall time of the whole batched call
    prompt_tokens: int = 0
    meta: dict = field(default_factory=dict)

    @property
    def new_tokens(self) -> int:
        return sum(len(g.ids) for g in self.outputs)


@runtime_checkable
class Engine(Protocol):
    """What the rollout needs from a generation backend."""

    tokenizer: object

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 stop_ids: Sequence[int] = ()) -> GenerateResult: ...
