"""ToolCard: a tool declared as data. YAML in and out, validation, import from OpenAI / MCP / JSON Schema,
export to OpenAI / transformers / MCP.

A card carries what the orchestrator reads (name, description, JSON Schema of the arguments) and what
the runtime needs (backend kind and settings, price in USD, declared latency). Cards are loaded with
ruamel's round-trip loader, so `save_card` keeps a hand-written card's comments and key order, and
every validation problem names the file, the line and the field path:

    toolcards/python.yaml:7: price.per_second: Input should be a valid number

Backend settings (`backend:`) are checked by the backend class itself when a tool is built
(`orchlib.tools.build_tool`), with the same kind of message.

Names are those OpenAI and MCP accept (letters of both cases, digits, `_`, `-`, `.`; up to 128), and an
export whose format forbids one maps it (`orchlib.toolnames`). Imports bring loosely typed schemas
(`dict`, `float`, `any`, ...) to JSON Schema and list what they changed in `card.normalized`
(`orchlib.looseschema`). A card may carry a schema and no implementation: it is listed, rendered and
checks arguments, and is bound to a function or a server when it runs.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import io
import json
import math
import os
import random
import re
import sys
import typing
import warnings
from decimal import Decimal
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Callable, Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, LiteralScalarString

from orchlib import safeyaml
from orchlib.atomic import write_text_atomic
from orchlib.looseschema import LooseSchemaError, normalize
from orchlib.shipped import shipped_path
from orchlib.toolnames import CARD_NAME, MAX_NAME, card_name, export_name

__all__ = ["KINDS", "Kind", "Price", "Latency", "ToolCard", "CardError", "load_card", "load_cards",
           "save_card", "check_cards", "card_files", "STATE", "State", "state_parameter"]

Kind = Literal["function", "python", "search", "llm", "replay", "simulated", "mcp"]
KINDS: tuple[str, ...] = typing.get_args(Kind)

# Kinds that stand in for a model; only these may take the task itself instead of written arguments.
MODEL_KINDS = ("llm", "replay", "simulated")
EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
NAME_PATTERN = CARD_NAME.pattern


class _StateMarker:
    """Marks the parameter of a function tool that receives the episode's state (`ToolContext.env`)."""

    def __repr__(self) -> str:
        return "orchlib.STATE"


STATE = _StateMarker()
# `def lookup(order_id: str, db: State)`, or `Annotated[MyDB, STATE]` to keep a type for the reader.
State = Annotated[Any, STATE]


class CardError(ValueError):
    """A card problem: `"{file}:{line}: {field.path}: {problem}"`. `line` is 1-based (0 when unknown)."""

    def __init__(self, file: str | os.PathLike, line: int, field: str, problem: str):
        self.file, self.line, self.field, self.problem = str(file), int(line), field, problem
        super().__init__(f"{self.file}:{self.line}: {field}: {problem}")


