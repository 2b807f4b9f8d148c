"""The one interface every tool has: `await tool(arguments, context) -> Observation`.

`Tool.__call__` checks the arguments against the card's JSON Schema, runs the backend's `_run`,
times it, prices it from the card, and turns every failure into an error Observation: nothing raises
out of a call except cancellation. Backends subclass `Tool`, declare their `backend:` settings as a
pydantic model (`Settings`), and implement `async _run(arguments, context) -> Observation`.

Costs of failures: a call rejected before the backend ran (schema) costs nothing; a call that ran and
failed or timed out is charged its per-call fee, the seconds it ran and the tokens it reported.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import os
import re
import time
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar, Coroutine, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from orchlib.cards import ToolCard, arguments_problem
from orchlib.trajectory import Observation, set_fields

__all__ = ["ToolContext", "Tool", "ToolError", "approx_tokens", "task_text", "resolve_path", "run_sync",
           "NoSettings"]

T = TypeVar("T")
_UNCHECKED = object()


@dataclasses.dataclass
class ToolContext:
    """What a tool may know about the episode besides its arguments."""

    task_id: str = ""
    prompt: str = ""                    # the task text, as the user gave it
    category: str = ""                  # e.g. "arithmetic", "lookup", "gsm8k", "shop", "hard"
    answer: str | None = None           # reference answer: only simulated tools may read it
    messages: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # conversation so far
    state: Any = None                   # this episode's state (Task.state's, e.g. a database copy)
    seed: int = 0


class ToolError(Exception):
    """A failure a backend reports on purpose; becomes an error Observation with these fields."""

    def __init__(self, message: str, kind: str = "tool_failure", tokens_in: int = 0, tokens_out: int = 0):
        super().__init__(message)
        self.kind, self.tokens_in, self.tokens_out = kind, tokens_in, tokens_out


class NoSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Tool:
    """Base class of the backends. Subclasses set `kind`, `Settings`, and implement `_run`.

    `measured = False` marks stand-ins (simulated, replay): they never sleep and report the latency
    their card declares, drawn from (seed, tool name, task id), so runs are reproducible.
    """

    kind: ClassVar[str] = ""
    Settings: ClassVar[type[BaseModel]] = NoSettings
    measured: ClassVar[bool] = True
    # True where `_run` returns a new Observation on every call that nothing else holds (a replay builds
    # one per answer): `__call__` then sets the tool's fields on it instead of copying it. A backend
    # that may hand back one object twice (a cached result, a user function's) leaves it False.
    fresh_observations: ClassVar[bool] = False

    def __init__(self, card: ToolCard):
        if self.kind and card.kind != self.kind:
            raise card.error(("kind",), f"{type(self).__name__} runs kind {self.kind!r}, not {card.kind!r}")
        self.card = card
        try:
            self.settings = self.Settings.model_validate(card.backend)
        except ValidationError as e:
            raise card.errors_from(e, ("backend",))[0] from None
        import jsonschema  # slow to import; the card that built this tool has loaded it already

        validator_cls = jsonschema.validators.validator_for(card.parameters,
                                                            default=jsonschema.Draft202012Validator)
        self._validator = validator_cls(card.parameters)
        self._no_arguments: Any = _UNCHECKED  # check_arguments({}), once known

    @property
    def name(self) -> str:
        return self.card.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.card.name!r})"

    async def _run(self, arguments: dict[str, Any], context: ToolContext) -> Observation:
        raise NotImplementedError

    @property
    def stateful(self) -> bool:
        """Whether calls read or change the episode's state (they then run in order within a turn)."""
        return False

    def check_arguments(self, arguments: Any) -> str | None:
        """None when the arguments fit the card's schema, else a message saying where and why not."""
        if type(arguments) is dict and not arguments:  # no arguments (a model tool given the task): the
            if self._no_arguments is _UNCHECKED:       # same answer every time, so it is found once
                self._no_arguments = arguments_problem(self.name, self._validator, {})
            return self._no_arguments
        return arguments_problem(self.name, self._validator, arguments)

    async def __call__(self, arguments: dict[str, Any] | None = None, context: ToolContext | None = None, *,
                       timeout_s: float | None = None) -> Observation:
        arguments = {} if arguments is None else arguments
        context = context or ToolContext()
        problem = self.check_arguments(arguments)
        if problem:
            return self._error("schema_violation", problem, latency_s=0.0, charged=False)
        declared = None if self.measured else self.card.latency.sample(context.seed, self.name, context.task_id)
        if declared is not None and timeout_s is not None and declared > timeout_s:
            return self._error("timeout", f"{self.name} declares {declared:.3g} s, over the {timeout_s:g} s "
                                          "timeout", latency_s=timeout_s)
        t0 = time.perf_counter()
        try:
            run = self._run(arguments, context)
            # A stand-in never sleeps and its time is the declared (or recorded) one, judged against the
            # timeout here and below: no timer task per call.
            obs = await (run if declared is not None else asyncio.wait_for(run, timeout_s))
        except asyncio.TimeoutError as e:
            if timeout_s is None or declared is not None:  # raised inside the backend (since 3.11 the same
                # class), not our timeout: a stand-in runs without one
                return self._error("tool_failure", f"{self.name} failed: TimeoutError: {e}",
                                   latency_s=time.perf_counter() - t0)
            return self._error("timeout", f"{self.name} did not answer within {timeout_s:g} s",
                               latency_s=time.perf_counter() - t0)
        except ToolError as e:
            return self._error(e.kind, str(e), latency_s=declared if declared is not None else
                               time.perf_counter() - t0, tokens_in=e.tokens_in, tokens_out=e.tokens_out)
        except Exception as e:  # a broken backend or function is the episode's data, not a crash
            return self._error("tool_failure", f"{self.name} failed: {type(e).__name__}: {e}",
                               latency_s=declared if declared is not None else time.perf_counter() - t0)
        if "latency_s" in obs.model_fields_set:  # the backend reports the call's time (a recorded latency): kept
            latency = obs.latency_s
            if timeout_s is not None and latency > timeout_s:
                return self._error("timeout", f"{self.name} took {latency:.3g} s, over the {timeout_s:g} s timeout",
                                   latency_s=timeout_s)
        else:
            latency = declared if declared is not None else time.perf_counter() - t0
        update: dict[str, Any] = {
            "tool": self.name, "label": obs.label or self.card.label, "latency_s": latency,
            # a backend may end the episode itself (a "transfer to a human" call): only the card may add it
            "final": (self.card.final or obs.final) and obs.error is None,
            "cost_usd": self.card.price.cost(obs.tokens_in, obs.tokens_out, latency,
                                             tokens_reasoning=obs.tokens_reasoning, tokens_cached=obs.tokens_cached),
        }
        if obs.error and not obs.content:
            update["content"] = f"error: {obs.error}"
        if self.fresh_observations:  # the backend's own new object: completed in place, not copied
            set_fields(obs, update)
            return obs
        return obs.model_copy(update=update)

    def call_sync(self, arguments: dict[str, Any] | None = None, context: ToolContext | None = None,
                  **kw: Any) -> Observation:
        """`__call__` for code without an event loop (works inside Jupyter's running loop too)."""
        return run_sync(self(arguments, context, **kw))

    def _error(self, kind: str, message: str, *, latency_s: float, charged: bool = True, tokens_in: int = 0,
               tokens_out: int = 0) -> Observation:
        cost = self.card.price.cost(tokens_in, tokens_out, latency_s) if charged else 0.0
        return Observation(content=f"error: {message}", error=message, error_kind=kind, tool=self.name,
                           label=self.card.label, cost_usd=cost, latency_s=latency_s, tokens_in=tokens_in,
                           tokens_out=tokens_out)


