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

The package, one module a job: `model` (ToolCard, its validation, imports and exports), `costs` (Price,
Latency), `state` (the State marker), `errors` (CardError and where a problem is), `yamlio` (files:
load, check, save) and `docschema` (a function's docstring and type hints as JSON Schema).
"""

from __future__ import annotations

from orchlib.cards.costs import Latency, Price
from orchlib.cards.errors import CardError
from orchlib.cards.model import EMPTY_SCHEMA, KINDS, MODEL_KINDS, NAME_PATTERN, Kind, ToolCard, arguments_problem
from orchlib.cards.state import STATE, State, state_parameter
from orchlib.cards.yamlio import card_files, check_cards, load_card, load_cards, save_card

__all__ = ["KINDS", "Kind", "Price", "Latency", "ToolCard", "CardError", "load_card", "load_cards",
           "save_card", "check_cards", "card_files", "STATE", "State", "state_parameter",
           "MODEL_KINDS", "EMPTY_SCHEMA", "NAME_PATTERN", "arguments_problem"]

