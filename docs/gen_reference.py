"""Write docs/reference.md: every config's fields (type, default, description), read from the code.

    .venv/bin/python docs/gen_reference.py           # rewrite docs/reference.md
    .venv/bin/python docs/gen_reference.py --check   # exit 1 if it is out of date

The configs are the frozen pydantic models a user writes, in Python or in a YAML file: those listed in
SECTIONS, the tool backends' `Settings` (from `orchlib.tools.BACKENDS`), and any other frozen model the
package exports (`orchlib._EXPORTS`), so a new public config cannot be left out. tests/test_docs.py
fails when the file on disk differs from what this writes.
"""

from __future__ import annotations

import importlib
import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

OUT = Path(__file__).with_name("reference.md")

# (title, ["module:Class", ...]); the order of the page.
SECTIONS: list[tuple[str, list[str]]] = [
    ("Training", ["orchlib.train.run:RunConfig", "orchlib.envs.config:EnvConfig", "orchlib.train.config:GRPOConfig",
                  "orchlib.train.config:LoraSettings", "orchlib.train.sft:SFTConfig",
                  "orchlib.train.drills:OrderDrillConfig", "orchlib.train.evidence:EvidenceDrillConfig",
                  "orchlib.train.evaluation:RunEvaluation",
                  "orchlib.train.plugin:HooksPlugin"]),
    ("Experiments beyond the paper", ["orchlib.experiments.variants:VariantConfig"]),
    ("Rollouts and policies", ["orchlib.rollout:RolloutConfig", "orchlib.engines.base:SamplingParams",
                               "orchlib.engines.openai:APIPolicyConfig", "orchlib.engines.vllm:VLLMConfig"]),
    ("Tool cards", ["orchlib.cards.model:ToolCard", "orchlib.cards.costs:Price", "orchlib.cards.costs:Latency"]),
    ("Tool configurations", ["orchlib.configurations:ConfigurationSpace", "orchlib.configurations:Slot",
                             "orchlib.configurations:AliasPool", "orchlib.configurations:PriceSpace",
                             "orchlib.configurations:LatencySpace", "orchlib.configurations:PreferenceSpace",
                             "orchlib.configurations:Values", "orchlib.configurations:BackendInfo",
                             "orchlib.configuration_record:Configuration",
                             "orchlib.configuration_record:OfferedTool"]),
    ("Tasks and preferences", ["orchlib.tasks:Task", "orchlib.tasks:Golden", "orchlib.tasks:UserSpec",
                               "orchlib.tasks:Preference"]),
    ("Rewards", ["orchlib.reward.file:RewardSpec"]),
    ("Evaluation", ["orchlib.commands.eval:EvalFileConfig", "orchlib.commands.eval:PolicySpec",
                    "orchlib.judge:JudgeConfig"]),
    ("The demo", ["orchlib.demo:DemoConfig", "orchlib.demo.config:WarmStartConfig"]),
]


def _load(path: str) -> type[BaseModel]:
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def _is_config(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, BaseModel) and bool(obj.model_config.get("frozen"))


def collect() -> list[tuple[str, list[type[BaseModel]]]]:
    """The sections with their classes: the listed ones, the tool backends', then any exported one left."""
    import orchlib
    from orchlib.tools import BACKENDS

    sections = [(title, [_load(p) for p in paths]) for title, paths in SECTIONS]
    backends = [b.Settings for _, b in sorted(BACKENDS.items()) if b.Settings.model_fields]
    sections.insert(3, ("Tool backends (a card's `backend:`)", list(dict.fromkeys(backends))))
    seen = {c for _, classes in sections for c in classes}
    others = [obj for name in sorted(orchlib._EXPORTS) if _is_config(obj := getattr(orchlib, name))
              and obj not in seen]
    if others:
        sections.append(("Other exported configs", others))
    return sections


def _type(t: Any) -> str:
    """A type as a reader writes it: `float | None`, `'std' | 'none'`, `list[str]`, a link to a config."""
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type(a) for a in args)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin is not None:
        inner = ", ".join("..." if a is Ellipsis else _type(a) for a in args)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]" if args else origin.__name__
    if t is type(None):
        return "None"
    if isinstance(t, type) and issubclass(t, BaseModel) and _is_config(t):
        return f"[{t.__name__}](#{t.__name__.lower()})"
    return getattr(t, "__name__", str(t).replace("typing.", ""))


def _bounds(field: Any) -> str:
    """Numeric and length constraints (`>= 0`, `< 1`), from the field's metadata."""
    marks = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "min_length": "len >=", "max_length": "len <="}
    found = []
    for meta in field.metadata:
        for attr, sign in marks.items():
            value = getattr(meta, attr, None)
            if value is not None:
                found.append(f"{sign} {value}")
    return f" ({', '.join(found)})" if found else ""


def _default(field: Any) -> str:
    if field.default_factory is not None:
        factory = field.default_factory
        if isinstance(factory, type) and issubclass(factory, BaseModel):
            return f"`{factory.__name__}()`"
        value = factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    text = repr(value.model_dump() if isinstance(value, BaseModel) else value)
    if len(text) > 40:  # a long default (a prompt template) would swamp the table; the code has it in full
        text = text[:37] + "..."
    return f"`{text}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _intro(cls: type[BaseModel]) -> str:
    doc = (cls.__doc__ or "").strip()
    first = doc.split("\n\n")[0] if doc and not doc.startswith(("A base class", "Usage docs")) else ""
    return " ".join(first.split())


def render() -> str:
    out = ["# Config reference", "",
           "Generated by `python docs/gen_reference.py` from the code's field descriptions: do not edit by hand.",
           "Every config is a frozen pydantic model with `extra=\"forbid\"`: a misspelt field is an error that",
           "names it. In a YAML file (`orchlib train --config`, `orchlib eval --config`, cards, reward files)",
           "a nested config is a nested mapping.", ""]
    sections = collect()
    for title, classes in sections:
        out.append(f"- {title}: " + ", ".join(f"[{c.__name__}](#{c.__name__.lower()})" for c in classes))
    for title, classes in sections:
        out += ["", f"## {title}"]
        for cls in classes:
            out += ["", f"### {cls.__name__}", "", f"`{cls.__module__}.{cls.__qualname__}`"]
            intro = _intro(cls)
            if intro:
                out += ["", intro]
            out += ["", "| field | type | default | description |", "|---|---|---|---|"]
            for name, field in cls.model_fields.items():
                key = field.alias or name
                desc = field.description or ""
                out.append(f"| `{key}` | {_cell(_type(field.annotation) + _bounds(field))} | "
                           f"{_cell(_default(field))} | {_cell(desc)} |")
    return "\n".join(out) + "\n"


def missing_descriptions() -> list[str]:
    """`Class.field` for every field without a description."""
    return [f"{cls.__name__}.{name}" for _, classes in collect() for cls in classes
            for name, field in cls.model_fields.items() if not field.description]


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} is out of date: run `python docs/gen_reference.py`", file=sys.stderr)
            return 1
        return 0
    tmp = OUT.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(OUT)  # write then rename: a failed run leaves the old page whole
    print(f"wrote {OUT} ({text.count(chr(10))} lines)")
    missing = missing_descriptions()
    if missing:
        print(f"{len(missing)} fields without a description: {', '.join(missing)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
