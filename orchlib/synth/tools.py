"""Stage 3: the domain's tools, typed Python functions over the database, written by the LLM.

Each tool's code is checked, and run once in the python sandbox, on its own (`orchlib.synth.code`:
model-written code never runs in the library's process), then its card is derived from the function's
signature as the syntax tree gives it (`ToolCard.from_function`: the docstring's `Args:` and the type
hints; the `env` parameter receives the episode's database and is left out of the schema). Refusals: `malformed` (an
entry without a name or code), `forbidden_code`, `does_not_load` (a syntax error, an error on load, no
function of that name, no `env` parameter, or a signature no card can describe), `duplicate_name`.
"""

from __future__ import annotations

import ast
import inspect
import json
import types
from typing import Any, Callable

from tqdm.auto import tqdm

from orchlib.cards import ToolCard
from orchlib.synth.code import CodeRefused, load_source
from orchlib.synth.config import SynthConfig
from orchlib.synth.domain import SYSTEM
from orchlib.synth.llm import StageLLM, SynthError
from orchlib.synth.report import SynthReport

__all__ = ["tools_stage", "Tools"]

PROMPT = """STAGE: tools
Domain outline: {outline}
Database schema: {schema}
Write {n} tools as JSON: {{"tools": [{{"name": the function name, "writes": true when it changes the database, \
"code": Python source of one function `def name(env: dict, ...) -> str` with a type hint on every parameter \
and a Google-style docstring whose Args: section describes each parameter except env}}]}}. `env` is the \
database as a dict, changed in place. Raise ValueError on bad input before changing anything. Imports \
allowed: {imports}; no file, network or process access."""


class Tools:
    """The kept tools: their joined source, the loaded module, functions and the names that write."""

    def __init__(self, source: str, module: types.ModuleType, names: list[str], writes: set[str]):
        self.source, self.module, self.names, self.writes = source, module, names, writes

    @property
    def functions(self) -> list[Callable[..., Any]]:
        return [getattr(self.module, n) for n in self.names]


def _load_one(entry: Any, i: int, module_name: str, config: SynthConfig) -> tuple[str, str, bool]:
    if not (isinstance(entry, dict) and isinstance(entry.get("name"), str) and isinstance(entry.get("code"), str)):
        raise CodeRefused("malformed", f"tool {i}: needs a name and code (strings)")
    name, code = entry["name"], entry["code"]
    module = load_source(code, module_name, config.allowed_imports, where=f"tool {name}")
    fn = module.__dict__.get(name)
    if not inspect.isfunction(fn):
        raise CodeRefused("does_not_load", f"tool {name}: the code defines no function {name!r}")
    if "env" not in inspect.signature(fn).parameters:
        raise CodeRefused("does_not_load", f"tool {name}: no `env` parameter for the database")
    try:
        ToolCard.from_function(fn)
    except (TypeError, ValueError) as e:  # no type hint, *args, a type JSON Schema cannot say
        raise CodeRefused("does_not_load", f"tool {name}: no card: {e}".splitlines()[0]) from None
    return name, code, bool(entry.get("writes"))


def _join(snippets: list[str]) -> str:
    """One module from the kept snippets: their imports once each at the top (a `from __future__` import
    dropped: it may only open a file), then the functions."""
    imports: list[str] = []
    bodies: list[str] = []
    for code in snippets:
        lines = code.splitlines()
        drop: set[int] = set()
        for node in ast.parse(code).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                drop.update(range(node.lineno - 1, node.end_lineno))
                text = ast.unparse(node)
                if text not in imports and not (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
                    imports.append(text)
        bodies.append("\n".join(line for i, line in enumerate(lines) if i not in drop).strip("\n"))
    head = "\n".join(imports) + "\n\n\n" if imports else ""
    return head + "\n\n\n".join(bodies) + "\n"


def tools_stage(llm: StageLLM, config: SynthConfig, outline: dict[str, Any], schema: dict[str, Any],
                package: str, report: SynthReport, progress: bool = True) -> Tools:
    reply = llm.ask("tools", SYSTEM, PROMPT.format(outline=json.dumps(outline, sort_keys=True),
                                                   schema=json.dumps(schema, sort_keys=True), n=config.n_tools,
                                                   imports=", ".join(config.allowed_imports)))
    entries = reply.get("tools") if isinstance(reply, dict) else None
    if not isinstance(entries, list):
        raise SynthError('stage tools: the reply must be an object with a "tools" list')
    count, module_name = report.stage("tools"), f"{package}.tools"
    kept: dict[str, tuple[str, bool]] = {}
    for i, entry in enumerate(tqdm(entries, desc="tools", unit="tool", disable=not progress)):
        try:
            name, code, writes = _load_one(entry, i, module_name, config)
        except CodeRefused as e:
            count.refuse(e.reason, str(e))
            continue
        if name in kept:
            count.refuse("duplicate_name", f"tool {name}: a tool of that name was kept already")
            continue
        kept[name] = (code, writes)
    if not kept:
        raise SynthError("stage tools: every tool was refused: " + "; ".join(count.examples.values()))
    source = _join([code for code, _ in kept.values()])
    try:  # the kept tools together (a helper two of them define twice would show here)
        module = load_source(source, module_name, config.allowed_imports, where=f"{package}/tools.py")
    except CodeRefused as e:
        raise SynthError(f"stage tools: the kept tools do not load together: {e}") from None
    count.kept = len(kept)
    return Tools(source, module, sorted(kept), {n for n, (_, w) in kept.items() if w})
