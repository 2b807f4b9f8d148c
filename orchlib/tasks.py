"""Task, Preference and answer checkers: what the orchestrator is asked to do, and what the user cares about.

A Preference is the ToolOrchestra vector P: weights on outcome, cost, latency and on each tool's
calls (plus user-named entries). The orchestrator sees it rendered in its system prompt and the reward
reads the same numbers, so one policy can learn to condition on it.
"""

from __future__ import annotations

import importlib
import inspect
import math
import os
import re
from pathlib import Path
from tokenize import TokenError
from typing import Any, Callable, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from orchlib import safejson
from orchlib.atomic import write_text_atomic
from orchlib.trajectory import ToolCall, UserTurn

__all__ = ["Preference", "PROFILES", "Golden", "STOP_MARKER", "UserSpec", "Task", "CHECKERS", "check_answer",
           "extract_number", "mentions", "answer_in_text", "resolve", "load_tasks", "save_tasks", "TaskFileError",
           "under_profiles"]


class Preference(BaseModel):
    """The user's preference vector P (ToolOrchestra §3: R = M_norm · P)."""

    # No NaN or infinite weights: JSON task files may spell them, and one would make every reward NaN.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    name: str = Field("custom", description="profile name shown to the user and in reports")
    outcome: float = Field(1.0, description="weight on the normalised outcome term")
    cost: float = Field(0.0, description="weight on normalised -cost (higher = thriftier)")
    latency: float = Field(0.0, description="weight on normalised -latency (higher = faster)")
    tools: dict[str, float] = Field(default_factory=dict, description="weight per tool on its call count")
    extra: dict[str, float] = Field(default_factory=dict, description="user-named entries, P.<name> in rewards")

    def render(self, weights: bool = True, instruction: bool = False, words: str | None = None,
               vector: bool = True) -> str:
        """The line the orchestrator reads in its prompt (stable format: the policy learns it). `weights=False`:
        the profile's name alone, `Preference (thrifty):`, for a policy that learns named profiles.
        `instruction=True`: words before the weights, `Preference (thrifty): Get the answer right. Every dollar
        spent counts against you: ... (accuracy=1, cost=1, latency=0)`, as ToolOrchestra shows P: `words`
        where given (an instruction written for this P), else `instruction()`'s; `vector=False` leaves the
        weights out after them (`Preference (thrifty): Every dollar spent counts ...`)."""
        if not weights:
            return f"Preference ({self.name}):"
        parts = [f"accuracy={self.outcome:g}", f"cost={self.cost:g}", f"latency={self.latency:g}"]
        parts += [f"{t}={w:g}" for t, w in sorted(self.tools.items())]
        parts += [f"{k}={v:g}" for k, v in sorted(self.extra.items())]
        if instruction:
            said = f"Preference ({self.name}): {words or self.instruction()}"
            return said + " (" + ", ".join(parts) + ")" if vector else said
        return f"Preference ({self.name}): " + ", ".join(parts)

    def instruction(self) -> str:
        """P in words, a fixed sentence per weight by its sign (user-named entries are left to the weights).

        Why: ToolOrchestra shows P as an instruction with its vector. For a small policy the words matter
        in another way too: profiles whose weight lines differ in one digit differ here in a whole clause,
        so far more of the prompt differs between them, and more of each update to the choice can differ."""
        def sign(w: float, more: str, none: str, less: str) -> str:
            return more if w > 0 else less if w < 0 else none

        said = [sign(self.outcome, "Get the answer right.", "Whether the answer is right does not count.",
                     "A right answer counts against you."),
                sign(self.cost, "Every dollar spent counts against you: call a cheap tool that is good enough "
                                "rather than a dear one.",
                     "What a tool costs does not matter: a dear tool is worth its price if it is more often right.",
                     "Spending counts for you."),
                sign(self.latency, "Every second counts against you: call a fast tool rather than a slow one.",
                     "Time does not matter.", "Taking longer counts for you.")]
        said += [sign(w, f"Calls to {t} count for you.", "", f"Calls to {t} count against you.")
                 for t, w in sorted(self.tools.items())]
        return " ".join(x for x in said if x)

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


def under_profiles(tasks: Sequence[Task], profiles: Sequence[str | Preference]) -> list[Task]:
    """Every task once per profile (ids suffixed `@name`), so only P differs between the copies."""
    out = []
    for task in tasks:
        for profile in profiles:
            P = PROFILES[profile] if isinstance(profile, str) else profile
            out.append(task.model_copy(update={"preference": P, "id": f"{task.id}@{P.name}"}))
    return out