# Word pieces as a BPE tokenizer tends to cut them: runs of letters, digits in groups of up to three
# (as cl100k/o200k do), and every other non-space character on its own.
_PIECE = re.compile(r"[^\W\d_]+|\d{1,3}|[^\w\s]|_")


def approx_tokens(text: str) -> int:
    """Approximate token count without a tokenizer: word pieces (letter runs, 1-3 digit groups,
    punctuation marks), letter runs longer than 8 characters counting two since BPE splits long words.
    A rough estimate that needs no tokenizer download; it prices recorded and simulated text only."""
    return sum(1 + (len(p) > 8) for p in _PIECE.findall(text or ""))


def task_text(context: ToolContext) -> str:
    """What a model tool with `input: task` reads: the task, then what the tools returned so far
    (the ToolOrchestra `answer` tool gets the problem and the documents collected)."""
    gathered = [f"[{m.get('name') or 'tool'}] {m.get('content', '')}" for m in context.messages
                if m.get("role") == "tool" and m.get("content")]
    if not gathered:
        return context.prompt
    return context.prompt + "\n\nContext gathered so far:\n" + "\n".join(gathered)


def resolve_path(spec: str, card: ToolCard) -> Path:
    """A path named in a card: `orchlib:data/...` is inside the installed package, a relative path is
    relative to the card's file (or the current folder for a card made in code)."""
    if spec.startswith("orchlib:"):
        return Path(str(resources.files("orchlib").joinpath(spec[len("orchlib:"):])))
    path = Path(os.path.expanduser(spec))
    if not path.is_absolute() and card.source is not None:
        path = card.source.parent / path
    return path


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code. Inside a running loop (Jupyter) it runs on a
    fresh loop in a worker thread, since a running loop cannot be re-entered."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="orchlib-sync") as pool:
        return pool.submit(asyncio.run, coro).result()
