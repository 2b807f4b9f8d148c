"""What `evaluate` returns and how it reads: `EvalReport` (saved as metrics.json, table.txt and
trajectories.jsonl), plain-text tables, one row per policy (`compare`), and rewards scored across policies."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from orchlib.atomic import write_text_atomic
from orchlib.tasks import Preference
from orchlib.trajectory import Trajectory, write_jsonl

__all__ = ["EvalReport", "format_table", "compare", "reward_across"]


def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table: first column left-aligned, the others right-aligned."""
    cells = [[str(h) for h in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = []
    for j, row in enumerate(cells):
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _mix(calls: Mapping[str, Mapping[str, float]], top: int = 4) -> str:
    ranked = sorted(calls.items(), key=lambda kv: (-kv[1]["share"], kv[0]))
    text = " ".join(f"{name}:{v['share']:.0%}" for name, v in ranked[:top])
    return text + (" …" if len(ranked) > top else "") if text else "-"


def _row(label: str, s: Mapping[str, Any]) -> list[Any]:
    reward = "-" if s.get("reward") is None else f"{s['reward']:.3f}"
    return [label, s["n"], f"{s['accuracy']:.3f}", f"{s['cost_usd']:.5f}", f"{s['latency_s']:.2f}",
            f"{s['calls_per_task']:.2f}", s["errors"]["total"], reward, _mix(s["calls"])]


_HEADER = ["", "n", "accuracy", "cost $", "latency s", "calls/task", "errors", "reward", "tool mix (share of calls)"]


@dataclass
class EvalReport:
    """What `evaluate` returns: the metrics, the trajectories and (with a reward file) their rewards."""

    name: str
    metrics: dict[str, Any]
    trajectories: list[Trajectory] = field(repr=False)
    rewards: list[float] | None = field(default=None, repr=False)
    # Where the trajectories were written as they came (`evaluate(trajectories_to=...)`); `trajectories`
    # is then empty and `read_jsonl(trajectories_path)` reads them back.
    trajectories_path: Path | None = None

    def table(self) -> str:
        """Overall, per category, per profile and per configuration feature, one row each."""
        m = self.metrics
        rows = [_row("overall", m["overall"])]
        rows += [_row(f"category {k}", v) for k, v in m["by_category"].items()]
        rows += [_row(f"profile {k}", v) for k, v in m["by_profile"].items()]
        rows += [_row(f"{feature} {k}", v) for feature, by in m.get("by_configuration", {}).items()
                 for k, v in by.items()]  # per tool-configuration feature, where episodes had configurations
        return f"policy: {self.name}\n" + format_table(_HEADER, rows)

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "metrics": self.metrics}, indent=2, sort_keys=True)

    def save(self, folder: str | os.PathLike) -> Path:
        """metrics.json, table.txt and trajectories.jsonl in `folder`, each written atomically."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        write_text_atomic(folder / "metrics.json", self.to_json() + "\n")
        write_text_atomic(folder / "table.txt", self.table() + "\n")
        target = folder / "trajectories.jsonl"
        if self.trajectories_path is None:
            write_jsonl(self.trajectories, target)
        elif not (target.exists() and target.samefile(self.trajectories_path)):
            _copy_atomic(self.trajectories_path, target)
        return folder


def compare(reports: Mapping[str, EvalReport] | Sequence[EvalReport],
            extra: Mapping[str, Mapping[str, float]] | None = None) -> str:
    """One row per policy: the overall numbers, accuracy per category, then `extra` columns
    (column name → policy → value, e.g. `{"reward across": reward_across(...)}`)."""
    items = list(reports.items()) if isinstance(reports, Mapping) else [(r.name, r) for r in reports]
    cats = sorted({c for _, r in items for c in r.metrics["by_category"]})
    extra = dict(extra or {})
    keep = [i for i, h in enumerate(_HEADER)  # no reward column when no policy was given a reward
            if h != "reward" or any(r.metrics["overall"]["reward"] is not None for _, r in items)]
    header = ["policy", *[_HEADER[i] for i in keep[1:-1]], *[f"acc {c}" for c in cats], *extra, _HEADER[-1]]
    rows = []
    for name, r in items:
        full = _row(name, r.metrics["overall"])
        base = [full[i] for i in keep]
        per = [f"{r.metrics['by_category'][c]['accuracy']:.2f}" if c in r.metrics["by_category"] else "-"
               for c in cats]
        more = [f"{col[name]:.3f}" if name in col else "-" for col in extra.values()]
        rows.append(base[:-1] + per + more + base[-1:])
    return format_table(header, rows)


def reward_across(reports: Mapping[str, EvalReport], reward) -> dict[str, float]:
    """Mean reward of each policy when every task's group is *the policies' trajectories of that task*.

    A group-normalised reward (ToolOrchestra's min-max over rollouts) is 0 for a group of one, so a
    single deterministic run per task cannot be scored alone; grouped across policies, a policy earns
    more where it was right more cheaply, faster, or with the tools P favours, than the others.
    The reports must cover the same tasks in the same order, one trajectory per task."""
    names = list(reports)
    streamed = [n for n in names if reports[n].trajectories_path is not None and not reports[n].trajectories]
    if streamed:
        raise ValueError(f"reward_across needs the trajectories in memory; {streamed[0]!r} wrote them to "
                         f"{reports[streamed[0]].trajectories_path} (read them back with read_jsonl)")
    runs = [reports[n].trajectories for n in names]
    ids = [t.task_id for t in runs[0]]
    if any([t.task_id for t in r] != ids for r in runs[1:]):
        raise ValueError("reward_across needs reports over the same tasks in the same order, one run each")
    totals = np.zeros(len(names))
    for i in range(len(ids)):
        group = [r[i] for r in runs]
        P = Preference.model_validate(group[0].preference) if group[0].preference else None
        totals += np.asarray(reward(group, P=P), dtype=float)
    return {n: float(v / max(len(ids), 1)) for n, v in zip(names, totals)}


def _copy_atomic(source: Path, target: Path) -> None:
    """Copy `source` to a temporary file beside `target`, then rename it over `target`."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        shutil.copyfile(source, tmp)
        os.replace(tmp, target)
    except BaseException:  # remove the partial copy; the error reaches the caller unchanged
        Path(tmp).unlink(missing_ok=True)
        raise
