"""Plotly figures of orchestration runs: where the tool calls go, how training moves, what a reward sees.

Every function takes trajectories, training history (`Trainer.history`, step reports) or a reward
`Explanation`, and returns a `plotly.graph_objects.Figure`; nothing is drawn, saved or printed. The
widgets (`orchlib.widgets`) show these same figures.

    tool_distribution({"random": rep.trajectories, ...})  # stacked bars, as in ToolOrchestra Fig. 3/5
    tool_distribution(trajs, by="profile")                # one bar per preference profile
    tool_mix_over_steps(trainer.history)                  # the call mix as training goes
    backend_share_figure({"before RL": {"accuracy": {"gpt": 0.5, ...}, ...}, "after RL": ...})  # grouped bars
    reward_curves(trainer.history)                        # reward and each term's contribution
    push_and_share(trainer.history, "generalist")         # per profile: where updates push, what is chosen
    cost_accuracy({"oracle": report, ...})                # mean cost vs accuracy, Pareto frontier
    timeline(trajectory)                                  # turns and concurrent calls, Gantt-like
    explain_figure(reward.explain(group, P))              # each term's contribution per rollout
    sweep_figure(sweep(engine, tasks, toolbox, prefs))    # one point per P, its front, the baselines
    ledger_figure(ledger(trajectories, toolbox))          # where the money went: tool × token class

Colours: a tool gets the same colour in every figure of one call (tools sorted by name); pass
`colors=tool_colors(all_tools)` to keep them fixed across figures.

Text: plotly draws a subset of HTML in trace names, axis categories, hover text and titles (`<b>`,
`<br>`, `<a href>`, ...) and decodes entities there. Every string that comes from data (a tool name
the policy wrote, a task id, a profile or policy name, a tool's output) is escaped, so it shows as
written and is never read as markup; a `title=` passed by the caller is used as given.
"""

from __future__ import annotations

import html
from collections import Counter, defaultdict
from typing import Any, Iterable, Literal, Mapping, Sequence

import plotly.graph_objects as go
from plotly.colors import qualitative

from orchlib.evaluate import frontier
from orchlib.reward.reward import Explanation
from orchlib.trajectory import Trajectory

__all__ = ["tool_colors", "tool_distribution", "tool_mix_over_steps", "reward_curves", "push_and_share",
           "cost_accuracy", "timeline", "explain_figure", "sweep_figure", "ledger_figure",
           "backend_share_figure"]

_PALETTE = qualitative.Plotly + qualitative.D3
_ERROR_COLOR = "#d62728"
_POLICY_COLOR = "#7f7f7f"


def _h(text: Any) -> str:
    """Data as plotly text: `&`, `<` and `>` escaped. Quotes are left alone: plotly decodes numeric
    entities and `&amp; &lt; &gt;`, but not `&quot;`, and without `<` no tag (or attribute) can form."""
    return html.escape(str(text), quote=False)


def _ht(text: Any) -> str:
    """Data inside a hovertemplate: escaped as `_h`, and `%` as an entity so that a name holding
    `%{x}` is shown, not substituted."""
    return _h(text).replace("%", "&#37;")


def tool_colors(tools: Iterable[str]) -> dict[str, str]:
    """A colour per tool, assigned in sorted-name order (stable for the same set of tools)."""
    return {t: _PALETTE[i % len(_PALETTE)] for i, t in enumerate(sorted(set(tools)))}


# ---------------------------------------------------------------------------------------------- inputs
def _trajectories(obj: Any) -> list[Trajectory]:
    """Trajectories of an EvalReport / StepReport (anything with `.trajectories`) or a sequence."""
    return list(getattr(obj, "trajectories", obj))


def _group_key(t: Trajectory, by: str) -> str:
    if by == "profile":
        return str(t.preference.get("name") or "default")
    if by == "category":
        return t.category or "general"
    if by == "task":
        return t.task_id
    raise ValueError(f"by must be 'profile', 'category' or 'task', not {by!r}")


def _history(history: Any) -> list[Mapping[str, float]]:
    """Metrics dicts from a Trainer (its .history), a list of StepReports or a list of dicts."""
    history = getattr(history, "history", history)
    return [getattr(h, "metrics", h) for h in history]


def _steps(rows: Sequence[Mapping[str, float]]) -> list[float]:
    # Trainer metrics carry their own 1-based "step"; plain dicts without it are numbered in order.
    return [float(m.get("step", i + 1)) for i, m in enumerate(rows)]


