"""Tool runtime: the backends by kind, `build_tool(card)`, and `Toolbox`, which runs a turn's calls.

    box = Toolbox.load("toolcards")
    obs = box.call_many_sync([ToolCall(name="calculator", arguments={"expression": "2+2"})])

Every call returns an Observation; nothing raises for an unknown tool, bad arguments, a failing
backend or a timeout — each is an error Observation with `error_kind` set, so a rollout goes on.
"""

from __future__ import annotations

import asyncio
import os
from typing import Iterable, Iterator, Sequence

from pydantic import ValidationError

from orchlib.cards import CardError, ToolCard, check_cards, load_cards
from orchlib.tools.base import Tool, ToolContext, ToolError, approx_tokens, run_sync, task_text
from orchlib.tools.function import STATE, FunctionTool, State, bind
from orchlib.tools.llm import LLMTool
from orchlib.tools.mcp import MCPTool
from orchlib.tools.python import PythonTool
from orchlib.tools.replay import ReplayTool, replay_lookup
from orchlib.tools.search import SearchTool
from orchlib.tools.simulated import SimulatedTool
from orchlib.trajectory import Observation, ToolCall

__all__ = ["BACKENDS", "build_tool", "Toolbox", "Tool", "ToolContext", "ToolError", "FunctionTool", "PythonTool",
           "SearchTool", "LLMTool", "MCPTool", "ReplayTool", "SimulatedTool", "replay_lookup", "approx_tokens",
           "task_text", "bind", "State", "STATE", "DEFAULT_TIMEOUT_S", "DEFAULT_MAX_PARALLEL", "CardError",
           "validate_cards"]

# kind -> backend class. Add a backend by writing a Tool subclass and adding it here.
BACKENDS: dict[str, type[Tool]] = {
    "function": FunctionTool,
    "python": PythonTool,
    "search": SearchTool,
    "llm": LLMTool,
    "replay": ReplayTool,
    "simulated": SimulatedTool,
    "mcp": MCPTool,
}

# A turn waits for its slowest call; 60 s bounds a hung tool while letting a real API model answer
# (ToolOrchestra's tools declare 8-96 s average latencies, those over 60 s are reasoning models).
DEFAULT_TIMEOUT_S = 60.0
# Calls in one turn run at once up to this many; more wait for a free slot.
DEFAULT_MAX_PARALLEL = 16


def build_tool(card: ToolCard) -> Tool:
    """The runnable tool of a card. Bad backend settings or an import that fails raise CardError
    naming the card's file, line and field (e.g. `backend.callable: cannot import pkg.mod:fn: ...`)."""
    backend = BACKENDS.get(card.kind)
    if backend is None:  # only reachable when BACKENDS was edited: Kind lists the kinds cards may have
        raise card.error(("kind",), f"no backend for kind {card.kind!r} (have {sorted(BACKENDS)})")
    return backend(card)


def validate_cards(cards, build: bool = True) -> list[CardError]:
    """Every problem of every card, without raising (`orchlib.cards.check_cards`: YAML, fields, JSON
    Schema, duplicate names) and, with `build`, of its backend: settings and imports (each tool is
    built, nothing is run). `cards`: card files or folders, ToolCards or dicts, one or a list."""
    return check_cards(cards, _build_problems if build else None)


def _build_problems(card: ToolCard) -> list[CardError]:
    """Every problem of a card's backend settings, else the first one building its tool meets (an
    import that fails, a missing file). build_tool stops at the first settings problem; a validator
    should list them all, one line each."""
    backend = BACKENDS.get(card.kind)
    if backend is not None:
        try:
            backend.Settings.model_validate(card.backend)
        except ValidationError as e:
            return card.errors_from(e, ("backend",))
    try:
        build_tool(card)
    except CardError as e:
        return [e]
    return []


class Toolbox:
    """The tools of an episode, by name."""

    def __init__(self, tools: Iterable[Tool]):
        self._tools: dict[str, Tool] = {}
        self._schemas: dict[bool, list[dict]] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise tool.card.error(("name",), f"two tools named {tool.name!r}")
            self._tools[tool.name] = tool

    @classmethod
    def from_cards(cls, cards: Iterable[ToolCard]) -> Toolbox:
        return cls(build_tool(c) for c in cards)

    @classmethod
    def load(cls, path_or_folder: str | os.PathLike | Iterable[str | os.PathLike]) -> Toolbox:
        """Tools of a card file or folder (top level only: toolcards/examples/ is not loaded)."""
        return cls.from_cards(load_cards(path_or_folder))

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    @property
    def cards(self) -> list[ToolCard]:
        return [t.card for t in self._tools.values()]

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"Toolbox({', '.join(self._tools)})"

    def select(self, names: Iterable[str]) -> Toolbox:
        """A toolbox with only these tools (a task may offer a subset); unknown names raise KeyError."""
        return Toolbox(self._tools[n] for n in names)

    def schemas(self, with_costs: bool = False) -> list[dict]:
        """OpenAI-format tool list for the chat template (`tools=`), each under its card's own name (the
        template and the `<tool_call>` parser take dotted names; `card.to_openai` maps them for the API).
        Built once per toolbox (cards are frozen; a rollout lists the tools for every episode): read the
        dicts, copy one to change it."""
        if with_costs not in self._schemas:
            self._schemas[with_costs] = [t.card.to_transformers(with_costs) for t in self._tools.values()]
        return list(self._schemas[with_costs])

    async def call(self, call: ToolCall, context: ToolContext | None = None, *,
                   timeout_s: float | None = DEFAULT_TIMEOUT_S) -> Observation:
        tool = self._tools.get(call.name)
        if tool is None:
            known = ", ".join(self._tools) or "none"
            return Observation(content=f"error: unknown tool {call.name!r} (available: {known})",
                               error=f"unknown tool {call.name!r}; available: {known}", error_kind="unknown_tool")
        return await tool(call.arguments, context, timeout_s=timeout_s)

    async def call_many(self, calls: Sequence[ToolCall], context: ToolContext | None = None, *,
                        timeout_s: float | None = DEFAULT_TIMEOUT_S,
                        max_parallel: int = DEFAULT_MAX_PARALLEL) -> list[Observation]:
        """Run one turn's calls concurrently, at most `max_parallel` at once, each under its own
        `timeout_s` (counted from when it starts). Observations come back in the order of `calls`."""
        if max_parallel < 1:
            raise ValueError(f"max_parallel must be at least 1, got {max_parallel}")
        gate = asyncio.Semaphore(max_parallel)

        async def one(call: ToolCall) -> Observation:
            async with gate:
                return await self.call(call, context, timeout_s=timeout_s)

        return list(await asyncio.gather(*(one(c) for c in calls)))

    def call_many_sync(self, calls: Sequence[ToolCall], context: ToolContext | None = None, **kw) -> list[Observation]:
        """`call_many` from sync code, inside or outside a running event loop (Jupyter has one)."""
        return run_sync(self.call_many(calls, context, **kw))