class Golden(BaseModel):
    """Golden tool calls and final answer (SFT warm start; stateful scoring replays the calls)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    calls: list[ToolCall] = Field(default_factory=list, description="the tool calls, in order")
    answer: str | None = Field(None, description="the final answer after them")
    alternatives: list[list[ToolCall]] = Field(
        default_factory=list, description="other valid call sequences; SFT samples among them")


# τ²-bench's user simulator ends the conversation by writing this (Barres et al. 2025, arXiv 2506.07982).
STOP_MARKER = "###STOP###"


class UserSpec(BaseModel):
    """A task's user as a task file spells it (orchlib.users builds it for each episode):
    `scripted` replies in order; `replayed` recorded user turns (their cost and latency as recorded);
    `simulated` a model given `instructions`, over an `llm` card or an endpoint."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["scripted", "replayed", "simulated"] = Field(description="which kind of user answers")
    turns: list[str | UserTurn] = Field(default_factory=list, description="scripted: the replies, in order; "
                                        "replayed: the recorded user turns")
    instructions: str = Field("", description="simulated: who the user is and what they want (τ²'s scenario)")
    card: str | None = Field(None, description="simulated: an `llm` card file (client, model, price)")
    base_url: str | None = Field(None, description="simulated without a card: an OpenAI-compatible endpoint")
    model: str | None = Field(None, description="simulated without a card: the model name there")
    stop: str = Field(STOP_MARKER, min_length=1, description="a reply holding this ends the conversation")
    max_turns: int = Field(10, ge=1, description="replies after which the user ends the conversation itself "
                                                 "(τ²'s user has no limit of its own; the rollout's max_turns "
                                                 "bounds the agent)")

    @model_validator(mode="after")
    def _complete(self) -> UserSpec:
        if self.kind in ("scripted", "replayed") and not self.turns:
            raise ValueError(f"a {self.kind} user needs turns")
        if self.kind == "simulated":
            if not self.instructions:
                raise ValueError("a simulated user needs instructions")
            if (self.card is None) == (self.base_url is None or self.model is None):
                raise ValueError("a simulated user needs a card, or base_url and model (not both)")
        return self


class Task(BaseModel):
    """One thing to solve. `checker` names how the final answer is scored (see CHECKERS), or is a
    function or an import path `pkg.module:fn` (or `pkg.module:obj.attr`) taking (answer, task, state)
    — and `trajectory=` when it has that parameter: the conversation and how it ended — returning a
    score in [0, 1]. `state` and `user` take a function `fn(task)` or its import path the same way;
    functions cannot be written to a task file (`save_tasks` says so), import paths can."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = Field(description="unique within a task file: evaluation and the GRPO groups key on it")
    prompt: str = Field(description="what the orchestrator is asked (the user turn)")
    tools: list[str] | None = Field(None, description="tool names offered; None = every tool in the toolbox")
    checker: str | Callable[..., float] = Field("exact", description="scores the final answer in [0, 1]: a name "
                                                "from CHECKERS, a function or its import path")
    answer: str | None = Field(None, description="the reference answer the checker compares with")
    preference: Preference | None = Field(None, description="P: what the orchestrator is shown and the reward "
                                                            "weighs; None = the reward file's own")
    category: str = Field("general", description="groups tasks in reports and balanced draws")
    golden: Golden | None = Field(None, description="a known-good way to solve it (SFT warm start, baselines)")
    state: str | Callable[[Any], Any] | None = Field(
        None, description="factory `fn(task) -> state` (or its import path) of a stateful task's episode state, e.g. "
                          "a database copy: a fresh one per episode, which its tools read and change and its checker "
                          "reads")
    user: UserSpec | str | Callable[[Any], Any] | None = Field(
        None, description="who answers the orchestrator's turns without calls: a spec, or a factory "
                          "`fn(task) -> User` (or its import path); None: such a turn ends the episode")
    meta: dict[str, Any] = Field(default_factory=dict, description="free-form: checker settings (tolerance, "
                                                                   "required facts), provenance")

    # Checked when the task is made (not imported): a misspelt checker would otherwise surface only
    # when the first episode is scored, after its tool calls were paid for.
    @field_validator("checker")
    @classmethod
    def _known_checker(cls, v: Any) -> Any:
        if isinstance(v, str) and v not in CHECKERS and not _IMPORT_PATH.fullmatch(v):
            raise ValueError(f"unknown checker {v!r}: use one of {', '.join(CHECKERS)}, "
                             "or an import path 'pkg.module:function'")
        return v

    @field_validator("state", "user")
    @classmethod
    def _factory_path(cls, v: Any) -> Any:
        if isinstance(v, str) and not _IMPORT_PATH.fullmatch(v):
            raise ValueError(f"expected an import path 'pkg.module:function', got {v!r}")
        return v

    @field_validator("user", mode="before")
    @classmethod
    def _user_spec(cls, v: Any) -> Any:
        # Validated here so a bad spec is one message naming its field, not one per member of the union.
        if isinstance(v, dict):
            try:
                return UserSpec.model_validate(v)
            except ValidationError as e:
                err = e.errors()[0]
                where = ".".join(str(x) for x in err["loc"])
                raise ValueError((f"{where}: " if where else "") + err["msg"].removeprefix("Value error, ")) from None
        return v

    def make_state(self) -> Any:
        """A fresh episode state (e.g. a database copy) for one episode, or None."""
        return resolve(self.state)(self) if self.state is not None else None

    def score(self, answer: str | None, state: Any = None, observation: Any = None, trajectory: Any = None) -> float:
        """`observation`: the tool result the answer is, when a `final` tool gave it (for `recorded`);
        `trajectory`: the episode (conversation, finish reason), for checkers that take it."""
        return check_answer(self, answer, state, observation, trajectory)


def extract_number(text: str | None) -> float | None:
    """The answer's number: after a GSM8K-style '####' if present, else the last number in the text."""
    if text is None:
        return None
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    nums = re.findall(r"-?\d[\d,]*\.?\d*(?:[eE][-+]?\d+)?", text)
    if not nums:
        return None
    try:
        return float(nums[-1].replace(",", "").rstrip("."))
    except ValueError:
        return None


