"""What the panels share: plotly figures in an Output, escaped HTML, a trajectory and a reward breakdown
as HTML."""

from __future__ import annotations

import html
import json
from typing import Any, Sequence

import ipywidgets as widgets
import plotly.graph_objects as go

from orchlib.trajectory import Trajectory

__all__ = ["trajectory_html", "breakdown_html"]


_ERROR_STYLE = "color:#b00020"


# ---------------------------------------------------------------------------------------------- helpers
def _figure_output(fig: go.Figure) -> dict[str, Any]:
    """An nbformat display_data output carrying the figure as plotly's mime type."""
    spec = json.loads(fig.to_json())  # to_json turns numpy arrays into lists: the comm needs plain JSON
    spec["config"] = {"responsive": True, "displaylogo": False}
    return {"output_type": "display_data", "metadata": {},
            "data": {"application/vnd.plotly.v1+json": spec, "text/plain": f"<{fig.layout.title.text or 'figure'}>"}}


def _show(out: widgets.Output, fig: go.Figure) -> None:
    # Setting `outputs` (rather than `with out: display(fig)`) works from any thread.
    out.outputs = (_figure_output(fig),)


def _e(value: Any) -> str:
    return html.escape(str(value))


def _money(x: float) -> str:
    return f"${x:.3g}"


def trajectory_html(t: Trajectory, reward: float | None = None) -> str:
    """A trajectory as readable HTML: the prompt, each turn's text, its calls and what each tool
    returned (cost USD, latency s, errors in red), then the final answer and the totals."""
    p = t.preference or {}
    head = (f"<b>{_e(t.task_id)}</b> #{t.group_index} · {_e(t.category)} · P: {_e(p.get('name', 'default'))} "
            f"(accuracy={p.get('outcome', 1):g}, cost={p.get('cost', 0):g}, latency={p.get('latency', 0):g}"
            + "".join(f", {_e(k)}={v:g}" for k, v in sorted((p.get("tools") or {}).items())) + ")")
    parts = [f"<div>{head}</div>", *_configuration_html(t),
             f"<div style='margin:4px 0'><b>user</b>: {_e(t.prompt)}</div>"]
    for i, turn in enumerate(t.turns, 1):
        parts.append(f"<div style='margin:4px 0'><b>assistant</b> (turn {i}) · {turn.tokens_out} ids · "
                     f"{turn.gen_latency_s:.3g} s · turn {_money(turn.cost_usd)}, {turn.latency_s:.3g} s"
                     f"<pre style='white-space:pre-wrap;margin:2px 0'>{_e(turn.text)}</pre></div>")
        for call in turn.calls:
            parts.append(f"<div style='margin-left:1.5em'>→ call <b>{_e(call.name)}</b>"
                         f"({_e(json.dumps(call.arguments, ensure_ascii=False))})</div>")
        for o in turn.observations:
            label = f" [{_e(o.label)}]" if o.label else ""
            if o.error:
                body = f" · <span style='{_ERROR_STYLE}'>error ({_e(o.error_kind)}): {_e(o.error)}</span>"
            else:
                body = f"<pre style='white-space:pre-wrap;margin:2px 0'>{_e(o.content)}</pre>"
            behind = f" ({_e(o.meta['backend'])})" if o.meta.get("backend") else ""  # an alias's backend
            parts.append(f"<div style='margin-left:1.5em'>← <b>{_e(o.tool or 'orchestrator')}</b>{behind}{label} · "
                         f"{_money(o.cost_usd)} · {o.latency_s:.3g} s{' · final' if o.final else ''}{body}</div>")
    score = "" if reward is None else f" · reward {reward:.4g}"
    parts.append(f"<div style='margin-top:4px'><b>answer</b>: {_e(t.final_answer)} · outcome {t.outcome:g} · "
                 f"finish: {_e(t.finish_reason)} · total {_money(t.cost_usd)}, {t.latency_s:.3g} s{score}</div>")
    return "<div class='orchlib-trajectory'>" + "".join(parts) + "</div>"




def _configuration_html(t: Trajectory) -> list[str]:
    """The episode's tool configuration, one line: each alias shown → the backend behind it, at its episode
    prices, in the order the policy read them; the space and its held-out parts. Nothing without one."""
    c = t.configuration
    if c is None:
        return []
    tools = ", ".join(f"<b>{_e(o.alias)}</b> → {_e(o.backend)} ({_e(o.price.describe())})" for o in c.tools)
    held = f", held out: {_e('+'.join(c.held_out))}" if c.held_out else ""
    return [f"<div style='margin:2px 0'>tools this episode ({_e(c.space or 'configuration')}{held}): {tools}</div>"]


def _error_html(text: str, e: Exception) -> str:
    """The error, and the offending line of the text with a caret under the column when known."""
    lines = text.splitlines() or [""]
    line, col = getattr(e, "position", (getattr(e, "line", 0), 0))
    where = ""
    if 1 <= line <= len(lines):
        caret = " " * max(col - 1, 0) + "^" if col else ""
        where = f"<pre style='margin:2px 0'>{_e(lines[line - 1])}\n{caret}</pre>"
    return f"<div class='orchlib-error' style='{_ERROR_STYLE}'>{_e(type(e).__name__)}: {_e(e)}{where}</div>"


def _explain_table(e, group: Sequence[Trajectory]) -> str:
    terms = list(e.contributions)
    names = ["rollout", "outcome", "cost $", "latency s", "calls", *terms, "reward"]
    head = "".join(f"<th>{_e(h)}</th>" for h in names)
    rows = []
    for i, t in enumerate(group):
        # Every cell is escaped text (a tool name is whatever the policy wrote); the reward's bold is
        # added here, around its escaped number, never recognised in a cell's content.
        calls = ", ".join(f"{k}×{v}" for k, v in sorted(t.calls.items())) or "-"
        cells = [f"#{t.group_index}", f"{t.outcome:g}", f"{t.cost_usd:.4g}", f"{t.latency_s:.3g}", calls]
        cells += [f"{e.contributions[n][i]:.4g}" for n in terms]
        rows.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells)
                    + f"<td><b>{_e(f'{e.reward[i]:.4g}')}</b></td></tr>")
    return f"<table class='orchlib-explain'><tr>{head}</tr>{''.join(rows)}</table>"


def breakdown_html(b) -> str:
    """A `orchlib.reward.breakdown.Breakdown` as HTML: each term's share of each rollout's reward, then
    the warnings (a term that cannot affect the result, never varies in a group, groups GRPO drops)."""
    rows = []
    for g in range(len(b.groups)):
        label, _, e = b.groups[g]
        shares = b.shares(g)
        for i in range(len(e.reward)):
            cells = [_e(label if i == 0 else ""), f"#{i}", f"{e.reward[i]:.4g}"]
            cells += ["-" if shares[t][i] is None else f"{shares[t][i]:.0%}" for t in b.terms]
            rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{_e(h)}</th>" for h in ["group", "rollout", "reward", *[f"{t} share" for t in b.terms]])
    warn = "".join(f"<li class='orchlib-reward-warning' data-kind='{_e(w.kind)}'><b>{_e(w.kind)}</b> "
                   f"{_e(w.subject)}: {_e(w.message)}</li>" for w in b.warnings)
    return (f"<table class='orchlib-breakdown'><tr>{head}</tr>{''.join(rows)}</table>"
            + (f"<ul style='color:#8a5300'>{warn}</ul>" if warn else "<div>no warnings</div>"))
