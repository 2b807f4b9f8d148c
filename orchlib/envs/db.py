"""The database-environment helper: a stateful domain any task suite can build on.

Scoring follows τ²-bench (Barres et al. 2025, arXiv 2506.07982): a task's golden calls are replayed,
through the same tools the agent calls, on a fresh copy of the database; an episode scores 1 only when
its own final database has the same state hash as the golden one *and* the agent told the user every
required fact (`task.meta["required"]`). A read-only task's golden state is the initial state, so an
unrequested write scores 0. An episode that did not end on its own (the agent answered, a `final` tool
answered, or the user ended the conversation) scores 0, as in τ²-bench.

    AIRLINE = DBDomain("airline", initial=lambda task: load_json(...), tools=[get_reservation, ...])
    Task(..., state=AIRLINE.make_state, checker=AIRLINE.check)      # or, in a task file, by import path:
    {"state": "orchlib.envs.airline:AIRLINE.make_state", "checker": "orchlib.envs.airline:AIRLINE.check"}

A database is a pydantic model (subclass `Database`), a dataclass, or plain JSON values (dicts,
lists, strings, numbers); tools are typed, documented functions whose `env` (or `State`-annotated)
parameter receives the episode's copy and changes it in place. Keep money in integer cents where you
can: the hash is over canonical JSON, so equal states hash equal on any machine.

Tools that come from elsewhere come as they are: a pair `(schema, callable)`, the schema an OpenAI
function definition or an MCP Tool, the callable any name, with `state="data"` naming the parameter
that receives the database (a benchmark's `invoke(data, **kwargs)`, each tool's name read from its
schema):

    DBDomain("retail", initial=lambda task: load_db(), tools=[(schema, Tool.invoke) for ...],
             state="data", copy="fresh")

A call never leaves a half-done change: a tool that may write (one of `write_tools`, or every tool that
receives the state when `write_tools` is not given) runs on a private copy of the episode's state, and
the copy becomes the episode's state only when the call returns in time without an error. A call that
raises or times out leaves the state as it was, and a thread that runs on after its timeout changes
only its own copy, thrown away. Declared read-only tools read the episode's state itself (no copy).
The golden replay runs each call under `timeout_s`, so a tool that never returns is an error naming
the call, not a hang.

Each episode gets its own state. `copy="snapshot"` (the default) keeps the initial state's JSON once
and loads it per episode (json.loads of plain JSON values, `model_validate_json` of a `Database`),
several times cheaper than a deep copy of a large database; a state JSON cannot carry exactly (a
tuple, a dataclass, an integer key) is deep-copied instead. `copy="fresh"`: `initial(task)` already
builds a new state per call (it loads a file), so nothing is copied; `copy="deepcopy"`: always a
deep copy. What the agent told the user is checked against the required facts by `answer_rule`
(default `mentions_number`: whole-token mentions after dropping thousands separators, so "$23,553"
holds "23553"), over what `reads` says: `"all"` (the default) the agent's text of every turn, text
written beside tool calls included, and the final answer, joined into one text; `"to_user"` each
message sent to the user on its own (a turn without tool calls), a fact counting when one message
holds it. τ-bench's own output check is `reads="to_user", answer_rule=tau_bench_mentions`.
`final_tools` end the episode with their answer (a benchmark's `transfer_to_human_agents`), whatever
their schema says. Golden replays are remembered by what they depend on (the golden calls and the
initial state), so k trials of a task, under any ids, replay its golden calls once.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy as copying
import dataclasses
import hashlib
import inspect
import json
import re
import threading
from collections import OrderedDict
from typing import Any, AsyncIterator, Callable, Iterable, Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from orchlib.cards import ToolCard
from orchlib.chat import ToolCallParseError, parse_tool_calls
from orchlib.tasks import Task, mentions
from orchlib.tools import FunctionTool, Toolbox, ToolContext, ToolError, run_sync
from orchlib.trajectory import Observation, ToolCall, Trajectory

__all__ = ["Database", "state_hash", "canonical_json", "DBDomain", "said_to_user", "messages_to_user",
           "ENDED_ON_ITS_OWN", "mentions_number", "tau_bench_mentions", "without_thousands_separators"]

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


def messages_to_user(trajectory: Trajectory) -> list[str]:
    """The messages the agent sent to the user, in order: the text of each turn without tool calls (a
    turn with calls, or a malformed one, goes to the tools, and a `final` tool's answer is the tool's)."""
    out = []
    for turn in trajectory.turns:
        try:
            content, calls = parse_tool_calls(turn.text)
        except ToolCallParseError:
            continue
        if not calls:
            out.append(content)
    return out


_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def without_thousands_separators(text: str) -> str:
    """"$23,553" → "$23553", "1,234,567" → "1234567"; commas elsewhere ("a, b", "1,5") stay."""
    return _THOUSANDS.sub("", text)


def mentions_number(said: str, fact: str) -> bool:
    """The default answer rule: `fact` occurs in `said` as whole tokens, case-insensitively
    (orchlib.tasks.mentions: "8" is not in "18" or "$14.80"), after dropping thousands separators on
    both sides ("$23,553" holds "23553" and "23,553"). Stricter than τ-bench's check
    (`tau_bench_mentions`), which takes any substring: there "8" is in "18"."""
    return mentions(without_thousands_separators(said), without_thousands_separators(str(fact)))


def tau_bench_mentions(said: str, fact: str) -> bool:
    """τ-bench's output check, exactly: `fact`, lower-cased, is a substring of `said` lower-cased with
    every comma removed (`fact`'s own commas stay, so a fact with a comma is never found). With
    `reads="to_user"` it reads each message to the user on its own, as τ-bench does."""
    return str(fact).lower() in said.lower().replace(",", "")


@dataclasses.dataclass
class _Start:
    """An initial state as episodes start from it: the object, its JSON snapshot and how a copy is made."""

    state: Any
    digest: str                  # SHA-256 of the canonical JSON: what the golden replay depends on
    load: Callable[[], Any]      # a new copy of the state for one episode


class DBDomain:
    """A database domain: the initial state per task, the tools over it, golden replay and the
    τ²-style checker. `initial(task)` may return a shared object: `make_state` hands out copies (see
    `copy` in the module's docstring).

    `tools`: typed, documented functions (their cards derived from them), or `(schema, callable)`
    pairs (an OpenAI function definition or an MCP Tool, and what runs it). `state`: the parameter
    that receives the episode's state, for every tool that has it (default: a function's `State`-
    annotated parameter, else `env`). `write_tools`: the tools that may change the state (each call of
    one runs on a private copy, kept only when it succeeds; none given: every tool that receives the
    state is treated so). `final_tools`: tools whose answer ends the episode. `answer_rule(said, fact)
    -> bool`: whether a required fact was told to the user, in what `reads` says (`"all"` text, or each
    message `"to_user"`). `timeout_s`: per golden call, when the golden calls are replayed."""

    def __init__(self, name: str, initial: Callable[[Task], Any],
                 tools: Sequence[Callable[..., Any] | tuple[Mapping[str, Any], Callable[..., Any]]], *,
                 write_tools: Iterable[str] = (), tags: Sequence[str] = (), state: str | None = None,
                 copy: Literal["snapshot", "deepcopy", "fresh"] = "snapshot",
                 answer_rule: Callable[[str, str], bool] = mentions_number,
                 reads: Literal["all", "to_user"] = "all", final_tools: Iterable[str] = (),
                 timeout_s: float | None = 60.0):
        if copy not in ("snapshot", "deepcopy", "fresh"):
            raise ValueError(f'{name}: copy must be "snapshot", "deepcopy" or "fresh", not {copy!r}')
        if reads not in ("all", "to_user"):
            raise ValueError(f'{name}: reads must be "all" or "to_user", not {reads!r}')
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"{name}: timeout_s must be a positive number of seconds or None, not {timeout_s!r}")
        self.name, self._initial, self.copy, self.answer_rule = name, initial, copy, answer_rule
        self.reads, self.timeout_s = reads, timeout_s
        self.tags = list(tags) or [name, "local", "free"]
        self._cards: dict[str, ToolCard] = {}
        self.functions: dict[str, Callable[..., Any]] = {}
        for i, tool in enumerate(tools):
            card, fn = self._card(tool, state, i)
            if card.name in self.functions:
                raise ValueError(f"{name}: two tools with the same name {card.name!r}")
            self._cards[card.name], self.functions[card.name] = card, fn
        for field, names in (("write_tools", write_tools), ("final_tools", final_tools)):
            unknown = set(names) - set(self.functions)
            if unknown:
                raise ValueError(f"{name}: {field} {sorted(unknown)} are not tools of the domain")
        self.write_tools, self.final_tools = frozenset(write_tools), frozenset(final_tools)
        for tool in self.final_tools:
            self._cards[tool] = self._cards[tool].model_copy(update={"final": True})
        self._toolbox: Toolbox | None = None
        self._golden: dict[tuple[str, str], str] = {}
        # initial state object → its start; held so its id is not reused, bounded for `initial`s that
        # build a new object per call
        self._starts: OrderedDict[int, _Start] = OrderedDict()
        self._lock = threading.Lock()

    def _card(self, tool: Any, state: str | None, i: int) -> tuple[ToolCard, Callable[..., Any]]:
        if isinstance(tool, tuple):
            if len(tool) != 2 or not isinstance(tool[0], Mapping) or not callable(tool[1]):
                raise TypeError(f"{self.name}: tools[{i}] must be a function or a (schema, callable) pair")
            schema, fn = tool
            params = inspect.signature(fn).parameters
            takes_state = state if state is not None and state in params else None
            backend = {"state": takes_state} if takes_state else {}
            if "inputSchema" in schema or "input_schema" in schema:
                card = ToolCard.from_mcp(dict(schema), backend=backend, tags=self.tags)
            else:
                card = ToolCard.from_openai(dict(schema), backend=backend, tags=self.tags)
            return card, fn
        if not callable(tool):
            raise TypeError(f"{self.name}: tools[{i}] must be a function or a (schema, callable) pair, not "
                            f"{type(tool).__name__}")
        params = inspect.signature(tool).parameters
        takes_state = state if state is not None and state in params else None
        card = ToolCard.from_function(tool, state=takes_state, tags=self.tags)
        if takes_state:
            card = card.model_copy(update={"backend": {**card.backend, "state": takes_state}})
        return card, tool

    def __repr__(self) -> str:
        return f"DBDomain({self.name!r}, {len(self.functions)} tools)"

    def cards(self) -> list[ToolCard]:
        """The tools' cards: derived from the typed, documented functions (never written twice), or
        imported from the schemas the tools came with."""
        return [self._cards[name] for name in sorted(self._cards)]

    @property
    def toolbox(self) -> Toolbox:
        if self._toolbox is None:
            self._toolbox = Toolbox(_DomainTool(card, fn=self.functions[card.name],
                                                writes=not self.write_tools or card.name in self.write_tools)
                                    for card in self.cards())
        return self._toolbox

    # ------------------------------------------------------------------------------------- states
    def _start(self, task: Task) -> _Start:
        """The start of `task`'s episodes: remembered per initial object (snapshot, deepcopy), or
        made from a new object each time (fresh)."""
        state = self._initial(task)
        if self.copy == "fresh":
            return _Start(state, "", lambda: state)
        with self._lock:
            found = self._starts.get(id(state))
            if found is not None and found.state is state:
                self._starts.move_to_end(id(state))
                return found
        start = _snapshot(state) if self.copy == "snapshot" else _Start(
            state, "", lambda: copying.deepcopy(state))
        with self._lock:
            self._starts[id(state)] = start
            while len(self._starts) > 64:
                self._starts.popitem(last=False)
        return start

    def make_state(self, task: Task) -> Any:
        """Task.state factory: the task's initial database, for one episode (a copy of a shared one)."""
        return self._start(task).load()

    def replay(self, task: Task, calls: Sequence[ToolCall] | None = None) -> Any:
        """A fresh database after running `calls` (default: the task's golden calls) in order through
        the domain's tools (argument checks included). A call that fails raises ValueError naming it:
        golden calls must be valid, and a test that perturbs them wants to know; so does a call that
        does not answer within `timeout_s`."""
        return self._replay(task, self.make_state(task), calls)

    def _replay(self, task: Task, env: Any, calls: Sequence[ToolCall] | None) -> Any:
        if calls is None:
            calls = task.golden.calls if task.golden else []
        ctx = ToolContext(task_id=task.id, prompt=task.prompt, category=task.category, state=env)

        async def in_order() -> None:
            for i, call in enumerate(calls):
                if call.name not in self.functions:
                    raise ValueError(f"task {task.id}: call {i} {call.name!r} is not a {self.name} tool")
                obs = await self.toolbox.call(call, ctx, timeout_s=self.timeout_s)
                if obs.error:
                    raise ValueError(f"task {task.id}: call {i} {call.name} failed: {obs.error}")

        run_sync(in_order())
        return env

    def golden_hash(self, task: Task) -> str:
        """State hash after the golden calls, remembered by what it depends on: the golden calls and the
        initial state (not the task's id, so trials of a task replay it once)."""
        return self._golden_hash(task, self._start(task))

    def _golden_hash(self, task: Task, start: _Start) -> str:
        initial = start.digest or state_hash(start.state)  # fresh: the new object is the initial state
        calls = json.dumps([c.model_dump(mode="json") for c in task.golden.calls] if task.golden else [],
                           sort_keys=True, default=str)
        key = (initial, calls)
        if key not in self._golden:
            self._golden[key] = state_hash(self._replay(task, start.load(), None))
        return self._golden[key]

    def check(self, answer: str | None, task: Task, env: Any = None, trajectory: Trajectory | None = None) -> float:
        """Task checker: 1.0 when the episode ended on its own, its database has the golden state hash,
        and the agent said every fact in `task.meta["required"]` (in any turn when the trajectory is
        given, else in `answer`; by `answer_rule`, over what `reads` says); else 0.0. `env=None`: no
        episode database was kept, scored as the untouched initial state."""
        if trajectory is not None and trajectory.finish_reason not in ENDED_ON_ITS_OWN:
            return 0.0
        if trajectory is not None:
            said = [said_to_user(trajectory)] if self.reads == "all" else messages_to_user(trajectory)
        elif answer is None:
            return 0.0
        else:
            said = [answer]
        start = self._start(task)
        state = env if env is not None else start.state if self.copy == "fresh" else start.load()
        initial_type = type(start.state)
        if not isinstance(state, initial_type):
            raise TypeError(f"task {task.id}: the {self.name} checker needs a {initial_type.__name__}, "
                            f"got {type(state).__name__}")
        if state_hash(state) != self._golden_hash(task, start):
            return 0.0
        return float(all(any(self.answer_rule(text, str(fact)) for text in said)
                         for fact in task.meta.get("required", [])))


class _DomainTool(FunctionTool):
    """A domain's tool. One that may write (`writes`) and receives the state runs on a private copy of
    it, which replaces the episode's state's contents only when the call returned in time (a timeout
    cancels the wait before this) and without an error: a failed call changes nothing, and a thread left
    running after its timeout writes only into its copy."""

    def __init__(self, card: ToolCard, fn: Callable[..., Any], writes: bool):
        super().__init__(card, fn=fn)
        self.writes = writes

    async def _run(self, arguments: dict[str, Any], context: ToolContext) -> Observation:
        live = context.state
        if not (self.writes and self.stateful) or isinstance(live, (str, bytes, int, float, tuple, type(None))):
            return await super()._run(arguments, context)  # nothing it could change in place
        async with _one_writer(live):  # two writes copying the same state: one's commit would undo the other's
            private = copying.deepcopy(live)
            obs = await super()._run(arguments, dataclasses.replace(_bare(context), state=private))
            if obs.error is None:
                _commit(live, private)
        return obs


# (state, event loop) → [the lock its writes take, how many hold or wait for it]; an entry lives while used
_writers: dict[tuple[int, int], list[Any]] = {}


@contextlib.asynccontextmanager
async def _one_writer(state: Any) -> AsyncIterator[None]:
    """One write at a time on `state` (calls run one after another already, unless the rollout's
    `stateful_calls="concurrent"` runs them at once)."""
    key = (id(state), id(asyncio.get_running_loop()))
    entry = _writers.setdefault(key, [asyncio.Lock(), 0])
    entry[1] += 1
    try:
        async with entry[0]:
            yield
    finally:
        entry[1] -= 1
        if not entry[1]:
            del _writers[key]


def _bare(context: ToolContext) -> ToolContext:
    """A plain ToolContext with `context`'s fields (the rollout's builds its messages lazily)."""
    return ToolContext(task_id=context.task_id, prompt=context.prompt, category=context.category,
                       answer=context.answer, state=context.state, seed=context.seed)


def _commit(live: Any, new: Any) -> None:
    """`live` takes `new`'s contents in place (the episode, its checker and `return_states` hold `live`)."""
    if isinstance(live, dict):
        live.clear()
        live.update(new)
    elif isinstance(live, list):
        live[:] = new
    elif dataclasses.is_dataclass(live) and not hasattr(live, "__dict__"):  # slots=True
        for f in dataclasses.fields(live):
            object.__setattr__(live, f.name, getattr(new, f.name))
    elif hasattr(live, "__dict__"):  # a pydantic model, a dataclass, an object of one's own
        vars(live).clear()
        vars(live).update(vars(new))
        if isinstance(live, BaseModel):  # pydantic keeps these beside __dict__
            for name in ("__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__"):
                object.__setattr__(live, name, getattr(new, name))
    else:
        raise ToolError(f"cannot commit a call's changes to a state of type {type(live).__name__}: make it a "
                        "dict, a list, a dataclass or a pydantic model")


def _snapshot(state: Any) -> _Start:
    """A start that loads the state's JSON per episode, where JSON gives back exactly the state (checked
    once here); else one that deep-copies it."""
    try:
        text = canonical_json(state)
    except (TypeError, ValueError):  # not JSON (a set, NaN): copied, and the checker will say it cannot hash it
        return _Start(state, "", lambda: copying.deepcopy(state))
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if isinstance(state, BaseModel):
        cls = type(state)
        native = state.model_dump_json()  # the model's own JSON: its aliases and types load back
        try:
            exact = cls.model_validate_json(native) == state
        except ValueError:
            exact = False
        if exact:
            return _Start(state, digest, lambda: cls.model_validate_json(native))
    elif isinstance(state, (dict, list)):
        plain = json.dumps(state, ensure_ascii=False, allow_nan=False)
        if _same(json.loads(plain), state):
            return _Start(state, digest, lambda: json.loads(plain))
    return _Start(state, digest, lambda: copying.deepcopy(state))


def _same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (1 == 1.0 == True for ==, not for a tool)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b