# ---------------------------------------------------------------------------------------------- tool mix
def tool_distribution(data: Mapping[str, Any] | Sequence[Trajectory],
                      by: Literal["profile", "category", "task"] = "profile",
                      value: Literal["share", "mean", "count"] = "share", colors: Mapping[str, str] | None = None,
                      title: str | None = None) -> go.Figure:
    """Tool-call distribution as stacked bars: one bar per policy (a mapping name → trajectories or
    report) or, for a plain list of trajectories, one bar per `by` group; one segment per tool.

    value: "share" of that bar's calls (bars sum to 1, ToolOrchestra Fig. 3), "mean" calls per
    trajectory, or the raw "count".
    """
    if value not in ("share", "mean", "count"):
        raise ValueError(f"value must be 'share', 'mean' or 'count', not {value!r}")
    if isinstance(data, Mapping):
        groups = {str(k): _trajectories(v) for k, v in data.items()}
    else:
        groups = defaultdict(list)
        for t in _trajectories(data):
            groups[_group_key(t, by)].append(t)
        groups = dict(sorted(groups.items()))
    counts = {name: Counter() for name in groups}
    for name, trajs in groups.items():
        for t in trajs:
            counts[name].update(t.calls)
    tools = sorted({tool for c in counts.values() for tool in c})
    colors = dict(colors or tool_colors(tools))
    names = list(groups)
    fig = go.Figure()
    for tool in tools:
        ys = [_mix_value(counts[name][tool], len(groups[name]), sum(counts[name].values()), value) for name in names]
        fig.add_trace(go.Bar(name=_h(tool), x=[_h(n) for n in names], y=ys, marker_color=colors.get(tool),
                             customdata=[counts[name][tool] for name in names],
                             hovertemplate=f"{_ht(tool)}<br>%{{x}}: %{{y:.3g}} (%{{customdata}} calls)<extra></extra>"))
    axis = {"share": "share of calls", "mean": "calls per trajectory", "count": "calls"}[value]
    per = "policy" if isinstance(data, Mapping) else by
    fig.update_layout(barmode="stack", title=title or f"Tool calls per {per}",
                      yaxis_title=axis, legend_title="tool", xaxis_type="category")
    if value == "share":
        fig.update_yaxes(tickformat=".0%", range=[0, 1])
    return fig


def _mix_value(count: int, n_trajectories: int, n_calls: int, value: str) -> float:
    if value == "share":
        return count / n_calls if n_calls else 0.0
    if value == "mean":
        return count / n_trajectories if n_trajectories else 0.0
    return float(count)


def backend_share_figure(shares: Mapping[str, Mapping[str, Mapping[str, float]]],
                         colors: Mapping[str, str] | None = None, title: str | None = None) -> go.Figure:
    """Share of calls per backend, as grouped bars: `shares[stage][profile][backend]` (e.g. stages
    "before RL" and "after RL", profiles "accuracy" and "thrifty"), one group of bars per (profile,
    stage) on a two-level x axis, one bar colour per backend. Backends come in the order they first
    appear; a backend missing from a (profile, stage) that has shares is 0 there, and a profile missing
    under a stage is a gap, not a 0."""
    stages = list(shares)
    profiles = list(dict.fromkeys(p for per in shares.values() for p in per))
    backends = list(dict.fromkeys(b for per in shares.values() for mix in per.values() for b in mix))
    colors = dict(colors or tool_colors(backends))
    x = [[p for p in profiles for _ in stages], [s for _ in profiles for s in stages]]
    fig = go.Figure()
    for backend in backends:
        ys = [float(shares[s][p].get(backend, 0.0)) if p in shares[s] else None for p in profiles for s in stages]
        # the name is read from the trace (fullData), not written into the template: a name may hold "%{"
        fig.add_trace(go.Bar(name=backend, x=x, y=ys, marker_color=colors.get(backend),
                             hovertemplate="%{fullData.name}<br>%{x}: %{y:.1%}<extra></extra>"))
    fig.update_layout(barmode="group", title=title or "Share of calls per backend, per profile",
                      yaxis_title="share of calls", legend_title="backend")
    fig.update_yaxes(tickformat=".0%", range=[0, 1])
    return fig


