"""The domain folder: a package the task loaders and the trainer take as it is.

    <package>/__init__.py      the package (its parent folder goes on sys.path / PYTHONPATH)
    <package>/database.json    the seed database;  schema.json: its JSON Schema
    <package>/tools.py         the kept tool code, as checked
    <package>/domain.py        DOMAIN (a DBDomain) and the tools of tools.py, each call run in the python sandbox
    <package>/cards/*.yaml     one function card per tool (backend.callable: <package>.domain:<tool>)
    <package>/tasks.jsonl      the kept tasks (env and checker: <package>.domain:DOMAIN.make_state / .check)
    <package>/report.json      kept and refused per stage and reason, the writer model's tokens and cost

The folder is written beside its place and renamed into it, so a reader never sees half of one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Sequence

from orchlib.cards import ToolCard, save_card
from orchlib.synth.report import SynthReport
from orchlib.synth.tools import Tools
from orchlib.tasks import Task, save_tasks

__all__ = ["write_domain"]

DOMAIN_PY = '''"""The {name} domain, made by orchlib.synth: DOMAIN over database.json and the tools of tools.py.

tools.py never runs in the importing process: orchlib.synth.code.load_source checks it as it was checked
when it was made (imports from _ALLOWED only), reads its functions' signatures off the syntax tree, and
runs each call in the python sandbox."""

import json
from pathlib import Path

from orchlib.envs.db import DBDomain
from orchlib.synth.code import load_source

__all__ = [{all_names}]

_HERE = Path(__file__).parent
_ALLOWED = (
{allowed})
_TOOLS = load_source((_HERE / "tools.py").read_text(encoding="utf-8"), __name__.rsplit(".", 1)[0] + ".tools",
                     _ALLOWED, where=str(_HERE / "tools.py"), verify=False)
INITIAL = json.loads((_HERE / "database.json").read_text(encoding="utf-8"))
{assignments}

DOMAIN = DBDomain(
    {name!r},
    lambda task: INITIAL,
    [
{tool_list}    ],
    write_tools={writes!r},
    tags={tags!r},
)
'''


def _dump(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def write_domain(out: str | Path, package: str, name: str, description: str, schema: dict[str, Any],
                 records: dict[str, Any], tools: Tools, tasks: Sequence[Task], report: SynthReport,
                 allowed_imports: Sequence[str]) -> Path:
    """Write the domain folder `out/<last part of package>` (replacing one there) and return its path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    target = out / package.rsplit(".", 1)[-1]
    tmp = Path(tempfile.mkdtemp(dir=out, prefix=f".{target.name}."))
    try:
        tags = [name, "local", "free", "synth"]
        (tmp / "__init__.py").write_text(f'"""{description.strip() or name} (made by orchlib.synth)."""\n',
                                         encoding="utf-8")
        (tmp / "database.json").write_text(_dump(records), encoding="utf-8")
        (tmp / "schema.json").write_text(_dump(schema), encoding="utf-8")
        (tmp / "tools.py").write_text(f"# The {name} tools, written by a model and checked by orchlib.synth.\n\n"
                                      + tools.source, encoding="utf-8")
        (tmp / "domain.py").write_text(DOMAIN_PY.format(
            name=name, all_names=", ".join(f'"{n}"' for n in ["DOMAIN", "INITIAL", *tools.names]),
            allowed="".join(f"    {m!r},\n" for m in allowed_imports), writes=sorted(tools.writes), tags=tags,
            tool_list="".join(f"        {n},\n" for n in tools.names),
            assignments="\n".join(f"{n} = _TOOLS.{n}" for n in tools.names)), encoding="utf-8")
        for fn in tools.functions:
            card = ToolCard.from_function(fn, tags=tags, backend={"callable": f"{package}.domain:{fn.__name__}"})
            save_card(card, tmp / "cards" / f"{fn.__name__}.yaml")
        save_tasks(list(tasks), tmp / "tasks.jsonl")
        os.chmod(tmp / "tasks.jsonl", 0o644)  # written private (mkstemp); a domain folder is for reading
        (tmp / "report.json").write_text(report.model_dump_json(indent=1) + "\n", encoding="utf-8")
        old = out / f".{target.name}.old"
        if target.exists():
            shutil.rmtree(old, ignore_errors=True)
            target.rename(old)
        os.chmod(tmp, 0o755)  # mkdtemp makes it private
        tmp.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:  # leave no half-written folder behind, then let the error reach the caller
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target
