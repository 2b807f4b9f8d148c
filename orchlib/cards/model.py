"""ToolCard, the data model of one tool: its fields and their validation, argument checks against its
schema, exports (OpenAI, transformers, MCP) and imports (OpenAI, MCP, JSON Schema, a typed function)."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import typing
from pathlib import Path
from typing import Any, Callable, Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError
from ruamel.yaml.comments import CommentedMap

from orchlib.cards.costs import Latency, Price
from orchlib.cards.docschema import is_json, json_type, parse_docstring
from orchlib.cards.errors import CardError, dotted, line_of, pydantic_problems
from orchlib.cards.state import state_parameter
from orchlib.looseschema import LooseSchemaError, normalize
from orchlib.toolnames import CARD_NAME, MAX_NAME, card_name, export_name

__all__ = ["Kind", "KINDS", "MODEL_KINDS", "EMPTY_SCHEMA", "NAME_PATTERN", "ToolCard", "arguments_problem"]

Kind = Literal["function", "python", "search", "llm", "replay", "simulated", "mcp"]
KINDS: tuple[str, ...] = typing.get_args(Kind)

# Kinds that stand in for a model; only these may take the task itself instead of written arguments.
MODEL_KINDS = ("llm", "replay", "simulated")
EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
NAME_PATTERN = CARD_NAME.pattern


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
            return CardError(f"<card {self.name}>", 0, dotted(loc), problem)
        return CardError(self._origin.path, line_of(self._origin.tree, loc), dotted(loc), problem)

    def errors_from(self, exc: ValidationError, prefix: Iterable[Any] = ()) -> list[CardError]:
        """Turn a pydantic error about a part of this card (e.g. its backend settings) into CardErrors."""
        return [self.error(tuple(prefix) + loc, msg) for loc, msg in pydantic_problems(exc)]

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
            raise CardError(where, 0, dotted(("parameters",) + e.path), e.problem) from None
        notes += [f"parameters.{c}" for c in changes]
        data = {"name": mapped, "kind": kind, "description": description or name, "parameters": parameters,
                "backend": backend or {}}
        data.update(fields)
        try:
            card = cls.model_validate(data)
        except ValidationError as e:
            loc, msg = pydantic_problems(e)[0]
            raise CardError(where, 0, dotted(loc), msg) from None
        card._normalized = tuple(notes)
        return card

    @classmethod
    def from_function(cls, fn: Callable[..., Any], *, state: str | None = None, **fields: Any) -> ToolCard:
        """A `function` card from a typed Python function with a Google-style docstring: the schema is
        derived from the signature and the `Args:` section, never written twice. The parameter that
        receives the episode's state (`ToolContext.state`) is left out of the schema: the one named by
        `state`, else the one annotated `State` (or `Annotated[T, STATE]`), else one named `env`."""
        description, arg_docs = parse_docstring(inspect.getdoc(fn) or "")
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
            prop = json_type(hints[pname], f"{fn.__qualname__}.{pname}")
            if pname in arg_docs:
                prop["description"] = arg_docs[pname]
            if param.default is param.empty:
                required.append(pname)
            elif is_json(param.default):
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