def tool_mix_over_steps(history: Any, value: Literal["share", "calls"] = "share",
                        colors: Mapping[str, str] | None = None, title: str | None = None,
                        tools: Sequence[str] | None = None) -> go.Figure:
    """The tool-call mix at each training step, stacked: `share/<tool>` (shares of the step's calls)
    or `calls/<tool>` (calls per trajectory) from the trainer's metrics. A tool absent at a step is 0.
    With `tools`, every other name (a malformed call can name anything) is summed into "unknown"."""
    rows = _history(history)
    prefix = f"{value}/"
    seen = sorted({k[len(prefix):] for m in rows for k in m if k.startswith(prefix)})
    names = list(tools) if tools is not None else seen
    others = [t for t in seen if t not in names]
    series = {t: [float(m.get(prefix + t, 0.0)) for m in rows] for t in names}
    if others:
        series["unknown"] = [sum(float(m.get(prefix + t, 0.0)) for t in others) for m in rows]
    colors = dict(colors or tool_colors(list(series)))
    steps = _steps(rows)
    fig = go.Figure()
    for tool, ys in series.items():
        fig.add_trace(go.Scatter(name=_h(tool), x=steps, y=ys,
                                 mode="lines+markers", stackgroup="mix", line_color=colors.get(tool),
                                 hovertemplate=f"{_ht(tool)}<br>step %{{x}}: %{{y:.3g}}<extra></extra>"))
    fig.update_layout(title=title or "Tool-call mix over training", xaxis_title="step",
                      yaxis_title="share of calls" if value == "share" else "calls per trajectory",
                      legend_title="tool")
    if value == "share":
        fig.update_yaxes(tickformat=".0%")
    return fig


# ---------------------------------------------------------------------------------------------- training
def reward_curves(history: Any, terms: bool = True, profiles: bool = False, keys: Sequence[str] = (),
                  title: str | None = None) -> go.Figure:
    """Mean reward per step (the first trace, named "reward"); with `terms`, each reward term's mean
    contribution (`reward/<term>`); with `profiles`, the reward per preference profile; `keys` adds any
    other metric (e.g. "accuracy"). A metric missing at a step leaves a gap."""
    rows = _history(history)
    steps = _steps(rows)

    def line(key: str, name: str, group: str, **style: Any) -> go.Scatter:
        # Legend groups keep a term and a metric of the same name (e.g. "accuracy") apart.
        return go.Scatter(name=_h(name), x=steps, y=[m.get(key) for m in rows], mode="lines+markers",
                          connectgaps=False, legendgroup=group, legendgrouptitle_text=group,
                          hovertemplate=f"{group}: {_ht(name)}<br>step %{{x}}: %{{y:.4g}}<extra></extra>", **style)

    fig = go.Figure([line("reward", "reward", "reward", line={"width": 3, "color": "black"})])
    if terms:
        # "reward/reward" is what a reward without named terms reports: the total again.
        names = sorted({k[7:] for m in rows for k in m if k.startswith("reward/")} - {"reward"})
        fig.add_traces([line(f"reward/{n}", n, "terms", line={"dash": "dash"}) for n in names])
    if profiles:
        profs = sorted({k.split("/")[1] for m in rows for k in m if k.startswith("profile/") and k.endswith("/reward")})
        fig.add_traces([line(f"profile/{p}/reward", f"reward ({p})", "profiles", line={"dash": "dot"}) for p in profs])
    fig.add_traces([line(k, k, "metrics") for k in keys])
    fig.update_layout(title=title or "Reward over training", xaxis_title="step", yaxis_title="mean per rollout",
                      legend_title="series")
    return fig


