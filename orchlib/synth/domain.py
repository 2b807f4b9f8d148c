"""Stages 1 and 2: the domain's outline, then its database schema (JSON Schema) and seed records.

Nothing is refused item by item here: a schema that is not a JSON Schema, or records that break it,
leave no database to build on, so the stage fails with one line naming what is wrong.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from orchlib.synth.llm import StageLLM, SynthError
from orchlib.synth.report import SynthReport

__all__ = ["outline_stage", "schema_stage", "schema_errors"]

SYSTEM = ("You design small stateful environments for training tool-using agents (ToolScale, arXiv 2511.21689). "
          "Reply with one JSON object only, no prose.")

OUTLINE = """STAGE: domain
Domain: {domain}
Outline it as JSON: {{"name": short snake_case name, "description": one paragraph, "entities": [the tables, \
each {{"name": ..., "fields": [...]}}], "operations": [what users ask an agent to look up or change]}}."""

SCHEMA = """STAGE: schema
Domain outline: {outline}
Write the database as JSON: {{"schema": a JSON Schema (draft 2020-12) of the whole database, an object whose \
properties are the tables (each an object keyed by record id), with types, required fields and bounds \
(e.g. "minimum": 0 for counts); "records": the seed database, valid under the schema, 3 to 8 records per \
table}}. Keep money in integer cents."""


def outline_stage(llm: StageLLM, domain: str, report: SynthReport) -> dict[str, Any]:
    outline = llm.ask("domain", SYSTEM, OUTLINE.format(domain=domain))
    if not isinstance(outline, dict) or not isinstance(outline.get("name"), str):
        raise SynthError('stage domain: the reply must be an object with a "name" string')
    report.stage("domain").kept = 1
    return outline


def schema_errors(schema: dict[str, Any], state: Any) -> list[str]:
    """Where `state` breaks `schema`, as 'path: message' lines (empty when it is valid)."""
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
            for e in sorted(validator.iter_errors(state), key=lambda e: list(map(str, e.absolute_path)))]


def schema_stage(llm: StageLLM, outline: dict[str, Any],
                 report: SynthReport) -> tuple[dict[str, Any], dict[str, Any]]:
    """(schema, records), the records checked against the schema."""
    reply = llm.ask("schema", SYSTEM, SCHEMA.format(outline=json.dumps(outline, sort_keys=True)))
    if not (isinstance(reply, dict) and isinstance(reply.get("schema"), dict)
            and isinstance(reply.get("records"), dict)):
        raise SynthError('stage schema: the reply must be an object with "schema" and "records" objects')
    schema, records = reply["schema"], reply["records"]
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as e:
        raise SynthError(f"stage schema: not a JSON Schema: {e.message}") from None
    errors = schema_errors(schema, records)
    if errors:
        raise SynthError(f"stage schema: the seed records break the schema: {errors[0]}")
    report.stage("schema").kept = 1
    return schema, records