def _exact(answer: str | None, task: Task, state: Any = None) -> float:
    norm = lambda s: " ".join(str(s).strip().lower().rstrip(".").split())  # noqa: E731
    return float(answer is not None and task.answer is not None and norm(answer) == norm(task.answer))


def _contains(answer: str | None, task: Task, state: Any = None) -> float:
    return float(answer is not None and task.answer is not None and task.answer.lower() in answer.lower())


def mentions(text: str, phrase: str) -> bool:
    """`phrase` occurs in `text` as whole tokens, case-insensitively: "8" is in "8 in stock" but not in
    "18" or "$14.80"; "paris" is in "It is Paris." but "h" is not in "The answer is He"."""
    pattern = r"(?<![\w.])" + re.escape(phrase.strip().lower()) + r"(?!\w|\.\d)"
    return re.search(pattern, text.lower()) is not None


def answer_in_text(task: Task, text: str) -> bool:
    """Whether `text` holds the task's answer anywhere in it (every required fact; the number; the
    words): a perfect reader's judgement of a tool's output, used by the baselines and by describe."""
    required = task.meta.get("required")
    if required is not None:
        return all(mentions(text, str(f)) for f in required)
    if task.answer is None:
        return False
    if task.checker == "numeric":
        want = extract_number(task.answer)
        tol = float(task.meta.get("tolerance", 1e-6))
        numbers = re.findall(r"-?\d[\d,]*\.?\d*(?:[eE][-+]?\d+)?", text)
        got = [extract_number(n) for n in numbers]
        return want is not None and any(g is not None and math.isclose(g, want, rel_tol=tol, abs_tol=tol) for g in got)
    return mentions(text, task.answer)


def _mentions(answer: str | None, task: Task, state: Any = None) -> float:
    """The reference answer appears in the answer as whole tokens (a stricter `contains`)."""
    return float(answer is not None and task.answer is not None and mentions(answer, task.answer))


def _numeric(answer: str | None, task: Task, state: Any = None) -> float:
    """Equal within a relative tolerance of 1e-6 (or task.meta['tolerance'])."""
    got, want = extract_number(answer), extract_number(task.answer)
    if got is None or want is None:
        return 0.0
    tol = float(task.meta.get("tolerance", 1e-6))
    return float(math.isclose(got, want, rel_tol=tol, abs_tol=tol))


def _sympy(answer: str | None, task: Task, state: Any = None) -> float:
    """Mathematically equal expressions (e.g. '2*(x+1)' and '2x+2'), via sympy's simplify."""
    import sympy
    from sympy.parsing.sympy_parser import (implicit_multiplication_application, parse_expr,
                                            standard_transformations)

    if answer is None or task.answer is None:
        return 0.0
    tf = standard_transformations + (implicit_multiplication_application,)
    try:
        a = parse_expr(answer.replace("^", "**"), transformations=tf, evaluate=True)
        b = parse_expr(task.answer.replace("^", "**"), transformations=tf, evaluate=True)
        return float(sympy.simplify(a - b) == 0)
    except (sympy.SympifyError, SyntaxError, TypeError, ValueError, TokenError):
        return 0.0


def _judge(answer: str | None, task: Task, state: Any = None) -> float:
    """An LLM grades the answer against the reference (orchlib.judge: the judge is set there)."""
    from orchlib.judge import judge_checker

    return judge_checker(answer, task, state)