def push_and_share(history: Any, tool: str, title: str | None = None) -> go.Figure:
    """Per preference profile, two curves over the steps: the share of the step's calls that went to
    `tool` (`profile/<p>/share/<tool>`, top) and the mean advantage of the rollouts that called it
    (`profile/<p>/advantage/<tool>`, bottom: where the update pushed). Pushes that differ by profile
    under shares that move together mean the reward carries P and the policy does not read it yet.
    A step where no rollout under a profile called `tool` shows a share of 0 and a gap in the push."""
    from plotly.subplots import make_subplots

    rows = _history(history)
    steps = _steps(rows)
    profs = sorted({k.split("/")[1] for m in rows for k in m
                    if k.startswith("profile/") and k.endswith((f"/share/{tool}", f"/advantage/{tool}"))})
    colors = {p: _PALETTE[i % len(_PALETTE)] for i, p in enumerate(profs)}
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=(f"share of calls to {_h(tool)}",
                                        f"mean advantage of rollouts calling {_h(tool)}"))
    for row, (metric, fmt) in enumerate((("share", ".0%"), ("advantage", "+.3f")), start=1):
        for p in profs:
            # a step whose rollouts under p called other tools only logs no share of `tool`: that is 0
            ys = [m.get(f"profile/{p}/{metric}/{tool}", 0.0 if metric == "share" and any(
                k.startswith(f"profile/{p}/share/") for k in m) else None) for m in rows]
            fig.add_trace(go.Scatter(name=_h(p), x=steps, y=ys, mode="lines+markers", connectgaps=False,
                                     line_color=colors[p], legendgroup=p, showlegend=row == 1,
                                     hovertemplate=f"{_ht(p)}<br>step %{{x}}: %{{y:{fmt}}}<extra></extra>"),
                          row=row, col=1)
    fig.add_hline(y=0, line_width=1, line_color=_POLICY_COLOR, row=2, col=1)
    fig.update_yaxes(tickformat=".0%", row=1, col=1)
    fig.update_xaxes(title_text="step", row=2, col=1)
    fig.update_layout(title=title or f"Where the updates push, and what is chosen: {_h(tool)}",
                      legend_title="profile")
    return fig


# ---------------------------------------------------------------------------------------------- cost vs accuracy
def _point(v: Any) -> tuple[float, float]:
    """(mean cost USD, accuracy) of an EvalReport, a list of trajectories, or a (cost, accuracy) pair."""
    metrics = getattr(v, "metrics", None)
    if metrics is not None:
        return float(metrics["overall"]["cost_usd"]), float(metrics["overall"]["accuracy"])
    if isinstance(v, Sequence) and len(v) == 2 and all(isinstance(x, (int, float)) for x in v):
        return float(v[0]), float(v[1])
    trajs = _trajectories(v)
    if not trajs:
        raise ValueError("no trajectories for a cost-accuracy point")
    return sum(t.cost_usd for t in trajs) / len(trajs), sum(t.outcome for t in trajs) / len(trajs)


def cost_accuracy(points: Mapping[str, Any], show_frontier: bool = True, log_cost: bool = False,
                  title: str | None = None) -> go.Figure:
    """Mean cost (USD per task) against accuracy, one labelled point per policy, and the Pareto
    frontier (`orchlib.evaluate.frontier`) as a line through its points in order of cost."""
    pts = {str(k): _point(v) for k, v in points.items()}
    names = list(pts)
    fig = go.Figure(go.Scatter(name="policies", x=[pts[n][0] for n in names], y=[pts[n][1] for n in names],
                               mode="markers+text", text=[_h(n) for n in names], textposition="top center",
                               marker_size=11,
                               hovertemplate="%{text}<br>$%{x:.5f} per task<br>accuracy %{y:.3f}<extra></extra>"))
    if show_frontier and pts:
        best = frontier(pts)
        fig.add_trace(go.Scatter(name="frontier", x=[pts[n][0] for n in best], y=[pts[n][1] for n in best],
                                 mode="lines", line={"dash": "dash", "color": "black"}, text=[_h(n) for n in best],
                                 hovertemplate="frontier: %{text}<extra></extra>"))
    fig.update_layout(title=title or "Cost vs accuracy", xaxis_title="mean cost per task (USD)",
                      yaxis_title="accuracy", xaxis_type="log" if log_cost else "linear")
    return fig


# ---------------------------------------------------------------------------------------------- one trajectory
def _snippet(text: str, n: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n] + "…"


