"""Records of one orchestration episode: ToolCall, Observation, Turn, Trajectory; JSONL read/write.

Token in, token out: `Trajectory.ids` are exactly the ids the engine sampled plus the ids of the
rendered prompt and observation segments, in order; `mask` is 1 on sampled ids only and `logprobs`
holds the sampling log-probability of each sampled id (0.0 elsewhere).
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from pathlib import Path
from typing import Annotated, Any, Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from orchlib.atomic import write_text_atomic
from orchlib.configuration_record import Configuration

__all__ = ["ToolCall", "Observation", "ErrorKind", "ERROR_KINDS", "UserTurn", "Turn", "Trajectory",
           "new_turn", "new_tool_call", "new_observation", "set_fields", "to_json_line", "write_jsonl", "read_jsonl"]

# Money: a cost is a finite number of USD, >= 0, wherever a record is built or read (a negative cost
# would make a bill add up to less than was paid; NaN and inf poison every sum and mean of a run).
USD = Annotated[float, Field(ge=0, allow_inf_nan=False)]

ErrorKind = Literal["malformed_call", "unknown_tool", "schema_violation", "tool_failure", "timeout"]
ERROR_KINDS: tuple[str, ...] = ("malformed_call", "unknown_tool", "schema_violation", "tool_failure", "timeout")


class ToolCall(BaseModel):
    """One call the orchestrator asked for: `{"name": ..., "arguments": {...}}` inside `<tool_call>`."""

    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Observation(BaseModel):
    """What a tool returned. Money in USD, time in seconds; an error is data, not an exception."""

    model_config = ConfigDict(extra="forbid")
    content: str
    cost_usd: USD = 0.0
    latency_s: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_reasoning: int = 0           # of tokens_out: reasoning tokens (priced as output unless the card says)
    tokens_cached: int = 0              # of tokens_in: served from the provider's prompt cache
    error: str | None = None            # human-readable message the orchestrator reads
    error_kind: ErrorKind | None = None  # counted per kind in Trajectory.errors
    final: bool = False                 # True when the tool's card is `final`: its content is the answer
    tool: str = ""                      # which tool produced it ("" for errors before a tool was found)
    label: str = ""                     # e.g. "simulated" or "replay", shown wherever the result is shown
    meta: dict[str, Any] = Field(default_factory=dict)  # what a backend knows beyond the text, e.g. a recorded "grade"


class UserTurn(BaseModel):
    """The user's reply to an assistant turn without calls (a task with a user). Its cost and latency
    are the user's (a simulated user's model), counted apart from the orchestrator's."""

    model_config = ConfigDict(extra="forbid")
    text: str
    done: bool = False                  # the user ended the conversation with this reply
    cost_usd: USD = 0.0
    latency_s: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    label: str = ""                     # "scripted", "replay" or the simulated user's model
    error: str | None = None            # the user could not reply (counted as errors["user_failure"])


class Turn(BaseModel):
    """One assistant turn: what was sampled, the calls parsed from it, and their observations."""

    model_config = ConfigDict(extra="forbid")
    text: str                               # decoded sampled text of the turn (no template tokens)
    calls: list[ToolCall] = Field(default_factory=list)
    observations: list[Observation] = Field(default_factory=list)
    gen_latency_s: float = 0.0              # the orchestrator's own generation time
    latency_s: float = 0.0                  # gen_latency_s + the longest of the turn's concurrent calls
    cost_usd: USD = 0.0                     # own tokens priced by the orchestrator's card + tool costs
    tokens_out: int = 0                     # ids sampled this turn
    user: UserTurn | None = None            # the user's reply to this turn, when the task has a user