def _recorded(answer: str | None, task: Task, state: Any = None, observation: Any = None) -> float:
    """The grade recorded with the answer (a replay tool's `Observation.meta["grade"]`, in [0, 1]). An
    answer that carries no grade (the policy's own, or an ungraded recording) is scored by the checker
    named in `task.meta["fallback_checker"]` (default "exact")."""
    grade = getattr(observation, "meta", {}).get("grade") if observation is not None else None
    if grade is not None and answer is not None:
        return float(grade)
    fallback = task.meta.get("fallback_checker", "exact")
    if fallback == "recorded":
        raise ValueError(f"task {task.id}: fallback_checker cannot be 'recorded' itself")
    return check_answer(task.model_copy(update={"checker": fallback}), answer, state)


CHECKERS: dict[str, Callable[..., float]] = {
    "exact": _exact, "contains": _contains, "mentions": _mentions, "numeric": _numeric, "sympy": _sympy,
    "judge": _judge, "recorded": _recorded,
}


# `pkg.module:name` or `pkg.module:Obj.attr` (a domain object's method, as the function backend takes)
_IMPORT_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def _import(path: str) -> Callable[..., Any]:
    module, _, name = path.partition(":")
    if not name:
        raise ValueError(f"expected 'pkg.module:function', got {path!r}")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def resolve(spec: str | Callable[..., Any]) -> Callable[..., Any]:
    """A function given as itself or by import path (`pkg.module:fn`, `pkg.module:obj.attr`)."""
    return _import(spec) if isinstance(spec, str) else spec


def _takes_trajectory(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin without a signature: the three-argument form
        return False
    return "trajectory" in params or any(p.kind == p.VAR_KEYWORD for p in params.values())


def check_answer(task: Task, answer: str | None, state: Any = None, observation: Any = None,
                 trajectory: Any = None) -> float:
    """Score a final answer with the task's checker (a name in CHECKERS, a function or an import path).
    Only `recorded` reads `observation` (the final tool's result); a checker with a `trajectory`
    parameter also gets the episode; the others see the answer text and the state."""
    fn = (CHECKERS.get(task.checker) if isinstance(task.checker, str) else None) or resolve(task.checker)
    if fn is _recorded:
        return _recorded(answer, task, state, observation)
    if trajectory is not None and _takes_trajectory(fn):
        return float(fn(answer, task, state, trajectory=trajectory))
    return float(fn(answer, task, state))


class TaskFileError(ValueError):
    """A malformed task file; the message names the file, line and field."""


def load_tasks(path: str | os.PathLike) -> list[Task]:
    """Read tasks from JSONL, one object per line. Task ids must be unique: evaluation and the
    baselines key their results by id."""
    tasks: list[Task] = []
    first_line: dict[str, int] = {}
    with open(path, "rb") as f:  # decoded line by line, so a bad byte is reported with its line
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")  # a leading BOM is harmless
            except UnicodeDecodeError as e:
                raise TaskFileError(f"{path}:{lineno}: not UTF-8: byte 0x{raw[e.start]:02x} at column "
                                    f"{e.start + 1}") from None
            if not line.strip():
                continue
            try:
                data = safejson.loads(line)  # also refuses nesting, digits and surrogates JSONL cannot carry
            except safejson.JSONInputError as e:
                raise TaskFileError(f"{path}:{lineno}: {e.message}") from None
            try:
                task = Task.model_validate(data)
            except ValueError as e:
                errs = getattr(e, "errors", lambda: [])()
                field = (".".join(str(x) for x in errs[0]["loc"]) or "(task)") if errs else "?"
                msg = errs[0]["msg"].removeprefix("Value error, ") if errs else str(e)
                raise TaskFileError(f"{path}:{lineno}: {field}: {msg}") from None
            if task.id in first_line:
                raise TaskFileError(f"{path}:{lineno}: id: {task.id!r} is already the id of line "
                                    f"{first_line[task.id]}")
            first_line[task.id] = lineno
            tasks.append(task)
    return tasks


def save_tasks(tasks: list[Task], path: str | os.PathLike) -> Path:
    """Write tasks as JSONL atomically. A checker, state or user given as a function cannot be written
    (a file names it by import path): that is an error naming the task and field, and nothing is written."""
    for t in tasks:
        for name in ("checker", "state", "user"):
            if callable(getattr(t, name)):
                raise ValueError(f"task {t.id}: {name} is a Python function, which a task file cannot hold; "
                                 "give its import path 'pkg.module:function' instead")
    return write_text_atomic(path, "".join(t.model_dump_json(exclude_none=True) + "\n" for t in tasks))
