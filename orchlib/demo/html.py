"""report.html of the demo: one self-contained page (plotly.js inlined once) that leads with what was learned —
where the calls went under each profile, before and after RL — then the checks, the numbers as a table,
and the training curves. Every text that reaches the page is escaped: tool names are model-written."""

from __future__ import annotations

import html

from orchlib.demo.config import DEMO_TOOL_NAMES, EXPENSIVE
from orchlib.demo.report import check_caveats, objective_line, table_notes, table_rows

__all__ = ["report_html", "STYLE"]

# The table wraps in a box that scrolls on its own should it ever be wider than the page, so the page never is.
STYLE = ("body{font-family:sans-serif;max-width:1100px;margin:auto;padding:0 12px}"
         ".numbers{overflow-x:auto} table{border-collapse:collapse;font-size:13px}"
         "th,td{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right;white-space:nowrap}"
         "th:nth-child(-n+2),td:nth-child(-n+2){text-align:left} .pass b{color:#2ca02c} .fail b{color:#d62728}"
         ".notes{font-size:13px}")


def report_html(metrics, after, baselines, history) -> str:
    """The page, from the demo's metrics (`summarize_demo`), its trained policy's evaluation, the
    baselines' evaluations and GRPO's history."""
    from orchlib import viz  # plotly: imported when a report is written

    learned = viz.backend_share_figure(
        metrics["backend_share"], title="Share of calls per backend, per profile, before and after RL")
    training = [
        ("Reward and its terms over GRPO steps", viz.reward_curves(history, keys=("reward_anchored",))),
        ("Tool-call mix over GRPO steps", viz.tool_mix_over_steps(history, tools=DEMO_TOOL_NAMES)),
        ("Where GRPO pushes, per profile, and what the policy chooses", viz.push_and_share(history, EXPENSIVE)),
        ("Tool calls per policy", viz.tool_distribution(
            {"orchestrator": after.trajectories, **{n: r.trajectories for n, r in baselines.items()}})),
        ("Cost vs accuracy, with the frontier", viz.cost_accuracy(_points(metrics))),
    ]
    e = html.escape
    checks = "".join(f"<li class='{'pass' if v else 'fail'}'>{e(str(k))}: <b>{'PASS' if v else 'FAIL'}</b></li>"
                     for k, v in metrics["checks"].items())
    caveats = "".join(f"<p>{e(line)}</p>" for line in check_caveats(metrics))
    header, rows = table_rows(metrics)
    table = ("<table><thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr></thead><tbody>"
             + "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows)
             + "</tbody></table>")
    notes = "".join(f"<p>{e(line)}</p>" for line in table_notes(metrics))
    parts = [f"<section id='learned'><h2>What it learned: where the calls went</h2>\n"
             f"{learned.to_html(full_html=False, include_plotlyjs='inline')}</section>",
             f"<section id='checks'><h2>Checks</h2><ul>{checks}</ul><div class='notes'>{caveats}</div></section>",
             f"<section id='numbers'><h2>Numbers</h2><div class='numbers'>{table}</div>"
             f"<div class='notes'>{notes}</div></section>"]
    parts += [f"<section class='training'><h2>{e(title)}</h2>\n{fig.to_html(full_html=False, include_plotlyjs=False)}"
              "</section>" for title, fig in training]
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>orchlib demo (seed {e(str(metrics['seed']))})"
            f"</title><style>{STYLE}</style></head><body><h1>orchlib demo, seed {e(str(metrics['seed']))}</h1>"
            f"<p id='objective'>{e(objective_line(metrics).capitalize())}.</p>" + "\n".join(parts) + "</body></html>")


def _points(metrics) -> dict[str, tuple[float, float]]:
    """(cost, accuracy) per policy and profile."""
    out = {}
    for name, per in metrics["policies"].items():
        for prof in ("accuracy", "thrifty"):
            if prof in per:
                out[f"{name} ({prof})"] = (per[prof]["cost_usd"], per[prof]["accuracy"])
    return out
