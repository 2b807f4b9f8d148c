"""synthesize(): domain → schema and seed records → tools → tasks → the domain folder and a report.

Each stage's reply is cached under `cache` (default `<out>/.synth-cache/<domain slug>`), so a run that
stopped resumes where it stopped, and a finished run re-run sends no request at all.
"""

from __future__ import annotations

import re
from pathlib import Path

from tqdm.auto import tqdm

from orchlib.synth.config import SynthConfig
from orchlib.synth.domain import outline_stage, schema_stage
from orchlib.synth.llm import StageLLM, SynthError
from orchlib.synth.report import SynthReport
from orchlib.synth.tasks import tasks_stage
from orchlib.synth.tools import tools_stage
from orchlib.synth.write import write_domain

__all__ = ["synthesize", "slug"]


def slug(text: str) -> str:
    """A snake_case identifier from free text ('A small library!' → 'a_small_library')."""
    s = re.sub(r"\W+", "_", text.lower()).strip("_") or "domain"
    return s if not s[0].isdigit() else f"d_{s}"


def synthesize(config: SynthConfig, out: str | Path, cache: str | Path | None = None,
               progress: bool = True) -> tuple[Path, SynthReport]:
    """Run the four stages and write the domain folder; returns its path and the report (also written
    to `report.json` in it). Raises SynthError when a stage leaves nothing to build on."""
    out = Path(out)
    llm = StageLLM(config, Path(cache) if cache is not None else out / ".synth-cache" / slug(config.domain))
    bar = tqdm(total=4, desc="synth", unit="stage", disable=not progress)
    report = SynthReport(domain=config.domain, package="")
    report.llm = llm.usage  # the same object: the report counts as the stages ask

    outline = outline_stage(llm, config.domain, report)
    name = slug(outline["name"])
    package = config.package or f"synth_{name}"
    report.package = package
    bar.update()
    schema, records = schema_stage(llm, outline, report)
    bar.update()
    tools = tools_stage(llm, config, outline, schema, package, report, progress)
    bar.update()
    tasks = tasks_stage(llm, config, outline, schema, records, tools, package, report, progress)
    if not tasks:  # a domain without a task trains nothing: say so instead of writing an empty folder
        examples = "; ".join(report.stages["tasks"].examples.values()) or "the reply held no task"
        raise SynthError(f"stage tasks: no task was kept: {examples}")
    bar.update()
    bar.close()
    path = write_domain(out, package, name, str(outline.get("description", "")), schema, records, tools, tasks,
                        report, config.allowed_imports)
    return path, report