class Trajectory(BaseModel):
    """One rollout of one task. Summary fields are what the reward DSL reads."""

    model_config = ConfigDict(extra="forbid")
    task_id: str
    group_index: int = 0
    prompt: str = ""
    preference: dict[str, Any] = Field(default_factory=dict)
    category: str = ""
    turns: list[Turn] = Field(default_factory=list)
    ids: list[int] = Field(default_factory=list)
    mask: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    prompt_len: int = 0
    final_answer: str | None = None
    # answer: a turn without calls; final_tool: a `final` tool answered; length: a turn hit max_new_tokens
    # without a call; user_stop: the task's user ended the conversation; max_turns / token_budget: limits
    # of the rollout config
    finish_reason: Literal["answer", "final_tool", "user_stop", "length", "max_turns", "token_budget", ""] = ""
    outcome: float = 0.0
    cost_usd: USD = 0.0
    latency_s: float = 0.0
    user_cost_usd: USD = 0.0             # the task's user (a simulated user's model), apart from cost_usd
    user_latency_s: float = 0.0          # the user's time, apart from latency_s
    calls: dict[str, int] = Field(default_factory=dict)
    errors: dict[str, int] = Field(default_factory=dict)
    meta: dict[str, Any] = Field(default_factory=dict)
    # The episode's tool configuration (orchlib.configurations): aliases → backends, prices, P. Left out of
    # the JSON when None, so an episode without one is written as before and old files load.
    configuration: Configuration | None = Field(None, exclude_if=lambda c: c is None)

    @classmethod
    def begin(cls, task_id: str, group_index: int, prompt: str, category: str, preference: dict[str, Any],
              prompt_ids: list[int]) -> Trajectory:
        """A trajectory that holds only its prompt, built without validation: the rollout starts one per
        episode, and validating three prompt-long lists costs more than the rest of a replayed episode.
        The caller passes values of the right types (a task's fields, the tokenizer's ids); every field
        is given, so no default is looked up (pydantic inspects each default factory's signature)."""
        n = len(prompt_ids)
        return _built(cls, dict(
            task_id=task_id, group_index=group_index, prompt=prompt, preference=preference, category=category,
            turns=[], ids=list(prompt_ids), mask=[0] * n, logprobs=[0.0] * n, prompt_len=n, final_answer=None,
            finish_reason="", outcome=0.0, cost_usd=0.0, latency_s=0.0, user_cost_usd=0.0, user_latency_s=0.0,
            calls={}, errors={}, meta={}, configuration=None))

    def set_fields(self, **values: Any) -> None:
        """Several fields set at once, as plain assignments set them (assignments are not validated: no
        `validate_assignment`), without pydantic's per-attribute path, which costs more than the values
        an episode's end writes. The caller passes values of the right types."""
        set_fields(self, values)

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def num_tokens(self) -> int:
        """Tokens the orchestrator sampled (mask ones)."""
        return int(sum(self.mask))

    @property
    def num_errors(self) -> int:
        return int(sum(self.errors.values()))

    def to_messages(self) -> list[dict[str, Any]]:
        """The conversation as chat messages (system/user prompt first when known)."""
        msgs: list[dict[str, Any]] = []
        if self.prompt:
            msgs.append({"role": "user", "content": self.prompt})
        for turn in self.turns:
            msg: dict[str, Any] = {"role": "assistant", "content": turn.text}
            if turn.calls:
                msg["tool_calls"] = [{"type": "function", "function": c.model_dump()} for c in turn.calls]
            msgs.append(msg)
            for obs in turn.observations:
                msgs.append({"role": "tool", "name": obs.tool, "content": obs.content})
            if turn.user is not None:
                msgs.append({"role": "user", "content": turn.user.text})
        return msgs


def _built(cls, values: dict[str, Any], fields_set: set[str] | None = None):
    """`cls.model_construct(**values)` for a model without aliases, private attributes or extras, given
    every field: what model_construct stores, without its per-field lookups (it is the larger part of
    starting a replayed episode)."""
    m = cls.__new__(cls)
    object.__setattr__(m, "__dict__", values)
    object.__setattr__(m, "__pydantic_fields_set__", set(values) if fields_set is None else fields_set)
    object.__setattr__(m, "__pydantic_extra__", None)
    object.__setattr__(m, "__pydantic_private__", None)
    return m


def new_turn(text: str, gen_latency_s: float, tokens_out: int, cost_usd: float) -> Turn:
    """`Turn(text=..., gen_latency_s=..., latency_s=gen_latency_s, tokens_out=..., cost_usd=...)` without
    validation, for the rollout's sampled turns (a str, two floats and an int it computed itself)."""
    turn = _built(Turn, {"text": text, "calls": [], "observations": [], "gen_latency_s": gen_latency_s,
                         "latency_s": gen_latency_s, "cost_usd": cost_usd, "tokens_out": tokens_out, "user": None},
                  {"text", "gen_latency_s", "latency_s", "tokens_out", "cost_usd"})  # as Turn(...) sets them
    return turn


def new_tool_call(name: str, arguments: dict[str, Any]) -> ToolCall:
    """`ToolCall(name=..., arguments=...)` without validation: a str and a dict with str keys (parsed JSON)."""
    return _built(ToolCall, {"name": name, "arguments": arguments})


# Observation's defaults, in its field order (`meta`'s fresh dict is made per observation).
_OBSERVATION_DEFAULTS: dict[str, Any] = {name: f.default for name, f in Observation.model_fields.items()
                                         if name != "meta"}


def new_observation(values: dict[str, Any]) -> Observation:
    """`Observation(**values)` without validation, for a backend's hot path (a replayed answer): the
    caller passes values of the fields' own types (a str, ints, floats, a dict). As `Observation(...)`
    does, the fields given are the ones set (`"latency_s" in obs.model_fields_set`: a reported time)."""
    built = {**_OBSERVATION_DEFAULTS, "meta": {}, **values}
    return _built(Observation, built, set(values))


def set_fields(model: BaseModel, values: dict[str, Any]) -> None:
    """What `model.name = value` does for each item on a model without `validate_assignment`, private
    attributes or properties among `values` (pydantic's own handler for such a field, done at once)."""
    model.__dict__.update(values)
    model.__pydantic_fields_set__.update(values)