class Price(BaseModel):
    """What one call costs, in USD. All parts add up; 0 means free."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    per_call: float = Field(0.0, ge=0, description="flat fee per call (the ToolOrchestra web search: 0.01)")
    per_m_input: float = Field(0.0, ge=0, description="per million input tokens (gpt-5: 1.25)")
    per_m_output: float = Field(0.0, ge=0, description="per million output tokens (gpt-5: 10)")
    per_second: float = Field(0.0, ge=0, description="per second of run time (code interpreter: 0.0000083)")
    per_m_reasoning: float | None = Field(None, ge=0, description="per million reasoning tokens; unset: the output "
                                          "price (providers bill reasoning tokens as output)")
    per_m_cached_input: float | None = Field(None, ge=0, description="per million input tokens read from the "
                                             "provider's cache; unset: the input price")
    table: str | None = Field(None, description="a model of orchlib's price table (orchlib/data/prices.yaml, each "
                                                "row with its source and date): its input, output, reasoning and "
                                                "cached-input prices fill those fields, which must then agree with "
                                                "it where written too")

    @model_validator(mode="before")
    @classmethod
    def _from_table(cls, data: Any) -> Any:
        """The token prices of the `table` row, merged into what the card wrote (which must agree)."""
        if not isinstance(data, dict) or data.get("table") is None:
            return data
        from orchlib.prices import load_prices  # prices imports nothing of cards: no circle

        try:
            row = load_prices().row(str(data["table"]))
        except KeyError as e:
            raise ValueError(e.args[0]) from None
        out = dict(data)
        for key, value in row.price_fields().items():
            if key in out and out[key] != value:
                raise ValueError(f"{key} is {out[key]} but the price table's {row.model!r} row says {value} "
                                 f"({row.source}, {row.date}); write one or the other")
            out[key] = value
        return out

    @classmethod
    def from_table(cls, model: str, table: Any = None, **more: float) -> Price:
        """The price of `model` in `table` (an `orchlib.prices.PriceTable`; default the shipped one), plus
        `more` fields (per_call, per_second). From the shipped table the price remembers its row (`table`)."""
        if table is None:
            return cls(table=model, **more)
        return cls(**table.row(model).price_fields(), **more)

    def cost(self, tokens_in: int = 0, tokens_out: int = 0, seconds: float = 0.0, calls: int = 1,
             tokens_reasoning: int = 0, tokens_cached: int = 0) -> float:
        """USD for `calls` calls that read `tokens_in`, wrote `tokens_out` and ran `seconds` in all.
        As OpenAI's `usage` counts them, `tokens_reasoning` are part of `tokens_out` and `tokens_cached`
        part of `tokens_in`; they change the cost only where the card prices them apart."""
        reasoning = self.per_m_output if self.per_m_reasoning is None else self.per_m_reasoning
        cached = self.per_m_input if self.per_m_cached_input is None else self.per_m_cached_input
        # The two differences are exactly 0.0 for a card that does not price them apart: same sum as before.
        return (calls * self.per_call + tokens_in * self.per_m_input / 1e6
                + tokens_out * self.per_m_output / 1e6 + seconds * self.per_second
                + tokens_reasoning * (reasoning - self.per_m_output) / 1e6
                + tokens_cached * (cached - self.per_m_input) / 1e6)

    def describe(self) -> str:
        parts = [f"${_usd(v)} {unit}" for v, unit in ((self.per_call, "per call"),
                                                   (self.per_m_input, "per million input tokens"),
                                                   (self.per_m_cached_input, "per million cached input tokens"),
                                                   (self.per_m_output, "per million output tokens"),
                                                   (self.per_m_reasoning, "per million reasoning tokens"),
                                                   (self.per_second, "per second")) if v]
        return ", ".join(parts) or "free"


class Latency(BaseModel):
    """Declared latency. Simulated and replay tools report a draw from it instead of sleeping, so runs
    are reproducible; real tools are timed and this is only what the card promises."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    seconds: float = Field(0.0, ge=0, description="mean seconds per call")
    jitter: float = Field(0.0, ge=0, lt=1, description="relative half-width: draws are uniform in "
                          "seconds × [1 - jitter, 1 + jitter]; 0 reports exactly `seconds`")

    def sample(self, *key: Any) -> float:
        """A draw that depends only on `key` (e.g. seed, tool name, task id): same key, same seconds."""
        if not self.jitter:
            return self.seconds
        # random.Random seeds a str through SHA-512, so the draw is stable across processes
        # (unlike hash(), which PYTHONHASHSEED randomises).
        u = random.Random(":".join(map(str, key))).uniform(-1.0, 1.0)
        return self.seconds * (1.0 + self.jitter * u)


def _usd(value: float) -> str:
    """0.0000083 rather than 8.3e-06: prices are read by people and small models."""
    return f"{value:g}" if value >= 1e-3 else f"{value:.10f}".rstrip("0").rstrip(".")


@dataclasses.dataclass
class _Origin:
    """Where a card was read from: the file and its round-trip YAML tree (comments, lines, key order)."""

    path: Path
    tree: CommentedMap