def timeline(trajectory: Trajectory, colors: Mapping[str, str] | None = None, title: str | None = None) -> go.Figure:
    """One trajectory as a Gantt-like chart: per turn, the policy's generation, then its tool calls
    side by side (they run concurrently), each bar as long as its latency (s) and labelled with its
    cost (USD). A turn starts when the previous one ended (its latency: generation + slowest call).
    Error observations (malformed or rejected calls) are red ✕ marks where the calls would start."""
    t = trajectory
    tools = sorted({o.tool for turn in t.turns for o in turn.observations if o.tool})
    colors = dict(colors or tool_colors(tools))
    rows: dict[str, list[Any]] = {k: [] for k in ("y", "base", "x", "color", "cost", "hover", "tool")}
    errors: dict[str, list[Any]] = {"x": [], "y": [], "hover": []}
    start = 0.0
    for i, turn in enumerate(t.turns, 1):
        gen_row = f"turn {i} · policy"
        rows["y"].append(gen_row)
        rows["base"].append(start)
        rows["x"].append(turn.gen_latency_s)
        rows["color"].append(_POLICY_COLOR)
        rows["tool"].append("policy")
        own = turn.cost_usd - sum(o.cost_usd for o in turn.observations)
        rows["cost"].append(own)
        rows["hover"].append(f"generation: {turn.tokens_out} ids<br>{_h(_snippet(turn.text)) or '(empty)'}")
        called = start + turn.gen_latency_s
        seen: Counter[str] = Counter()
        for o in turn.observations:
            if not o.tool:  # rejected before any tool ran
                errors["x"].append(called)
                errors["y"].append(gen_row)
                errors["hover"].append(_h(f"{o.error_kind}: {_snippet(o.error or o.content)}"))
                continue
            seen[o.tool] += 1
            rows["y"].append(f"turn {i} · {_h(o.tool)}" + (f" ({seen[o.tool]})" if seen[o.tool] > 1 else ""))
            rows["base"].append(called)
            rows["x"].append(o.latency_s)
            rows["color"].append(_ERROR_COLOR if o.error else colors.get(o.tool, _POLICY_COLOR))
            rows["tool"].append(o.tool)
            rows["cost"].append(o.cost_usd)
            label = f" [{o.label}]" if o.label else ""
            status = f"error ({o.error_kind}): {_snippet(o.error or '')}" if o.error else _snippet(o.content)
            rows["hover"].append(f"{_h(o.tool)}{_h(label)}<br>{_h(status)}")
        start += turn.latency_s
    fig = go.Figure(go.Bar(name="time", orientation="h", y=rows["y"], base=rows["base"], x=rows["x"],
                           marker_color=rows["color"], text=[f"${c:.2g}" for c in rows["cost"]],
                           textposition="auto", customdata=list(zip(rows["cost"], rows["hover"])),
                           hovertemplate="%{y}<br>%{base:.3g} s → +%{x:.3g} s<br>$%{customdata[0]:.3g}"
                                         "<br>%{customdata[1]}<extra></extra>"))
    if errors["x"]:
        fig.add_trace(go.Scatter(name="error", x=errors["x"], y=errors["y"], mode="markers", text=errors["hover"],
                                 marker={"symbol": "x", "size": 12, "color": _ERROR_COLOR},
                                 hovertemplate="%{text}<extra></extra>"))
    head = f"{_h(t.task_id)} #{t.group_index}: outcome {t.outcome:g}, ${t.cost_usd:.3g}, {t.latency_s:.3g} s"
    fig.update_layout(title=title or head, xaxis_title="seconds", showlegend=bool(errors["x"]),
                      yaxis={"autorange": "reversed", "type": "category"}, bargap=0.3)
    return fig


# ---------------------------------------------------------------------------------------------- reward
def explain_figure(explanation: Explanation, labels: Sequence[str] | None = None,
                   title: str | None = None) -> go.Figure:
    """What each reward term contributes to each rollout of a group: stacked (relative) bars, one
    colour per term, negative contributions below zero, and the reward itself as a diamond. For a
    sum of terms the bars add up to the diamond; otherwise they are each term's marginal effect."""
    e = explanation
    n = len(e.reward)
    xs = [_h(x) for x in labels] if labels is not None else [f"#{i}" for i in range(n)]
    if len(xs) != n:
        raise ValueError(f"{len(xs)} labels for {n} rollouts")
    fig = go.Figure()
    for i, (term, contrib) in enumerate(e.contributions.items()):
        fig.add_trace(go.Bar(name=_h(term), x=xs, y=[float(v) for v in contrib],
                             customdata=[float(v) for v in e.values[term]], marker_color=_PALETTE[i % len(_PALETTE)],
                             hovertemplate=f"{_ht(term)}<br>%{{x}}: contributes %{{y:.4g}} (value %{{customdata:.4g}})"
                                           "<extra></extra>"))
    fig.add_trace(go.Scatter(name="reward", x=xs, y=[float(v) for v in e.reward], mode="markers",
                             marker={"symbol": "diamond", "size": 12, "color": "black"},
                             hovertemplate="reward %{y:.4g}<extra></extra>"))
    fig.update_layout(barmode="relative", title=title or "Reward by term", xaxis_title="rollout",
                      yaxis_title="contribution", legend_title="term", xaxis_type="category")
    return fig


