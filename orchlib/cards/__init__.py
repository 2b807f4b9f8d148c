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

import sys
import warnings
from typing import Any

from orchlib.cards.costs import Latency, Price
from orchlib.cards.errors import CardError
from orchlib.cards.model import EMPTY_SCHEMA, KINDS, MODEL_KINDS, NAME_PATTERN, Kind, ToolCard, arguments_problem
from orchlib.cards.state import STATE, State, state_parameter
from orchlib.cards.yamlio import card_files, check_cards, load_card, load_cards, save_card

__all__ = ["KINDS", "Kind", "Price", "Latency", "ToolCard", "CardError", "load_card", "load_cards",
           "save_card", "check_cards", "card_files", "STATE", "State", "state_parameter",
           "MODEL_KINDS", "EMPTY_SCHEMA", "NAME_PATTERN", "arguments_problem"]


def __getattr__(name: str) -> Any:
    """`orchlib.cards.validate_cards`, kept for old code: it moved to `orchlib.tools.validate_cards`,
    which builds each card's backend, and this package knows no backend (the backends import it).
    `orchlib`'s own `__init__` has loaded `orchlib.tools` before any of its modules is used, so the
    function is found there without this package importing it; a DeprecationWarning says where it went."""
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