class ToolCard(BaseModel):
    """One tool as data. Equality compares the fields only, not where the card was read from."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(description="unique; what the orchestrator writes in a call: letters of both cases, "
                      "digits, _ - . and at most 128 characters (what OpenAI and MCP names use; an OpenAI "
                      "export maps a dot or a name over 64)")
    kind: Kind = Field(description="which backend runs it (orchlib.tools.BACKENDS)")
    description: str = Field(min_length=1, description="what the orchestrator reads to choose the tool")
    parameters: dict[str, Any] = Field(default_factory=lambda: copy.deepcopy(EMPTY_SCHEMA),
                                       description="JSON Schema of the arguments; an object schema")
    backend: dict[str, Any] = Field(default_factory=dict, description="settings of the kind (docs/tools.md)")
    price: Price = Field(default_factory=Price, description="USD: per call and per million tokens in and out")
    latency: Latency = Field(default_factory=Latency, description="seconds a call is declared to take (simulated "
                                                                  "and replay tools use it; real tools are timed)")
    tags: list[str] = Field(default_factory=list, description="free labels for filtering and reports")
    final: bool = Field(False, description="its answer ends the episode as the final answer "
                        "(the ToolOrchestra `answer` tool), so a small policy never copies a long answer")
    input: Literal["arguments", "task"] = Field("arguments", description="'task': a model tool receives "
                                                "the task and the context so far, not text the policy wrote")
    auto_description: dict[str, Any] | None = Field(None, description="reserved for generated descriptions")

    _origin: _Origin | None = PrivateAttr(default=None)
    _normalized: tuple[str, ...] = PrivateAttr(default=())

    @field_validator("name")
    @classmethod
    def _valid_name(cls, name: str) -> str:
        if not CARD_NAME.fullmatch(name):
            raise PydanticCustomError("tool_name", "{problem}", {"problem": _name_problem(name)})
        return name

    @field_validator("parameters")
    @classmethod
    def _valid_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        import jsonschema  # ~1 s to import (its URI grammar): paid by the first card, not by `import orchlib`

        validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        try:
            validator.check_schema(schema)
        except jsonschema.SchemaError as e:
            # The path inside the schema travels in ctx, so the message can point at the exact line.
            raise PydanticCustomError("json_schema", "not valid JSON Schema: {problem}",
                                      {"problem": e.message, "path": list(e.path)}) from None
        if schema.get("type") != "object":
            raise PydanticCustomError("json_schema", "must be an object schema (\"type\": \"object\"): "
                                      "tool arguments are a JSON object", {"problem": "", "path": ["type"]})
        return schema

    @model_validator(mode="after")
    def _input_only_for_models(self) -> ToolCard:
        if self.input == "task" and self.kind not in MODEL_KINDS:
            raise ValueError(f"input: task is only for model tools ({', '.join(MODEL_KINDS)}), not {self.kind}")
        return self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ToolCard):
            return NotImplemented
        return self.model_dump() == other.model_dump()

    __hash__ = None  # type: ignore[assignment]  # fields hold dicts

    # ---------------------------------------------------------------- where it came from, errors
    @property
    def source(self) -> Path | None:
        """The file the card was loaded from, if any."""
        return self._origin.path if self._origin else None

    @property
    def label(self) -> str:
        """Shown beside every result of the tool: 'simulated' and 'replay' tools are not real models."""
        return self.kind if self.kind in ("simulated", "replay") else ""

    def error(self, loc: Iterable[Any], problem: str) -> CardError:
        """A CardError for field `loc` of this card, with the line it has in its file when known."""
        loc = tuple(loc)
        if self._origin is None:
            return CardError(f"<card {self.name}>", 0, _dotted(loc), problem)
        return CardError(self._origin.path, _line_of(self._origin.tree, loc), _dotted(loc), problem)

    def errors_from(self, exc: ValidationError, prefix: Iterable[Any] = ()) -> list[CardError]:
        """Turn a pydantic error about a part of this card (e.g. its backend settings) into CardErrors."""
        return [self.error(tuple(prefix) + loc, msg) for loc, msg in _problems(exc)]

    # ---------------------------------------------------------------- exports
    def describe_costs(self) -> str:
        """One sentence on price and latency, in the spirit of the ToolOrchestra descriptions."""
        note = f"Price: {self.price.describe()}. Latency: about {self.latency.seconds:g} s."
        return note + (f" ({self.label})" if self.label else "")

    def _description(self, with_costs: bool) -> str:
        return f"{self.description.strip()}\n{self.describe_costs()}" if with_costs else self.description.strip()

    def to_openai(self, with_costs: bool = False, *, name: str | None = None) -> dict[str, Any]:
        """OpenAI chat-completions `tools=[...]` entry. OpenAI names allow no dot and 64 characters:
        such a name is mapped (`toolnames.export_name`); pass `name=` from a `ToolNames` of the whole
        set to keep the mapping one-to-one, and map calls back with `ToolNames.internal`."""
        return {"type": "function", "function": {"name": name or export_name(self.name, "openai"),
                                                 "description": self._description(with_costs),
                                                 "parameters": copy.deepcopy(self.parameters)}}

    def to_transformers(self, with_costs: bool = False) -> dict[str, Any]:
        """An entry of transformers' `apply_chat_template(tools=[...])`: the same JSON shape that
        `transformers.utils.get_json_schema` produces (OpenAI's), which chat templates read. The name
        is the card's as it is: templates render any string and the `<tool_call>` parser reads it back."""
        return {"type": "function", "function": {"name": self.name, "description": self._description(with_costs),
                                                 "parameters": copy.deepcopy(self.parameters)}}

    def to_mcp(self, with_costs: bool = False, *, name: str | None = None) -> dict[str, Any]:
        """A Model Context Protocol `Tool` (tools/list result entry). Every card name is a valid MCP name."""
        out: dict[str, Any] = {"name": name or export_name(self.name, "mcp"),
                               "description": self._description(with_costs),
                               "inputSchema": copy.deepcopy(self.parameters)}
        if self.label:
            out["annotations"] = {"title": f"{self.name} ({self.label})"}
        return out

    # ---------------------------------------------------------------- imports
    @property
    def normalized(self) -> list[str]:
        """What an import changed to make the card (`properties.x.type: 'float' -> 'number'`, a name
        mapped); empty for a card read from YAML or written in code."""
        return list(self._normalized)

    def check_arguments(self, arguments: Any) -> str | None:
        """None when `arguments` fit the schema, else one line saying where and why not. Needs no
        implementation: a card known only by its schema checks a call the same way its tool would."""
        return arguments_problem(self.name, _validator(self.parameters), arguments)

    @classmethod
    def from_openai(cls, spec: dict[str, Any], *, kind: Kind = "function", backend: dict[str, Any] | None = None,
                    **fields: Any) -> ToolCard:
        """A card from an OpenAI function definition (`{"type": "function", "function": {...}}` or the bare
        function object). Loose types are normalised (`card.normalized` says how). The definition has no
        implementation: pass `kind`/`backend`, or bind one when it runs (a card with `kind: function`
        and no `backend.callable` is schema-only)."""
        if not isinstance(spec, dict):
            raise CardError("<openai>", 0, "function", f"expected a JSON object, got {type(spec).__name__}")
        fn = spec.get("function", spec) if spec.get("type", "function") == "function" else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise CardError("<openai>", 0, "function", "expected {'type': 'function', 'function': {'name': ...}}")
        return cls._imported(f"<openai {fn['name']}>", fn["name"], fn.get("description"), fn.get("parameters"),
                             kind, backend, fields)

    @classmethod
    def from_mcp(cls, tool: Any, *, kind: Kind = "function", backend: dict[str, Any] | None = None,
                 **fields: Any) -> ToolCard:
        """A card from a Model Context Protocol `Tool` (a tools/list entry: `{"name", "description",
        "inputSchema"}`, or the SDK's `mcp.types.Tool`). A name MCP allows but a card does not (a
        space, a slash) is mapped, and the server's own name kept in `backend.tool` for kind `mcp`."""
        if hasattr(tool, "model_dump"):  # the SDK's pydantic model; by_alias gives the wire names
            tool = tool.model_dump(by_alias=True, exclude_none=True)
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise CardError("<mcp>", 0, "name", "expected an MCP Tool: {'name': ..., 'inputSchema': {...}}")
        schema = tool.get("inputSchema", tool.get("input_schema"))
        backend = dict(backend or {})
        name = card_name(tool["name"])
        if kind == "mcp" and name != tool["name"]:
            backend.setdefault("tool", tool["name"])
        description = tool.get("description") or (tool.get("annotations") or {}).get("title") or tool.get("title")
        return cls._imported(f"<mcp {tool['name']}>", tool["name"], description, schema, kind, backend, fields)

    @classmethod
    def from_json_schema(cls, schema: dict[str, Any], *, name: str | None = None, description: str | None = None,
                         kind: Kind = "function", backend: dict[str, Any] | None = None, **fields: Any) -> ToolCard:
        """A card from the JSON Schema of a tool's arguments; the name and description default to the
        schema's `title` and `description` (which stay in the schema too)."""
        if not isinstance(schema, dict):
            raise CardError("<json schema>", 0, "parameters", f"expected a JSON object, got {type(schema).__name__}")
        name = name or schema.get("title")
        if not isinstance(name, str):
            raise CardError("<json schema>", 0, "name", "no name: pass name= or give the schema a 'title'")
        return cls._imported(f"<json schema {name}>", name, description or schema.get("description"), schema,
                             kind, backend, fields)

    @classmethod
    def _imported(cls, where: str, name: str, description: Any, schema: Any, kind: str,
                  backend: dict[str, Any] | None, fields: dict[str, Any]) -> ToolCard:
        notes: list[str] = []
        mapped = card_name(name)
        if mapped != name:
            notes.append(f"name: {name!r} -> {mapped!r}")
        try:
            parameters, changes = normalize(schema)
        except LooseSchemaError as e:
            raise CardError(where, 0, _dotted(("parameters",) + e.path), e.problem) from None
        notes += [f"parameters.{c}" for c in changes]
        data = {"name": mapped, "kind": kind, "description": description or name, "parameters": parameters,
                "backend": backend or {}}
        data.update(fields)
        try:
            card = cls.model_validate(data)
        except ValidationError as e:
            loc, msg = _problems(e)[0]
            raise CardError(where, 0, _dotted(loc), msg) from None
        card._normalized = tuple(notes)
        return card

    @classmethod
    def from_function(cls, fn: Callable[..., Any], *, state: str | None = None, **fields: Any) -> ToolCard:
        """A `function` card from a typed Python function with a Google-style docstring: the schema is
        derived from the signature and the `Args:` section, never written twice. The parameter that
        receives the episode's state (`ToolContext.env`) is left out of the schema: the one named by
        `state`, else the one annotated `State` (or `Annotated[T, STATE]`), else one named `env`."""
        description, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
        hints = typing.get_type_hints(fn)
        skip = state_parameter(fn, state)
        properties: dict[str, Any] = {}
        required: list[str] = []
        for pname, param in inspect.signature(fn).parameters.items():
            if pname == skip:
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(f"{fn.__qualname__}: *{pname} cannot be described by a JSON Schema")
            if pname not in hints:
                raise TypeError(f"{fn.__qualname__}: parameter {pname!r} needs a type hint")
            prop = _json_type(hints[pname], f"{fn.__qualname__}.{pname}")
            if pname in arg_docs:
                prop["description"] = arg_docs[pname]
            if param.default is param.empty:
                required.append(pname)
            elif _is_json(param.default):
                prop["default"] = param.default
            properties[pname] = prop
        schema: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            schema["required"] = required
        backend = {"callable": f"{fn.__module__}:{fn.__qualname__}", **({"state": state} if state else {})}
        data = {"name": fn.__name__, "kind": "function", "description": description or fn.__name__,
                "parameters": schema, "backend": backend}
        data.update(fields)
        return cls.model_validate(data)


def state_parameter(fn: Callable[..., Any], name: str | None = None) -> str | None:
    """The parameter of `fn` that receives the episode's state: `name` when given (it must exist),
    else the one annotated with `STATE` (`db: State`), else one named `env`, else None."""
    params = inspect.signature(fn).parameters
    where = getattr(fn, "__qualname__", repr(fn))
    if name is not None:
        if name not in params:
            raise TypeError(f"{where}: no parameter {name!r} to receive the episode's state "
                            f"(parameters: {', '.join(params) or 'none'})")
        return name
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # unresolvable string annotations, or a builtin: read what the signature holds
        hints = {n: p.annotation for n, p in params.items()}
    marked = [n for n in params if any(m is STATE for m in getattr(hints.get(n), "__metadata__", ()))]
    if len(marked) > 1:
        raise TypeError(f"{where}: parameters {marked} are all marked State; one receives the episode's state")
    if marked:
        return marked[0]
    return "env" if "env" in params else None


def _name_problem(name: str) -> str:
    if not name:
        return "must not be empty"
    if len(name) > MAX_NAME:
        return f"{len(name)} characters, over the {MAX_NAME} that MCP allows"
    bad = sorted({c for c in name if not CARD_NAME.fullmatch(c)})
    return (f"{''.join(bad)!r} not allowed: a name uses letters, digits, '_', '-' and '.' "
            "(what OpenAI and MCP tool names use)")


def _validator(schema: dict[str, Any]) -> Any:
    import jsonschema  # slow to import; the card that holds `schema` has loaded it already

    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)(schema)


