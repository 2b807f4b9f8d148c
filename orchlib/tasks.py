"""Task, Preference and answer checkers: what the orchestrator is asked to do, and what the user cares about.

A Preference is the ToolOrchestra vector P: weights on outcome, cost, latency and on each tool's
calls (plus user-named entries). The orchestrator sees it rendered in its system prompt and the reward
reads the same numbers, so one policy can learn to condition on it.
"""

from __future__ import annotations

import importlib
import math
import os
import re
from pathlib import Path
from tokenize import TokenError
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchlib import safejson
from orchlib.atomic import write_text_atomic
from orchlib.trajectory import ToolCall

__all__ = ["Preference", "PROFILES", "Golden", "Task", "CHECKERS", "check_answer", "extract_number", "mentions",
           "answer_in_text", "load_tasks", "save_tasks", "TaskFileError"]


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


class Golden(BaseModel):
    """Golden tool calls and final answer (SFT warm start; stateful scoring replays the calls)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    calls: list[ToolCall] = Field(default_factory=list)
    answer: str | None = None
    alternatives: list[list[ToolCall]] = Field(
        default_factory=list, description="other valid call sequences; SFT samples among them")


class Task(BaseModel):
    """One thing to solve. `checker` names how the final answer is scored (see CHECKERS), or an import
    path `pkg.module:fn` taking (answer, task, env) and returning a score in [0, 1]."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    prompt: str
    tools: list[str] | None = Field(None, description="tool names offered; None = every tool in the toolbox")
    checker: str = "exact"
    answer: str | None = None
    preference: Preference | None = None
    category: str = "general"
    golden: Golden | None = None
    env: str | None = Field(None, description="import path of a factory `fn(task) -> env` for stateful tasks")
    meta: dict[str, Any] = Field(default_factory=dict)

    # Checked when the task is made (not imported): a misspelt checker would otherwise surface only
    # when the first episode is scored, after its tool calls were paid for.
    @field_validator("checker")
    @classmethod
    def _known_checker(cls, v: str) -> str:
        if v not in CHECKERS and not _IMPORT_PATH.fullmatch(v):
            raise ValueError(f"unknown checker {v!r}: use one of {', '.join(CHECKERS)}, "
                             "or an import path 'pkg.module:function'")
        return v

    @field_validator("env")
    @classmethod
    def _env_path(cls, v: str | None) -> str | None:
        if v is not None and not _IMPORT_PATH.fullmatch(v):
            raise ValueError(f"expected an import path 'pkg.module:function', got {v!r}")
        return v

    def make_env(self) -> Any:
        """A fresh environment (e.g. a database copy) for one episode, or None."""
        return _import(self.env)(self) if self.env else None

    def score(self, answer: str | None, env: Any = None, observation: Any = None) -> float:
        """`observation`: the tool result the answer is, when a `final` tool gave it (for `recorded`)."""
        return check_answer(self, answer, env, observation)


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


def _exact(answer: str | None, task: Task, env: Any = None) -> float:
    norm = lambda s: " ".join(str(s).strip().lower().rstrip(".").split())  # noqa: E731
    return float(answer is not None and task.answer is not None and norm(answer) == norm(task.answer))


def _contains(answer: str | None, task: Task, env: Any = None) -> float:
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


def _mentions(answer: str | None, task: Task, env: Any = None) -> float:
    """The reference answer appears in the answer as whole tokens (a stricter `contains`)."""
    return float(answer is not None and task.answer is not None and mentions(answer, task.answer))


def _numeric(answer: str | None, task: Task, env: Any = None) -> float:
    """Equal within a relative tolerance of 1e-6 (or task.meta['tolerance'])."""
    got, want = extract_number(answer), extract_number(task.answer)
    if got is None or want is None:
        return 0.0
    tol = float(task.meta.get("tolerance", 1e-6))
    return float(math.isclose(got, want, rel_tol=tol, abs_tol=tol))


def _sympy(answer: str | None, task: Task, env: Any = None) -> float:
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


def _judge(answer: str | None, task: Task, env: Any = None) -> float:
    """An LLM grades the answer against the reference (orchlib.judge: the judge is set there)."""
    from orchlib.judge import judge_checker

    return judge_checker(answer, task, env)


def _recorded(answer: str | None, task: Task, env: Any = None, observation: Any = None) -> float:
    """The grade recorded with the answer (a replay tool's `Observation.meta["grade"]`, in [0, 1]). An
    answer that carries no grade (the policy's own, or an ungraded recording) is scored by the checker
    named in `task.meta["fallback_checker"]` (default "exact")."""
    grade = getattr(observation, "meta", {}).get("grade") if observation is not None else None
    if grade is not None and answer is not None:
        return float(grade)
    fallback = task.meta.get("fallback_checker", "exact")
    if fallback == "recorded":
        raise ValueError(f"task {task.id}: fallback_checker cannot be 'recorded' itself")
    return check_answer(task.model_copy(update={"checker": fallback}), answer, env)


CHECKERS: dict[str, Callable[..., float]] = {
    "exact": _exact, "contains": _contains, "mentions": _mentions, "numeric": _numeric, "sympy": _sympy,
    "judge": _judge, "recorded": _recorded,
}


_IMPORT_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


def _import(path: str) -> Callable[..., Any]:
    module, _, name = path.partition(":")
    if not name:
        raise ValueError(f"expected 'pkg.module:function', got {path!r}")
    return getattr(importlib.import_module(module), name)


def check_answer(task: Task, answer: str | None, env: Any = None, observation: Any = None) -> float:
    """Score a final answer with the task's checker (a name in CHECKERS or an import path). Only
    `recorded` reads `observation` (the final tool's result); the others see the answer text."""
    fn = CHECKERS.get(task.checker) or _import(task.checker)
    if fn is _recorded:
        return _recorded(answer, task, env, observation)
    return float(fn(answer, task, env))


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
    """Write tasks as JSONL atomically."""
    return write_text_atomic(path, "".join(t.model_dump_json(exclude_none=True) + "\n" for t in tasks))
