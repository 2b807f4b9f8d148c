"""The generation interface every engine implements (transformers now, vLLM next).

Token in, token out: prompts are token ids, results are the sampled ids with the log-probability of
each under the sampling distribution (softmax of logits / temperature, before any top-p/top-k
truncation — the distribution the trainer recomputes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, AsyncContextManager, Literal, Protocol, Sequence, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["SamplingParams", "Generation", "GenerateResult", "Engine", "TrainableEngine", "ChatPolicy",
           "shares_weights", "exact_logprobs"]


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
    """A generating engine: what the rollout needs from a generation backend (token in, token out)."""

    tokenizer: object

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 stop_ids: Sequence[int] = ()) -> GenerateResult: ...


@runtime_checkable
class TrainableEngine(Engine, Protocol):
    """An engine the trainer samples from and updates: after each optimiser step it drops the keys and
    values it kept of the old weights (`clear_prefix_cache`) and, when it holds a copy of the weights of
    its own (vLLM), takes the new ones (`sync_weights`, timed in `last_sync["seconds"]`).

    Two class attributes say how it stands to the trainer's model, so that the trainer never asks
    which engine it has:

    - `shares_weights`: it samples from the trainer's model object itself (the transformers engine), so
      every update is already in it and `sync_weights` is never called;
    - `exact_logprobs`: its log-probs are the trainer's own to float rounding (~1e-6: the same weights
      and arithmetic), so they may serve as the ratio's denominator; otherwise (vLLM's kernels) the
      trainer recomputes them before its update.

    Both are optional, read through `shares_weights(engine)` and `exact_logprobs(engine)`: an engine
    that does not set them shares the weights unless it has a `sync_weights` to take new ones, and its
    log-probs are exact when it shares the weights."""

    last_sync: dict[str, float]

    def clear_prefix_cache(self) -> None: ...

    def sync_weights(self, model: Any) -> dict[str, float]: ...


def shares_weights(engine: Any) -> bool:
    """Whether `engine` samples from the trainer's own model (`TrainableEngine`), so that nothing is
    synced after an update. Not set: True unless the engine can take weights (`sync_weights`)."""
    return bool(getattr(engine, "shares_weights", not hasattr(engine, "sync_weights")))


def exact_logprobs(engine: Any) -> bool:
    """Whether `engine`'s sampled log-probs are the trainer's own (`TrainableEngine`). Not set: as
    `shares_weights(engine)`, since an engine with weights of its own computes with kernels of its own."""
    return bool(getattr(engine, "exact_logprobs", shares_weights(engine)))


@runtime_checkable
class ChatPolicy(Protocol):
    """A policy reached by messages (an API model as the orchestrator, `orchlib.engines.openai`): the
    rollout runs each episode on its own, `max_in_flight` at once, through `session()`; `start` gives
    the opening messages and `chat` one reply (text, tool calls, usage). Its trajectories hold no ids."""

    name: str
    max_in_flight: int

    def start(self, system: str, user: str, tools: list[dict[str, Any]]) -> list[dict[str, Any]]: ...

    def session(self) -> AsyncContextManager[Any]: ...

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], session: Any) -> Any: ...
