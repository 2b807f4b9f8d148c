"""`function` tools: a Python callable named by import path (`backend: {callable: pkg.module:fn}`) or
given as an object (`FunctionTool(card, fn=f)`, `bind(card, f)`).

Async functions are awaited; sync ones run in threads of their own (up to `MAX_THREADS` at once) so a
slow function does not block the other calls of a turn. A running thread cannot be stopped: after a
timeout its result is dropped, and its thread is given up — it runs to its end (or forever) without
holding a place among the `MAX_THREADS`, as a daemon thread that does not keep the process alive.
More than `MAX_RUNAWAY` calls given up and still running: a new call fails at once, saying so, rather
than waiting. A function may return an Observation (e.g. `final=True`, which ends the
episode); any other result is shown as text. One parameter may receive `context.state` (the episode's stateful
environment) and is not part of the schema: the one named by `backend.state`, else the one annotated
`State` (`db: State`, or `Annotated[DB, STATE]`), else one named `env`.

A card with no `backend.callable` and no function is schema-only: it is listed, rendered and checks
arguments like any tool, and a call to it is a `tool_failure` observation saying nothing is bound.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import importlib
import inspect
import json
import queue
import threading
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field

from orchlib.cards import STATE, State, ToolCard, state_parameter
from orchlib.tools.base import Tool, ToolContext, ToolError
from orchlib.trajectory import Observation

__all__ = ["FunctionSettings", "FunctionTool", "import_callable", "bind", "State", "STATE"]

# Tool functions mostly wait (I/O, sleeps, small computations), so more threads than cores is right;
# asyncio's default pool (min(32, cpus + 4)) would serialise 16 concurrent calls on a 2-core laptop.
MAX_THREADS = 32
# Calls that timed out and still run. Each holds a thread (and what its function holds) for good: past
# this many, something is wrong with a tool, and a new call says so instead of adding to them.
MAX_RUNAWAY = 64


class _Job:
    __slots__ = ("fn", "future", "given_up", "done")

    def __init__(self, fn: Callable[[], Any]):
        self.fn, self.future = fn, concurrent.futures.Future()
        self.given_up = self.done = False


class _Workers:
    """Daemon threads that run sync tool functions, at most `size` at once (more calls wait their turn).
    A call its caller stopped waiting for (`give_up`: a timeout) is dropped if it has not started; if it
    has, its thread leaves the `size` (another is started for the calls waiting) and ends when the
    function returns. Daemon threads: one whose function never returns does not keep the process alive
    (a ThreadPoolExecutor's threads are joined at exit, and such a process never exits)."""

    def __init__(self, size: int, max_runaway: int):
        self.size, self.max_runaway = size, max_runaway
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = self._idle = self._queued = self.runaway = 0

    def submit(self, fn: Callable[[], Any]) -> _Job:
        with self._lock:
            if self.runaway >= self.max_runaway:
                raise ToolError(f"{self.runaway} earlier calls of sync tool functions timed out and are still "
                                f"running (at most {self.max_runaway}); a tool never returns: fix it, or start a "
                                "new process")
            job = _Job(fn)
            self._jobs.put(job)
            self._queued += 1
            if self._queued > self._idle and self._threads < self.size:
                self._threads += 1
                threading.Thread(target=self._work, name="orchlib-tool", daemon=True).start()
        return job

    def give_up(self, job: _Job) -> None:
        if job.future.cancel():  # not started: it never runs
            return
        with self._lock:
            if not job.done and not job.given_up:
                job.given_up = True
                self._threads -= 1
                self.runaway += 1
                if self._queued > self._idle and self._threads < self.size:  # its place, to the waiting calls
                    self._threads += 1
                    threading.Thread(target=self._work, name="orchlib-tool", daemon=True).start()

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            job = self._jobs.get()
            with self._lock:
                self._idle -= 1
                self._queued -= 1
            if not job.future.set_running_or_notify_cancel():
                continue
            try:
                result = job.fn()
            except BaseException as e:  # the caller's to see, whatever it is
                job.future.set_exception(e)
            else:
                job.future.set_result(result)
            with self._lock:
                job.done = True
                if job.given_up:  # its place went to another thread
                    self.runaway -= 1
                    return
            # let go of this call (its arguments hold an episode's state) before waiting for the next one
            job = result = None


_workers: _Workers | None = None
_workers_lock = threading.Lock()


def workers() -> _Workers:
    """The threads of sync tool functions, made on first use."""
    global _workers
    with _workers_lock:
        if _workers is None:
            _workers = _Workers(MAX_THREADS, MAX_RUNAWAY)
        return _workers


async def run_in_thread(fn: Callable[[], Any]) -> Any:
    """`fn()` in a tool thread, awaited; a caller that stops waiting (a timeout) gives the call up."""
    pool = workers()
    job = pool.submit(fn)
    try:
        return await asyncio.wrap_future(job.future)
    except asyncio.CancelledError:
        pool.give_up(job)
        raise


class FunctionSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    # \S+ after the colon: a function made in a notebook or a test has "<locals>" in its qualified name;
    # such a path cannot be imported from a file, which import_callable then says plainly.
    callable: str | None = Field(None, pattern=r"^[\w.]+:\S+$", description="import path 'pkg.module:function'; "
                                 "none: the card is schema-only until a function is bound")
    state: str | None = Field(None, description="the parameter that receives the episode's state (default: "
                              "the one annotated State, else one named env)")


def import_callable(path: str) -> Callable[..., Any]:
    """`pkg.module:attr.attr` → the object; ImportError/AttributeError say what was missing."""
    module_name, _, qualname = path.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{path} is a {type(obj).__name__}, not a callable")
    return obj


class FunctionTool(Tool):
    kind = "function"
    Settings = FunctionSettings

    def __init__(self, card: ToolCard, fn: Callable[..., Any] | None = None):
        super().__init__(card)
        if fn is None and self.settings.callable is not None:
            try:
                fn = import_callable(self.settings.callable)
            except Exception as e:  # ImportError, AttributeError, or the module's own error on import
                raise card.error(("backend", "callable"), f"cannot import {self.settings.callable}: "
                                                          f"{type(e).__name__}: {e}") from None
        self.fn = fn
        self._state: str | None = None
        self._is_async = False
        if fn is None:
            return  # schema-only
        label = self.settings.callable or getattr(fn, "__qualname__", repr(fn))
        try:
            self._state = state_parameter(fn, self.settings.state)
        except TypeError as e:
            raise card.error(("backend", "state"), str(e)) from None
        self._is_async = inspect.iscoroutinefunction(fn)
        problem = _signature_mismatch(card.parameters, inspect.signature(fn), self._state)
        if problem:
            raise card.error(("parameters",), f"does not match {label}: {problem}")

    @classmethod
    def from_function(cls, fn: Callable[..., Any], *, state: str | None = None, **card_fields: Any) -> FunctionTool:
        """A tool straight from a typed, documented function (no YAML): `FunctionTool.from_function(f)`."""
        return cls(ToolCard.from_function(fn, state=state, **card_fields), fn=fn)

    @property
    def stateful(self) -> bool:
        return self._state is not None

    @property
    def bound(self) -> bool:
        """Whether a function runs the calls (False: a schema-only card)."""
        return self.fn is not None

    def bind(self, fn: Callable[..., Any]) -> FunctionTool:
        """This tool's card run by `fn`: a new tool, checked against the card's schema."""
        return FunctionTool(self.card, fn=fn)

    async def _run(self, arguments: dict[str, Any], context: ToolContext) -> Observation:
        if self.fn is None:
            raise ToolError(f"{self.name} has a schema and no implementation: bind a function "
                            "(orchlib.tools.bind(card, fn)) or set backend.callable")
        kwargs = dict(arguments)
        if self._state is not None:
            kwargs[self._state] = context.state
        if self._is_async:
            result = await self.fn(**kwargs)
        else:
            result = await run_in_thread(functools.partial(self.fn, **kwargs))
        # An Observation is passed on as the function made it: `final=True` ends the episode.
        return result if isinstance(result, Observation) else Observation(content=to_text(result))


def bind(card: ToolCard, fn: Callable[..., Any]) -> FunctionTool:
    """A `function` tool that runs `card` (schema-only, or imported from OpenAI/MCP) with `fn`."""
    if card.kind != "function":
        card = card.model_copy(update={"kind": "function", "backend": {}})
    return FunctionTool(card, fn=fn)


def _signature_mismatch(schema: dict[str, Any], signature: inspect.Signature, state: str | None) -> str | None:
    """Why a card's schema cannot be passed to the function, or None. A hand-written schema and its
    function must not drift apart: every property must be a parameter, every required parameter
    a required property."""
    if state in schema.get("properties", {}):
        return f"{state!r} receives the episode's state, so it cannot be an argument too"
    params = {n: p for n, p in signature.parameters.items() if n != state}
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return None  # **kwargs takes anything
    named = {n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    unknown = sorted(set(schema.get("properties", {})) - named)
    if unknown:
        return f"properties {unknown} are not parameters of the function"
    needed = {n for n in named if params[n].default is inspect.Parameter.empty}
    missing = sorted(needed - set(schema.get("required", [])))
    if missing:
        return f"the function requires {missing}; list them in 'required'"
    return None


def to_text(result: Any) -> str:
    """What the orchestrator reads: strings as they are, other JSON values as JSON, the rest as str()."""
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(result)