# ---------------------------------------------------------------------------------------------- JSON lines
_BEFORE_IDS = frozenset(("task_id", "group_index", "prompt", "preference", "category", "turns"))
_AFTER_IDS = frozenset(Trajectory.model_fields) - _BEFORE_IDS - {"ids", "mask", "logprobs"}
_INTS, _FLOATS = TypeAdapter(list[int]), TypeAdapter(list[float])  # the fields' own serialisers
_MIN_PROMPT = 256  # shorter prompts: the whole trajectory at once is as cheap


class _PromptJson:
    """The JSON of the prompt part of `ids` (and of the all-zero `mask` and `logprobs` there), kept per
    prompt: every episode of a task starts from the same prompt ids, and several policies evaluated on
    the same tasks write the same prompts again. Found by the prompt's length and last ids, then the
    whole prefix is compared, so a hit is exact; bounded by the ids it holds (least recently used go)."""

    def __init__(self, max_ids: int = 4_000_000):
        self.max_ids, self.held = max_ids, 0
        self.ids: OrderedDict[tuple, list[tuple[list[int], str]]] = OrderedDict()
        self.zeros: dict[int, tuple[list[int], list[float], str, str]] = {}  # n → ([0]*n, [0.0]*n, their JSON)

    def pieces(self, t: Trajectory) -> tuple[str, str, str] | None:
        """(ids, mask, logprobs) JSON of the first `prompt_len` entries, without brackets; None when the
        mask or log-probs there are not all zeros (then nothing is saved)."""
        n = t.prompt_len
        zeros = self.zeros.get(n)
        if zeros is None:
            if len(self.zeros) > 64:
                self.zeros.clear()
            zeros = self.zeros[n] = ([0] * n, [0.0] * n, _INTS.dump_json([0] * n).decode()[1:-1],
                                     _FLOATS.dump_json([0.0] * n).decode()[1:-1])
        # (-0.0 == 0.0: a negative zero there, which no rollout writes, would be written 0.0)
        if t.mask[:n] != zeros[0] or t.logprobs[:n] != zeros[1]:
            return None
        head = t.ids[:n]
        key = (n, tuple(head[-16:]))
        entries = self.ids.get(key)
        if entries is not None:
            self.ids.move_to_end(key)
            for known, text in entries:
                if known == head:
                    return text, zeros[2], zeros[3]
        text = _INTS.dump_json(head).decode()[1:-1]
        self.ids.setdefault(key, []).append((head, text))
        self.held += n
        while self.held > self.max_ids and len(self.ids) > 1:
            _, gone = self.ids.popitem(last=False)
            self.held -= sum(len(k) for k, _ in gone)
        return text, zeros[2], zeros[3]


_PROMPTS = _PromptJson()


def _joined(prefix: str, rest: bytes) -> str:
    return prefix if rest == b"[]" else prefix + "," + rest.decode()[1:-1]


def to_json_line(t: Trajectory) -> str:
    """`t.model_dump_json()`, byte for byte (but for a -0.0 log-prob under the prompt), with the prompt's
    ids (and the zeros of the mask and log-probs under them) written once per prompt rather than once per
    trajectory (see _PromptJson): they are most of a trajectory's JSON."""
    n = t.prompt_len
    found = _PROMPTS.pieces(t) if n >= _MIN_PROMPT and len(t.ids) >= n and len(t.mask) >= n and len(
        t.logprobs) >= n else None
    if found is None:
        return t.model_dump_json()
    ids, mask, logprobs = found
    head, tail = t.model_dump_json(include=_BEFORE_IDS), t.model_dump_json(include=_AFTER_IDS)
    return "".join((head[:-1], ',"ids":[', _joined(ids, _INTS.dump_json(t.ids[n:])),
                    '],"mask":[', _joined(mask, _INTS.dump_json(t.mask[n:])),
                    '],"logprobs":[', _joined(logprobs, _FLOATS.dump_json(t.logprobs[n:])), "],", tail[1:]))


def write_jsonl(trajectories: Iterable[Trajectory], path: str | os.PathLike) -> Path:
    """Write one trajectory per line, atomically (temporary file then rename)."""
    return write_text_atomic(path, "".join(to_json_line(t) + "\n" for t in trajectories))


def read_jsonl(path: str | os.PathLike) -> list[Trajectory]:
    """Read trajectories; a bad line raises ValueError naming the file and line."""
    out: list[Trajectory] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(Trajectory.model_validate(json.loads(line)))
            except ValidationError as e:  # one line: the first problem and the field it is in
                err = e.errors()[0]
                field = ".".join(str(x) for x in err["loc"]) or "(line)"
                got = "" if isinstance(err.get("input"), (dict, list)) else f" (got {repr(err.get('input'))[:60]})"
                raise ValueError(f"{path}:{lineno}: {field}: {err['msg']}{got}") from None
            except ValueError as e:  # JSONDecodeError (and what json.loads refuses, e.g. a huge int)
                raise ValueError(f"{path}:{lineno}: not a trajectory: {e}") from None
    return out