def arguments_problem(name: str, validator: Any, arguments: Any) -> str | None:
    """None when `arguments` pass `validator` (a jsonschema validator), else a message saying where
    and why not: the one message a tool, a card and the rollout show."""
    if not isinstance(arguments, dict):
        return f"arguments must be a JSON object, got {type(arguments).__name__}"
    import jsonschema

    error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(arguments)"
    return f"arguments of {name!r} do not match its schema at {where}: {error.message}"

# ---------------------------------------------------------------------------------------------- load
def _yaml() -> YAML:
    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.width = 100
    y.indent(mapping=2, sequence=4, offset=2)
    y.representer.add_representer(float, _represent_float)
    return y


def _represent_float(representer: Any, value: float) -> Any:
    """Floats in positional notation (0.00001, not 1e-05): YAML 1.1 readers such as PyYAML take
    an exponent without a dot for a string."""
    text = repr(value)
    if "e" in text and math.isfinite(value):
        text = format(Decimal(text), "f")
        text = text if "." in text else text + ".0"
    return representer.represent_scalar("tag:yaml.org,2002:float", text)


def _read_tree(path: Path) -> CommentedMap:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise CardError(path, 0, "(file)", f"cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:  # a ValueError, not an OSError: a binary or Latin-1 file
        line = e.object[:e.start].count(b"\n") + 1
        raise CardError(path, line, "(file)", f"not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset "
                                              f"{e.start})") from None
    try:
        tree = safeyaml.load(_yaml(), text)  # bounded nesting and aliases; the line of an unclosed quote
    except safeyaml.YAMLInputError as e:
        raise CardError(path, e.line, "(yaml)", e.problem) from None
    if not isinstance(tree, CommentedMap):
        raise CardError(path, 1, "(card)", f"a card is a YAML mapping, got {type(tree).__name__}")
    return tree


def _check_tree(path: Path, tree: CommentedMap) -> tuple[ToolCard | None, list[CardError]]:
    try:
        card = ToolCard.model_validate(_plain(tree))
    except ValidationError as e:
        return None, [CardError(path, _line_of(tree, loc), _dotted(loc), msg) for loc, msg in _problems(e)]
    card._origin = _Origin(path=path, tree=tree)
    return card, []


def load_card(path: str | os.PathLike) -> ToolCard:
    """Read and validate one card file; the first problem raises CardError (file:line: field: problem).
    `toolcards/NAME.yaml` falls back to the shipped card when no such file is here."""
    path = shipped_path(path)
    card, problems = _check_tree(path, _read_tree(path))
    if problems:
        first = problems[0]
        if len(problems) > 1:
            raise CardError(first.file, first.line, first.field,
                            f"{first.problem} (and {len(problems) - 1} more: orchlib cards validate {path})")
        raise first
    return card


def card_files(path_or_folder: str | os.PathLike) -> list[Path]:
    """The card files a path names: the file itself, or a folder's top-level *.yaml / *.yml (sub-folders,
    such as toolcards/examples/, are not read). `toolcards` is the shipped folder when none is here."""
    path = shipped_path(path_or_folder)
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    if not path.exists():
        raise CardError(path, 0, "(file)", "no such file or folder")
    return [path]


def load_cards(path_or_folder: str | os.PathLike | Iterable[str | os.PathLike]) -> list[ToolCard]:
    """Cards of a file, a folder (top level only) or a list of those, sorted by name; a name used
    twice is an error naming both files."""
    paths = [path_or_folder] if isinstance(path_or_folder, (str, os.PathLike)) else list(path_or_folder)
    cards = [load_card(f) for p in paths for f in card_files(p)]
    seen: dict[str, ToolCard] = {}
    for card in cards:
        if card.name in seen:
            raise card.error(("name",), f"duplicate tool name {card.name!r} (also in {seen[card.name].source})")
        seen[card.name] = card
    return sorted(cards, key=lambda c: c.name)


def check_cards(cards: Any, build: Callable[[ToolCard], list[CardError]] | None = None) -> list[CardError]:
    """Every problem of every card, without raising: YAML, fields, JSON Schema, duplicate names and
    whatever `build` finds in each valid card (`orchlib.tools.validate_cards` passes the backends'
    check; this module knows no backend). `cards` is one or a list of: a card file or folder, a
    `ToolCard`, or a card's fields as a dict (a card made in code is named `<card NAME>` in its
    messages, a dict `<card #i>` by its place in the list)."""
    items = [cards] if isinstance(cards, (str, os.PathLike, ToolCard, dict)) else list(cards)
    problems: list[CardError] = []
    seen: dict[str, ToolCard] = {}
    for i, item in enumerate(items):
        for card, found in _cards_of(item, i):
            problems += found
            if card is None:
                continue
            if card.name in seen:
                other = seen[card.name].source or f"<card {card.name}>"
                problems.append(card.error(("name",), f"duplicate tool name {card.name!r} (also in {other})"))
            seen[card.name] = card
            if build is not None:
                problems += build(card)
    return problems


def _cards_of(item: Any, index: int) -> Iterable[tuple[ToolCard | None, list[CardError]]]:
    """(card or None, its problems) for each card an item of validate_cards names."""
    if isinstance(item, ToolCard):
        yield item, []
        return
    if isinstance(item, dict):
        try:
            yield ToolCard.model_validate(item), []
        except ValidationError as e:
            name = item.get("name")
            where = f"<card {name}>" if isinstance(name, str) else f"<card #{index}>"
            yield None, [CardError(where, 0, _dotted(loc), msg) for loc, msg in _problems(e)]
        return
    if not isinstance(item, (str, os.PathLike)):
        yield None, [CardError(f"<item #{index}>", 0, "(card)", "expected a card file or folder, a ToolCard or "
                                                               f"a dict, got {type(item).__name__}")]
        return
    try:
        files = card_files(item)
    except CardError as e:
        yield None, [e]
        return
    for f in files:
        try:
            yield _check_tree(f, _read_tree(f))
        except CardError as e:
            yield None, [e]


# ---------------------------------------------------------------------------------------------- save
def save_card(card: ToolCard, path: str | os.PathLike) -> Path:
    """Write a card as YAML, atomically (temporary file, then rename). A card that was read from a
    file keeps that file's comments and key order; only changed values are rewritten."""
    path = Path(path)
    full = card.model_dump(mode="json")
    sparse = card.model_dump(mode="json", exclude_defaults=True)
    if card._origin is not None:
        tree = copy.deepcopy(card._origin.tree)
        _merge(tree, full, sparse)
    else:
        tree = _fresh_tree(full, sparse)
    buf = io.StringIO()
    _yaml().dump(tree, buf)
    return write_text_atomic(path, buf.getvalue())


def _fresh_tree(full: dict[str, Any], sparse: dict[str, Any]) -> CommentedMap:
    tree = CommentedMap()
    for key in ToolCard.model_fields:  # field order: name and kind first, as a person would write it
        if key in ("name", "kind", "description") or key in sparse:
            tree[key] = _to_yaml(sparse.get(key, full[key]))
    return tree


# What YAML reads back unchanged in a block or plain scalar: tab, newline and the printable characters,
# less the ones YAML 1.1 counts as line breaks (NEL, U+2028, U+2029) and the byte-order mark. Anything
# else (CR, other control characters) is written double-quoted, where it is escaped (\r, \a, \L).
_PLAIN_SAFE = re.compile("[\t\n\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd"
                         "\U00010000-\U0010ffff]*")


def _to_yaml(value: Any) -> Any:
    if isinstance(value, dict):
        out = CommentedMap()
        for k, v in value.items():
            out[_to_yaml(k)] = _to_yaml(v)
        return out
    if isinstance(value, list):
        return CommentedSeq(_to_yaml(v) for v in value)
    if isinstance(value, str):
        if not _PLAIN_SAFE.fullmatch(value):
            return DoubleQuotedScalarString(value)  # escaped: any string comes back exactly
        if "\n" in value:
            return LiteralScalarString(value)  # block style keeps long descriptions readable
    return value


def _merge(tree: CommentedMap, full: dict[str, Any], sparse: dict[str, Any]) -> None:
    """Bring `tree` to the values of `full`, touching only what changed. Keys the tree lacks are added
    only when they differ from their default (they are in `sparse`)."""
    for key in [k for k in tree if k not in full]:
        del tree[key]
    for key, value in full.items():
        if key in tree:
            old = tree[key]
            if isinstance(old, CommentedMap) and isinstance(value, dict):
                _merge(old, value, sparse[key] if isinstance(sparse.get(key), dict) else {})
            elif _plain(old) != value or type(_plain(old)) is not type(value) and not _numbers(old, value):
                tree[key] = _to_yaml(value)
        elif key in sparse:
            tree[_to_yaml(key)] = _to_yaml(sparse[key])


def _numbers(a: Any, b: Any) -> bool:
    """1 and 1.0 are the same price: keep what the author wrote."""
    num = (int, float)
    return isinstance(a, num) and isinstance(b, num) and not isinstance(a, bool) and not isinstance(b, bool)


# ---------------------------------------------------------------------------------------------- helpers
def _plain(obj: Any) -> Any:
    """ruamel's round-trip types (CommentedMap, ScalarFloat, ...) as plain Python values."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, bool):
        return bool(obj)
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, str):
        return str(obj)
    return obj


def _problems(exc: ValidationError) -> list[tuple[tuple[Any, ...], str]]:
    out = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        ctx = err.get("ctx") or {}
        if err["type"] == "json_schema":
            loc += tuple(ctx.get("path", ()))
            msg = err["msg"].rstrip(": ")
        elif err["type"] == "extra_forbidden":
            msg = "unknown field"
        elif err["type"] == "missing":
            msg = "required field is missing"
        else:
            msg = err["msg"]
        out.append((loc, msg))
    return out


def _dotted(loc: Iterable[Any]) -> str:
    return ".".join(str(x) for x in loc) or "(card)"


def _line_of(tree: Any, loc: tuple[Any, ...]) -> int:
    """1-based line of the deepest part of `loc` that exists in the YAML tree."""
    line = 0 if not hasattr(tree, "lc") else tree.lc.line
    node = tree
    for part in loc:
        if isinstance(node, CommentedMap) and part in node:
            line = node.lc.key(part)[0]
            node = node[part]
        elif isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
            line = node.lc.item(part)[0]
            node = node[part]
        else:
            break
    return line + 1


_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns|Return|Yields|Raises|Examples|Example|Notes|Note)"
                      r"\s*:\s*$")
_ARG = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(description, {arg: text}) from a Google-style docstring. The description is everything before
    the first section; an argument's text may continue on more-indented lines."""
    lines = doc.splitlines()
    desc: list[str] = []
    args: dict[str, str] = {}
    section, current, arg_indent = None, None, None
    for raw in lines:
        stripped = raw.strip()
        m = _SECTION.match(stripped)
        if m and (len(raw) - len(raw.lstrip())) == 0:
            section, current, arg_indent = m.group(1), None, None
            continue
        if section is None:
            desc.append(raw)
            continue
        if section not in ("Args", "Arguments", "Parameters") or not stripped:
            continue
        indent = len(raw) - len(raw.lstrip())
        am = _ARG.match(stripped)
        if am and (arg_indent is None or indent <= arg_indent):
            arg_indent, current = indent, am.group(1).lstrip("*")
            args[current] = am.group(2).strip()
        elif current is not None:
            args[current] = (args[current] + " " + stripped).strip()
    return "\n".join(desc).strip(), args


_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def _json_type(hint: Any, where: str) -> dict[str, Any]:
    """JSON Schema of a type hint (the subset a tool argument needs)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return {}
    if hint in _SIMPLE:
        return {"type": _SIMPLE[hint]}
    if isinstance(hint, type) and issubclass(hint, Enum):
        values = [m.value for m in hint]
        return {"type": _SIMPLE.get(type(values[0]), "string"), "enum": values}
    if origin is Literal:
        types = sorted({_SIMPLE[type(a)] for a in args})
        return {"type": types[0] if len(types) == 1 else types, "enum": list(args)}
    if origin in (list, typing.List, set, frozenset, Iterable) or hint in (list, set):
        return {"type": "array", **({"items": _json_type(args[0], where)} if args else {})}
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _json_type(args[0], where)}
        return {"type": "array", "prefixItems": [_json_type(a, where) for a in args],
                "minItems": len(args), "maxItems": len(args)}
    if origin is dict or hint is dict:
        return {"type": "object", **({"additionalProperties": _json_type(args[1], where)} if args else {})}
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        parts = [_json_type(a, where) for a in args]
        if all(set(p) == {"type"} and isinstance(p["type"], str) for p in parts):
            return {"type": [p["type"] for p in parts]}
        nullable = [p for p in parts if p != {"type": "null"}]
        if len(nullable) == 1 and len(parts) == 2 and isinstance(nullable[0].get("type"), str):
            out = {**nullable[0], "type": [nullable[0]["type"], "null"]}
            if "enum" in out:
                out["enum"] = [*out["enum"], None]
            return out
        return {"anyOf": parts}
    raise TypeError(f"{where}: no JSON Schema for type hint {hint!r}")


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True



def __getattr__(name: str) -> Any:
    """`orchlib.cards.validate_cards`, kept for old code: it moved to `orchlib.tools.validate_cards`,
    which builds each card's backend, and this module knows no backend (the backends import it). The
    package's own `__init__` has loaded `orchlib.tools` before any of its modules is used, so the
    function is found there without this module importing it; a DeprecationWarning says where it went."""
    if name != "validate_cards":
        raise AttributeError(f"module 'orchlib.cards' has no attribute {name!r}")
    tools = sys.modules.get("orchlib.tools")
    if tools is None:  # ImportError: `from orchlib.cards import ...` would hide an AttributeError's message
        raise ImportError("orchlib.cards.validate_cards moved: use orchlib.tools.validate_cards")

    def validate_cards(cards: Any, build: bool = True) -> list[CardError]:
        warnings.warn("orchlib.cards.validate_cards moved to orchlib.tools.validate_cards", DeprecationWarning,
                      stacklevel=2)
        return tools.validate_cards(cards, build=build)

    return validate_cards