# ---------------------------------------------------------------------------------------------- sweep of P
def sweep_figure(result: Any, latency_colour: bool = True, title: str | None = None) -> go.Figure:
    """A sweep of P (`orchlib.sweep.SweepResult`): one marker per P at (mean cost, accuracy), coloured
    by mean latency (s), hover P, accuracy, $, s and tool mix; the sweep's cost–accuracy front as a
    line; each reference (baselines, oracle) as a labelled diamond (the oracle a star)."""
    pts = list(result.points)
    hover = [f"P: {_h(p.preference.render())}<br>accuracy {p.accuracy:.3f}<br>${p.cost_usd:.5f} per task<br>"
             f"{p.latency_s:.3g} s per task<br>tool mix: {_h(p.mix())}" for p in pts]
    marker: dict[str, Any] = {"size": 12, "line": {"width": 1, "color": "black"}}
    if latency_colour:
        marker.update(color=[p.latency_s for p in pts], colorscale="Viridis", showscale=True,
                      colorbar={"title": "latency s", "x": 1.02})
    fig = go.Figure(go.Scatter(name=f"{_h(result.name)} (one point per P)", x=[p.cost_usd for p in pts],
                               y=[p.accuracy for p in pts], mode="markers", marker=marker, text=hover,
                               customdata=[_h(p.preference.name) for p in pts],
                               hovertemplate="%{text}<extra></extra>"))
    front = result.front()
    fig.add_trace(go.Scatter(name="front", x=[p.cost_usd for p in front], y=[p.accuracy for p in front],
                             mode="lines", line={"dash": "dash", "color": "black"},
                             text=[_h(p.preference.name) for p in front],
                             hovertemplate="front: %{text}<extra></extra>"))
    for i, (name, (cost, acc, lat)) in enumerate(result.references.items()):
        fig.add_trace(go.Scatter(name=_h(name), x=[cost], y=[acc], mode="markers+text", text=[_h(name)],
                                 textposition="bottom center",
                                 marker={"symbol": "star" if name == "oracle" else "diamond", "size": 14,
                                         "color": _PALETTE[(i + 1) % len(_PALETTE)]},
                                 hovertemplate=f"{_ht(name)}<br>accuracy %{{y:.3f}}<br>$%{{x:.5f}} per task<br>"
                                               f"{lat:.3g} s per task<extra></extra>"))
    hv = result.hypervolumes()
    ratio = f" · hypervolume {hv[result.name]:.3g}" + (f" (oracle {hv['oracle']:.3g})" if "oracle" in hv else "")
    fig.update_layout(title=title or f"{_h(result.name)}: cost vs accuracy under {len(pts)} preferences{ratio}",
                      xaxis_title="mean cost per task (USD)", yaxis_title="accuracy",
                      legend={"orientation": "h", "y": -0.2})
    return fig


# ---------------------------------------------------------------------------------------------- ledger
def ledger_figure(ledger: Any, title: str | None = None) -> go.Figure:
    """A run's bill (`orchlib.ledger.Ledger`) as stacked bars: one bar per payer (the policy's own
    tokens, each tool, the user), one segment per token class (input, cached, output, reasoning, per
    call, per second, other), USD summed over the episodes."""
    totals = ledger.by_payer_and_class()
    payers = list(totals)
    classes = [c for c in ledger.CLASSES if any(totals[p].get(c, 0.0) for p in payers)]
    fig = go.Figure()
    for i, cls in enumerate(classes):
        fig.add_trace(go.Bar(name=cls, x=[_h(p) for p in payers], y=[totals[p].get(cls, 0.0) for p in payers],
                             marker_color=_PALETTE[i % len(_PALETTE)],
                             hovertemplate=f"%{{x}} · {cls}: $%{{y:.5g}}<extra></extra>"))
    fig.update_layout(barmode="relative", title=title or f"Where the money went: {len(ledger.episodes)} episodes",
                      xaxis_title="payer", yaxis_title="USD", legend_title="token class", xaxis_type="category")
    return fig
