"""The database-environment helper: a stateful domain any task suite can build on.

Scoring follows τ²-bench (Barres et al. 2025, arXiv 2506.07982): a task's golden calls are replayed,
through the same tools the agent calls, on a fresh copy of the database; an episode scores 1 only when
its own final database has the same state hash as the golden one *and* the agent told the user every
required fact (`task.meta["required"]`). A read-only task's golden state is the initial state, so an
unrequested write scores 0. An episode that did not end on its own (the agent answered, a `final` tool
answered, or the user ended the conversation) scores 0, as in τ²-bench.

    AIRLINE = DBDomain("airline", initial=lambda task: load_json(...), tools=[get_reservation, ...])
    Task(..., env=AIRLINE.make_env, checker=AIRLINE.check)        # or, in a task file, by import path:
    {"env": "orchlib.envs.airline:AIRLINE.make_env", "checker": "orchlib.envs.airline:AIRLINE.check"}

A database is a pydantic model (subclass `Database`), a dataclass, or plain JSON values (dicts,
lists, strings, numbers); tools are typed, documented functions whose `env` (or `State`-annotated)
parameter receives the episode's copy and changes it in place. Keep money in integer cents where you
can: the hash is over canonical JSON, so equal states hash equal on any machine.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from typing import Any, Callable, Iterable, Sequence

from pydantic import BaseModel, ConfigDict

from orchlib.cards import ToolCard
from orchlib.chat import ToolCallParseError, parse_tool_calls
from orchlib.tasks import Task, mentions
from orchlib.tools import FunctionTool, Toolbox, ToolContext, run_sync
from orchlib.trajectory import ToolCall, Trajectory

__all__ = ["Database", "state_hash", "canonical_json", "DBDomain", "said_to_user", "ENDED_ON_ITS_OWN"]

# How an episode may end and still be scored (the rest — max_turns, token_budget, length — score 0).
ENDED_ON_ITS_OWN: frozenset[str] = frozenset({"answer", "final_tool", "user_stop"})


def canonical_json(state: Any) -> str:
    """One text per state: sorted keys, no spaces, pydantic models and dataclasses as their fields."""
    if isinstance(state, BaseModel):
        state = state.model_dump(mode="json")
    elif dataclasses.is_dataclass(state) and not isinstance(state, type):
        state = dataclasses.asdict(state)
    return json.dumps(state, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def state_hash(state: Any) -> str:
    """SHA-256 of the canonical JSON: equal states, equal hashes."""
    return hashlib.sha256(canonical_json(state).encode("utf-8")).hexdigest()


class Database(BaseModel):
    """Base of a typed database: mutable (the tools change it in place, as a database would)."""

    model_config = ConfigDict(extra="forbid")

    def state_hash(self) -> str:
        return state_hash(self)


def said_to_user(trajectory: Trajectory) -> str:
    """What the agent told the user: the text of its turns outside tool calls, and the final answer."""
    parts = []
    for turn in trajectory.turns:
        try:
            parts.append(parse_tool_calls(turn.text)[0])
        except ToolCallParseError:  # a malformed call: its text is still what the user would see
            parts.append(turn.text)
    if trajectory.final_answer:
        parts.append(trajectory.final_answer)
    return "\n".join(p for p in parts if p)


class DBDomain:
    """A database domain: the initial state per task, the tools over it, golden replay and the
    τ²-style checker. `initial(task)` may return a shared object: `make_env` hands out deep copies."""

    def __init__(self, name: str, initial: Callable[[Task], Any], tools: Sequence[Callable[..., Any]], *,
                 write_tools: Iterable[str] = (), tags: Sequence[str] = ()):
        self.name, self._initial = name, initial
        self.functions: dict[str, Callable[..., Any]] = {fn.__name__: fn for fn in tools}
        if len(self.functions) != len(tools):
            raise ValueError(f"{name}: two tools with the same name")
        unknown = set(write_tools) - set(self.functions)
        if unknown:
            raise ValueError(f"{name}: write_tools {sorted(unknown)} are not tools of the domain")
        self.write_tools = frozenset(write_tools)
        self.tags = list(tags) or [name, "local", "free"]
        self._toolbox: Toolbox | None = None
        self._golden: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"DBDomain({self.name!r}, {len(self.functions)} tools)"

    def cards(self) -> list[ToolCard]:
        """The tools' cards, derived from the typed, documented functions (never written twice)."""
        return [ToolCard.from_function(fn, tags=self.tags) for _, fn in sorted(self.functions.items())]

    @property
    def toolbox(self) -> Toolbox:
        if self._toolbox is None:
            self._toolbox = Toolbox(FunctionTool(card, fn=self.functions[card.name]) for card in self.cards())
        return self._toolbox

    def make_env(self, task: Task) -> Any:
        """Task.env factory: a fresh copy of the task's initial database for one episode."""
        return copy.deepcopy(self._initial(task))

    def replay(self, task: Task, calls: Sequence[ToolCall] | None = None) -> Any:
        """A fresh database after running `calls` (default: the task's golden calls) in order through
        the domain's tools (argument checks included). A call that fails raises ValueError naming it:
        golden calls must be valid, and a test that perturbs them wants to know."""
        env = self.make_env(task)
        if calls is None:
            calls = task.golden.calls if task.golden else []
        ctx = ToolContext(task_id=task.id, prompt=task.prompt, category=task.category, env=env)

        async def in_order() -> None:
            for i, call in enumerate(calls):
                if call.name not in self.functions:
                    raise ValueError(f"task {task.id}: call {i} {call.name!r} is not a {self.name} tool")
                obs = await self.toolbox.call(call, ctx, timeout_s=None)
                if obs.error:
                    raise ValueError(f"task {task.id}: call {i} {call.name} failed: {obs.error}")

        run_sync(in_order())
        return env

    def golden_hash(self, task: Task) -> str:
        """State hash after the golden calls (remembered per task id, golden calls and meta)."""
        key = json.dumps([task.id, task.golden.model_dump(mode="json") if task.golden else None, task.meta],
                         sort_keys=True, default=str)
        if key not in self._golden:
            self._golden[key] = state_hash(self.replay(task))
        return self._golden[key]

    def check(self, answer: str | None, task: Task, env: Any = None, trajectory: Trajectory | None = None) -> float:
        """Task checker: 1.0 when the episode ended on its own, its database has the golden state hash,
        and the agent said every fact in `task.meta["required"]` (in any turn when the trajectory is
        given, else in `answer`); else 0.0. `env=None`: no episode database was kept, scored as the
        untouched initial state."""
        if trajectory is not None and trajectory.finish_reason not in ENDED_ON_ITS_OWN:
            return 0.0
        said = said_to_user(trajectory) if trajectory is not None else answer
        if said is None:
            return 0.0
        state = env if env is not None else self.make_env(task)
        initial_type = type(self._initial(task))
        if not isinstance(state, initial_type):
            raise TypeError(f"task {task.id}: the {self.name} checker needs a {initial_type.__name__}, "
                            f"got {type(state).__name__}")
        if state_hash(state) != self.golden_hash(task):
            return 0.0
        return float(all(mentions(said, str(fact)) for fact in task.meta.get("required", [])))
