"""report.html of the demo: one self-contained page of plotly charts (plotly.js inlined once)."""

from __future__ import annotations

import html
import json

from orchlib.demo.config import DEMO_TOOL_NAMES, EXPENSIVE
from orchlib.demo.report import table_text

__all__ = ["report_html"]


def report_html(metrics, after, baselines, history) -> str:
    from orchlib import viz  # plotly: imported when a report is written
    figures = [
        ("Reward and its terms over GRPO steps", viz.reward_curves(history, keys=("reward_anchored",))),
        ("Tool-call mix over GRPO steps", viz.tool_mix_over_steps(history, tools=DEMO_TOOL_NAMES)),
        ("Where GRPO pushes, per profile, and what the policy chooses", viz.push_and_share(history, EXPENSIVE)),
        ("Tool calls per preference profile (trained orchestrator)", viz.tool_distribution(
            {p: [t for t in after.trajectories if t.preference.get("name") == p] for p in ("accuracy", "thrifty")})),
        ("Tool calls per policy", viz.tool_distribution(
            {"orchestrator": after.trajectories, **{n: r.trajectories for n, r in baselines.items()}})),
        ("Cost vs accuracy, with the frontier", viz.cost_accuracy(_points(metrics))),
    ]
    parts = []
    for i, (title, fig) in enumerate(figures):
        body = fig.to_html(full_html=False, include_plotlyjs="inline" if i == 0 else False)
        parts.append(f"<h2>{html.escape(title)}</h2>\n{body}")
    checks = "".join(f"<li>{html.escape(k)}: <b>{'pass' if v else 'FAIL'}</b></li>"
                     for k, v in metrics["checks"].items())
    table = html.escape(table_text(metrics))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>orchlib demo (seed {metrics['seed']})</title>"
            "<style>body{font-family:sans-serif;max-width:1100px;margin:auto} pre{font-size:12px}</style></head>"
            f"<body><h1>orchlib demo, seed {metrics['seed']}</h1><ul>{checks}</ul><pre>{table}</pre>"
            + "\n".join(parts)
            + f"<h2>Numbers</h2><pre>{html.escape(json.dumps(metrics['wall_s']))}</pre></body></html>")


def _points(metrics) -> dict[str, tuple[float, float]]:
    """(cost, accuracy) per policy and profile."""
    out = {}
    for name, per in metrics["policies"].items():
        for prof in ("accuracy", "thrifty"):
            if prof in per:
                out[f"{name} ({prof})"] = (per[prof]["cost_usd"], per[prof]["accuracy"])
    return out
