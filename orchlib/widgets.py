"""Notebook panels over the public API: `TrainerPanel`, `RewardPlayground`, `ToolCardEditor`, `UserPanel`.

Each is an ipywidgets `VBox`: make one the last expression of a cell to show it. They call what a
script calls (`Trainer.step`, `Reward.from_string` / `explain` / `latex`, `save_card`) and show the
figures of `orchlib.viz`, so whatever a panel shows can be reproduced without it.

    panel = TrainerPanel(trainer)            # Step, Run N, Pause; live charts; trajectory browser; P sliders
    RewardPlayground("rewards/toolorchestra.yaml")
    ToolCardEditor("toolcards/calculator.yaml")
    UserPanel(env, engine, task=...)         # a person types the user's turns while the orchestrator works

Charts are plotly figures shown through an `Output` widget as plotly's own mime bundle
(`application/vnd.plotly.v1+json`, rendered by the jupyterlab-plotly extension that ships with
plotly). `go.FigureWidget` is not used: from plotly 6 on it needs the `anywidget` package, which is
not a dependency; redrawing a small figure after each step costs nothing next to the step itself.

Threads: `TrainerPanel.run(n)` trains in a background thread, one `trainer.step()` at a time under a
lock, and checks the pause flag between steps, so the notebook stays usable and Pause takes effect
after at most one step. Widgets are updated from that thread (ipywidgets sends the updates over the
kernel's IOPub channel, which any thread may use). `UserPanel` runs its episode the same way: the
rollout waits in its thread for the person's next message (`PersonUser.reply` awaits a future that
the Send button resolves), while the kernel goes on serving the buttons.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import html
import json
import os
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Sequence

import ipywidgets as widgets
import plotly.graph_objects as go
from pydantic import ValidationError

from orchlib import viz
from orchlib.cards import CardError, ToolCard, load_card, save_card
from orchlib.reward import Reward
from orchlib.reward.breakdown import breakdown
from orchlib.tasks import PROFILES, STOP_MARKER, Preference, Task, UserSpec
from orchlib.tools import Toolbox
from orchlib.trajectory import Trajectory, UserTurn, write_jsonl

__all__ = ["TrainerPanel", "RewardPlayground", "ToolCardEditor", "UserPanel", "PersonUser", "trajectory_html",
           "sample_group", "reward_text", "breakdown_html"]

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
    parts = [f"<div>{head}</div>", f"<div style='margin:4px 0'><b>user</b>: {_e(t.prompt)}</div>"]
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
            parts.append(f"<div style='margin-left:1.5em'>← <b>{_e(o.tool or 'orchestrator')}</b>{label} · "
                         f"{_money(o.cost_usd)} · {o.latency_s:.3g} s{' · final' if o.final else ''}{body}</div>")
    score = "" if reward is None else f" · reward {reward:.4g}"
    parts.append(f"<div style='margin-top:4px'><b>answer</b>: {_e(t.final_answer)} · outcome {t.outcome:g} · "
                 f"finish: {_e(t.finish_reason)} · total {_money(t.cost_usd)}, {t.latency_s:.3g} s{score}</div>")
    return "<div class='orchlib-trajectory'>" + "".join(parts) + "</div>"


# ---------------------------------------------------------------------------------------------- trainer panel
def _paired_profiles(trainer) -> tuple[str, ...]:
    """The profiles the trainer's sampler repeats each task under (it then sets P itself), else ()."""
    from orchlib.experiments.variants import PairedProfiles  # here: a panel without a trainer needs no torch

    sampler = trainer.hooks.sampler
    return sampler.profiles if isinstance(sampler, PairedProfiles) else ()


class TrainerPanel(widgets.VBox):
    """Drive a `Trainer` from a notebook: Step, Run N and Pause; reward and tool-mix charts redrawn
    after every step; a browser over the last steps' trajectories; preference sliders.

    Preference sliders set P for the *next* steps: the panel replaces `trainer.tasks` with copies of
    the tasks it was given, each carrying the sliders' P (`task.model_copy(update={"preference": P})`),
    since the trainer draws each step's tasks from `trainer.tasks`. A step already running keeps its
    P. "Tasks' own P" puts the original tasks back. The same is `panel.set_preference(P or None)`.
    With paired profiles (`VariantConfig.paired_profiles`) the trainer sets P itself, so the sliders are
    disabled.

    `background=False` runs steps in the calling thread (scripts, tests); by default they run in a
    background thread (see the module docstring) and `wait()` blocks until the run ends.
    """

    def __init__(self, trainer, *, run_steps: int = 10, keep_reports: int = 20, background: bool = True):
        self.trainer = trainer
        self.background = background
        self.keep_reports = keep_reports
        self.reports: list = []            # the last `keep_reports` StepReports, for the browser
        self.error: BaseException | None = None
        self.error_traceback = ""
        self.preference: Preference | None = None   # None: every task keeps its own P
        self.reward_figure = viz.reward_curves(trainer.history)
        self.mix_figure = viz.tool_mix_over_steps(trainer.history)
        self._tasks = list(trainer.tasks)
        self._step_lock = threading.Lock()  # one trainer.step() at a time, whoever asks
        self._ui_lock = threading.RLock()   # the worker and the kernel thread both redraw
        self._pause = threading.Event()
        self._worker: threading.Thread | None = None
        self._state = "idle"
        self._quiet = False                 # set while the panel itself refills the rollout menu
        self._syncing = False               # set while set_preference moves the sliders

        self.step_button = widgets.Button(description="Step", icon="step-forward", tooltip="one GRPO step")
        self.run_button = widgets.Button(description="Run", icon="play", tooltip="run N steps")
        self.n_steps = widgets.BoundedIntText(value=run_steps, min=1, max=100_000, description="N",
                                              layout=widgets.Layout(width="130px"))
        self.pause_button = widgets.Button(description="Pause", icon="pause", disabled=True,
                                           tooltip="stop after the step that is running")
        for name in ("step", "run", "pause"):
            getattr(self, f"{name}_button").add_class(f"orchlib-{name}")
        self.status = widgets.HTML()
        self.reward_chart = widgets.Output(layout=widgets.Layout(width="50%"))
        self.mix_chart = widgets.Output(layout=widgets.Layout(width="50%"))
        self.reward_chart.add_class("orchlib-reward-chart")
        self.mix_chart.add_class("orchlib-mix-chart")
        self.step_picker = widgets.Dropdown(options=[], description="step", layout=widgets.Layout(width="180px"))
        self.rollout_picker = widgets.Dropdown(options=[], description="rollout", layout=widgets.Layout(width="520px"))
        self.conversation = widgets.HTML()
        self.timeline_chart = widgets.Output()
        self.sliders = self._make_sliders()
        self._slider_start = {k: s.value for k, s in self.sliders.items()}  # where "Tasks' own P" puts them back
        self.own_p_button = widgets.Button(description="Tasks' own P", tooltip="each task keeps the P it came with")
        self.preference_label = widgets.HTML()
        self.preference_label.add_class("orchlib-preference")

        self.step_button.on_click(lambda _: self.run(1))
        self.run_button.on_click(lambda _: self.run(self.n_steps.value))
        self.pause_button.on_click(lambda _: self.pause())
        self.own_p_button.on_click(lambda _: self.set_preference(None))
        self.step_picker.observe(self._on_step_picked, names="value")
        self.rollout_picker.observe(self._on_rollout_picked, names="value")
        for s in self.sliders.values():
            s.observe(self._on_slider, names="value")
        if _paired_profiles(trainer):
            for s in self.sliders.values():
                s.disabled = True
            self.own_p_button.disabled = True

        controls = widgets.HBox([self.step_button, self.n_steps, self.run_button, self.pause_button])
        prefs = widgets.VBox([widgets.HTML("<b>Preference P for the next steps</b>"),
                              widgets.HBox(list(self.sliders.values()), layout=widgets.Layout(flex_flow="row wrap")),
                              widgets.HBox([self.own_p_button, self.preference_label])])
        pickers = widgets.HBox([self.step_picker, self.rollout_picker])
        browser = widgets.VBox([widgets.HTML("<b>Trajectories</b>"), pickers, self.conversation, self.timeline_chart])
        super().__init__([controls, self.status, widgets.HBox([self.reward_chart, self.mix_chart]), prefs, browser])
        self.add_class("orchlib-trainer-panel")
        self._redraw()

    # ------------------------------------------------------------------ what a script calls
    @property
    def running(self) -> bool:
        return self._worker is not None and self._worker.is_alive()

    def step(self):
        """One `trainer.step()` now, in this thread (waits for a step already running); redraws."""
        with self._step_lock:
            report = self.trainer.step()
        self._record(report)
        if self._state != "running":  # a step asked for outside a run: the panel is idle again
            self._set_state("idle")
        return report

    def run(self, n: int) -> threading.Thread | None:
        """Run `n` steps, pausable between steps. Returns at once with the background thread (or after
        the steps when `background=False`); a second run while one is going is ignored."""
        if self.running:
            return self._worker
        self._pause.clear()
        self.error, self.error_traceback = None, ""
        self._set_state("running")
        if not self.background:
            self._loop(int(n))
            return None
        self._worker = threading.Thread(target=self._loop, args=(int(n),), name="orchlib-trainer-panel", daemon=True)
        self._worker.start()
        return self._worker

    def pause(self) -> None:
        """Stop the run after the step that is running (the UI never waits longer than one step)."""
        self._pause.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the background run ends; False if it is still running after `timeout` s."""
        worker = self._worker
        if worker is not None:
            worker.join(timeout)
        return not self.running

    def set_preference(self, P: Preference | None) -> None:
        """Every task carries `P` from the next step on (None: each task's own P again); the sliders
        move to P's values (within their ranges), or back to where they started for None, so that
        nudging one slider later does not bring back the rest of an abandoned P."""
        self.preference = P
        if P is None:
            self.trainer.tasks = list(self._tasks)
            values = self._slider_start
        else:
            self.trainer.tasks = [t.model_copy(update={"preference": P}) for t in self._tasks]
            values = {k: P.tools.get(k[6:], 0.0) if k.startswith("tools/") else getattr(P, k) for k in self.sliders}
        self._syncing = True  # moving the sliders must not set a slider-made P in turn
        try:
            for key, s in self.sliders.items():
                s.value = min(max(float(values[key]), s.min), s.max)
        finally:
            self._syncing = False
        self._show_preference()

    # ------------------------------------------------------------------ the run
    def _loop(self, n: int) -> None:
        done = 0
        try:
            while done < n and not self._pause.is_set():
                self.step()
                done += 1
        except Exception as e:  # shown in the panel and kept on it, never swallowed
            self.error, self.error_traceback = e, traceback.format_exc()
        finally:
            self._set_state("error" if self.error else "paused" if done < n else "idle")

    def _record(self, report) -> None:
        with self._ui_lock:
            self.reports = (self.reports + [report])[-self.keep_reports:]
            self._redraw(new_report=True)

    # ------------------------------------------------------------------ drawing
    def _set_state(self, state: str) -> None:
        with self._ui_lock:
            self._state = state
            busy = state == "running"
            self.step_button.disabled = self.run_button.disabled = busy
            self.pause_button.disabled = not busy
            self._draw_status()

    def _draw_status(self) -> None:
        h = self.trainer.history
        step = self.trainer.step_count
        last = h[-1] if h else {}
        nums = (f" · reward {last['reward']:.3f} · accuracy {last.get('accuracy', 0):.2f} · "
                f"{_money(last.get('cost_usd', 0))}/rollout · {last.get('time/step', 0):.1f} s/step") if last else ""
        err = (f"<div style='{_ERROR_STYLE}'>step failed: {_e(type(self.error).__name__)}: {_e(self.error)}</div>"
               if self.error else "")
        self.status.value = (f"<div class='orchlib-status' data-step='{step}' data-points='{len(h)}' "
                             f"data-state='{self._state}'><b>step {step}</b>{nums} · {self._state}</div>{err}")

    def _redraw(self, new_report: bool = False) -> None:
        with self._ui_lock:
            self._draw_status()
            self.reward_figure = viz.reward_curves(self.trainer.history, keys=("accuracy",))
            self.mix_figure = viz.tool_mix_over_steps(self.trainer.history)
            for fig in (self.reward_figure, self.mix_figure):
                fig.update_layout(height=320, margin={"l": 50, "r": 10, "t": 40, "b": 40})
            _show(self.reward_chart, self.reward_figure)
            _show(self.mix_chart, self.mix_figure)
            self._show_preference()
            if new_report:
                follow = self.step_picker.value in (None, *[o[1] for o in self.step_picker.options[-1:]])
                options = [(f"step {r.step}", r.step) for r in self.reports]
                current = self.step_picker.value
                self.step_picker.options = options
                if follow or current not in [o[1] for o in options]:
                    self.step_picker.value = options[-1][1]
                else:
                    self.step_picker.value = current

    def _report(self, step: int | None):
        return next((r for r in self.reports if r.step == step), None)

    def _on_step_picked(self, change) -> None:
        with self._ui_lock:
            report = self._report(change["new"])
            if report is None:
                self.rollout_picker.options = []
                return
            rewards = list(report.rewards) + [None] * (len(report.trajectories) - len(report.rewards))
            self._quiet = True
            try:
                self.rollout_picker.options = [
                    (f"#{i} {t.task_id} g{t.group_index} · reward {r if r is None else round(r, 3)} · "
                     f"outcome {t.outcome:g} · {t.finish_reason}", i)
                    for i, (t, r) in enumerate(zip(report.trajectories, rewards))]
                if report.trajectories:
                    self.rollout_picker.value = 0
            finally:
                self._quiet = False
            if report.trajectories:
                self._show_rollout(report, 0)

    def _on_rollout_picked(self, change) -> None:
        with self._ui_lock:
            report = self._report(self.step_picker.value)
            if not self._quiet and report is not None and change["new"] is not None:
                self._show_rollout(report, change["new"])

    def _show_rollout(self, report, i: int) -> None:
        t = report.trajectories[i]
        r = report.rewards[i] if i < len(report.rewards) else None
        self.conversation.value = trajectory_html(t, r)
        fig = viz.timeline(t)
        fig.update_layout(height=120 + 28 * len(fig.data[0].y), margin={"l": 10, "r": 10, "t": 40, "b": 40})
        _show(self.timeline_chart, fig)

    # ------------------------------------------------------------------ preference sliders
    def _make_sliders(self) -> dict[str, widgets.FloatSlider]:
        first = next((t.preference for t in self._tasks if t.preference is not None), None) or Preference()
        offered = sorted({n for t in self._tasks for n in (t.tools if t.tools is not None
                                                             else self.trainer.toolbox.names)})
        style = {"description_width": "70px"}
        lay = widgets.Layout(width="300px")

        def slider(desc: str, value: float, lo: float, hi: float) -> widgets.FloatSlider:
            return widgets.FloatSlider(value=value, min=lo, max=hi, step=0.05, description=desc,
                                       continuous_update=False, style=style, layout=lay, readout_format=".2f")

        out = {"outcome": slider("accuracy", first.outcome, 0, 2), "cost": slider("cost", first.cost, 0, 2),
               "latency": slider("latency", first.latency, 0, 2)}
        for tool in offered:  # ToolOrchestra's P also weighs each tool's calls, positive or negative
            out[f"tools/{tool}"] = slider(tool, first.tools.get(tool, 0.0), -1, 1)
        return out

    def slider_preference(self) -> Preference:
        """The P the sliders show."""
        v = {k: float(s.value) for k, s in self.sliders.items()}
        tools = {k.split("/", 1)[1]: w for k, w in v.items() if k.startswith("tools/") and w != 0}
        return Preference(name="panel", outcome=v["outcome"], cost=v["cost"], latency=v["latency"], tools=tools)

    def _on_slider(self, change) -> None:
        if not self._syncing:
            self.set_preference(self.slider_preference())

    def _show_preference(self) -> None:
        if _paired_profiles(self.trainer):
            text = f"set by the trainer: paired profiles {', '.join(_paired_profiles(self.trainer))}"
        elif self.preference is None:
            text = "each task's own P"
        else:
            text = self.preference.render()
        self.preference_label.value = f"<span class='orchlib-p'>{_e(text)}</span>"


# ---------------------------------------------------------------------------------------------- reward playground
def sample_group() -> list[Trajectory]:
    """Four made-up rollouts of one task that differ in every way a reward reads: right or wrong,
    cheap or dear, fast or slow, and which tools they called. For trying rewards out."""
    rows = [(1.0, 0.0002, 1.5, {"calculator": 1}), (1.0, 0.0150, 32.0, {"generalist": 1}),
            (0.0, 0.0004, 3.0, {"specialist": 1}), (1.0, 0.0008, 6.0, {"calculator": 1, "specialist": 1})]
    return [Trajectory(task_id="sample", group_index=i, outcome=o, cost_usd=c, latency_s=s, calls=calls,
                       finish_reason="final_tool") for i, (o, c, s, calls) in enumerate(rows)]


def _yaml_value(expr: str) -> str:
    # Plain YAML unless the expression holds something YAML would read differently; then JSON quotes.
    risky = ": " in expr or " #" in expr or expr[:1] in "!&*{}[]|>'\"%@`,?:#"
    return json.dumps(expr) if risky else expr


def reward_text(reward: Reward) -> str:
    """The editable text of a reward: its expression alone, or `name:`, `terms:` and `reward:` when it
    has named terms (its default P stays outside the text, with the playground)."""
    if not reward.term_sources:
        return reward.source
    lines = [f"name: {_yaml_value(reward.name)}", "terms:"]
    lines += [f"  {k}: {_yaml_value(v)}" for k, v in reward.term_sources.items()]
    return "\n".join(lines + [f"reward: {_yaml_value(reward.source)}"])


def _as_reward(reward: Reward | str | os.PathLike) -> Reward:
    if isinstance(reward, Reward):
        return reward
    if isinstance(reward, os.PathLike) or (isinstance(reward, str) and reward.endswith((".yaml", ".yml"))):
        return Reward.load(reward)
    return Reward.from_string(str(reward))


class RewardPlayground(widgets.VBox):
    """Edit a reward and see, at once, its LaTeX and what each term contributes on a sample group.

    The text is a single expression or the `terms:` / `reward:` part of a reward file
    (docs/rewards.md). A syntax error is shown under the editor with the line and a caret at the
    column; the last reward that compiled stays in `.reward`. P is the reward's own default P, or a
    named profile picked in the menu.
    """

    def __init__(self, reward: Reward | str | os.PathLike = "outcome", group: Sequence[Trajectory] | None = None,
                 P: Preference | None = None):
        self.reward = _as_reward(reward)
        self.group = list(group) if group is not None else sample_group()
        self.P = P
        self.error: Exception | None = None
        self.explanation = None
        self.figure: go.Figure | None = None
        self._default_P = P or self.reward.preference
        self.editor = widgets.Textarea(value=reward_text(self.reward), continuous_update=False,
                                       layout=widgets.Layout(width="100%", height="140px"))
        self.evaluate_button = widgets.Button(description="Evaluate", icon="check")
        choices = [(f"P: {self._default_P.name}", "")] + [(f"P: {n}", n) for n in PROFILES]
        self.profile = widgets.Dropdown(options=choices, layout=widgets.Layout(width="200px"))
        self.message = widgets.HTML()
        self.message.add_class("orchlib-reward-message")
        self.formula = widgets.HTMLMath()
        self.table = widgets.HTML()
        self.breakdown_box = widgets.HTML()
        self.breakdown_box.add_class("orchlib-reward-breakdown")
        self.breakdown = None
        self.chart = widgets.Output()
        self.editor.observe(lambda c: self.set_text(c["new"]), names="value")
        self.evaluate_button.on_click(lambda _: self.set_text(self.editor.value))
        self.profile.observe(self._on_profile, names="value")
        super().__init__([self.editor, widgets.HBox([self.evaluate_button, self.profile]), self.message,
                          self.formula, self.table, self.breakdown_box, self.chart])
        self.add_class("orchlib-reward-playground")
        self._refresh()

    def set_text(self, text: str) -> bool:
        """Parse `text` as the reward; True when it compiled and evaluated (else the error is shown)."""
        if self.editor.value != text:
            self.editor.value = text  # the observer calls back here with the same text
            return self.error is None
        try:
            reward = Reward.from_string(text)
            reward(self.group, P=self._P())  # evaluate too: a reward that reads a missing P entry fails here
        except ValueError as e:  # RewardSyntaxError, RewardFileError, RewardValueError
            self.error = e
            self.message.value = _error_html(text, e)
            return False
        self.reward, self.error = reward, None
        self.message.value = ""
        self._refresh()
        return True

    def _P(self) -> Preference:
        name = self.profile.value
        return PROFILES[name] if name else self._default_P

    def _on_profile(self, change) -> None:
        if self.error is None:
            self._refresh()

    def _refresh(self) -> None:
        r, P = self.reward, self._P()
        terms = "".join(f"$$\\mathrm{{{name.replace('_', chr(92) + '_')}}} = {tex}$$"
                        for name, tex in r.term_latex().items())
        self.formula.value = f"$$R = {r.latex()}$$" + (f"<details><summary>terms</summary>{terms}</details>"
                                                        if terms else "")
        self.explanation = r.explain(self.group, P=P)
        self.table.value = _explain_table(self.explanation, self.group)
        self.breakdown = breakdown(r, [self.group], P)
        self.breakdown_box.value = breakdown_html(self.breakdown)
        self.figure = viz.explain_figure(self.explanation, labels=[f"#{t.group_index}" for t in self.group],
                                         title=f"Each term's contribution under P = {P.name}")
        self.figure.update_layout(height=340)
        _show(self.chart, self.figure)


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
        calls = ", ".join(f"{k}×{v}" for k, v in sorted(t.calls.items())) or "-"
        cells = [f"#{t.group_index}", f"{t.outcome:g}", f"{t.cost_usd:.4g}", f"{t.latency_s:.3g}", calls]
        cells += [f"{e.contributions[n][i]:.4g}" for n in terms] + [f"<b>{e.reward[i]:.4g}</b>"]
        rows.append("<tr>" + "".join(f"<td>{c if c.startswith('<b>') else _e(c)}</td>" for c in cells) + "</tr>")
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


# ---------------------------------------------------------------------------------------------- card editor
_PRICE_FIELDS = ("per_call", "per_m_input", "per_m_output", "per_second")


class ToolCardEditor(widgets.VBox):
    """View a tool card, edit its description, price and declared latency, validate, save.

    Validation is the card's own (field types and ranges, JSON Schema) plus building the tool, which
    checks the backend settings; each problem names the file, line and field. Saving goes through
    `save_card`, so a card read from a file keeps that file's comments and key order.
    """

    def __init__(self, card: ToolCard | str | os.PathLike, path: str | os.PathLike | None = None):
        self.card = card if isinstance(card, ToolCard) else load_card(card)
        self._loaded = self.card
        self.problems: list[CardError] = []
        default = path or self.card.source or f"{self.card.name}.yaml"
        self.header = widgets.HTML(self._header())
        self.description = widgets.Textarea(value=self.card.description, description="description",
                                            layout=widgets.Layout(width="100%", height="110px"))
        self.price = {f: widgets.FloatText(value=getattr(self.card.price, f), description=f,
                                           layout=widgets.Layout(width="240px")) for f in _PRICE_FIELDS}
        self.latency = widgets.FloatText(value=self.card.latency.seconds, description="latency s",
                                         layout=widgets.Layout(width="240px"))
        self.path = widgets.Text(value=str(default), description="save to", layout=widgets.Layout(width="100%"))
        self.validate_button = widgets.Button(description="Validate", icon="check")
        self.save_button = widgets.Button(description="Save", icon="save")
        self.message = widgets.HTML()
        self.message.add_class("orchlib-card-message")
        self.preview = widgets.HTML(self._preview(self.card))
        self.validate_button.on_click(lambda _: self.validate())
        self.save_button.on_click(lambda _: self.save())
        super().__init__([self.header, self.description, widgets.HTML("<b>price (USD)</b>"),
                          widgets.HBox(list(self.price.values()), layout=widgets.Layout(flex_flow="row wrap")),
                          self.latency, self.path, widgets.HBox([self.validate_button, self.save_button]),
                          self.message, self.preview])
        self.add_class("orchlib-card-editor")

    def _header(self) -> str:
        c = self.card
        args = ", ".join(c.parameters.get("properties", {})) or "none"
        src = f" · {_e(c.source)}" if c.source else ""
        return (f"<b>{_e(c.name)}</b> · {_e(c.kind)}{' · final' if c.final else ''} · arguments: {_e(args)}"
                f" · tags: {_e(', '.join(c.tags) or '-')}{src}")

    @staticmethod
    def _preview(card: ToolCard) -> str:
        spec = json.dumps(card.to_openai(with_costs=True), indent=2, ensure_ascii=False)
        return f"<details><summary>what the orchestrator reads</summary><pre>{_e(spec)}</pre></details>"

    def edited(self) -> ToolCard:
        """The card with the editor's values; raises CardError naming the first problem."""
        problems, card = self._check()
        if problems:
            raise problems[0]
        return card

    def _check(self) -> tuple[list[CardError], ToolCard | None]:
        base = self._loaded
        data = base.model_dump()
        data["description"] = self.description.value
        data["price"] = {f: self.price[f].value for f in _PRICE_FIELDS}
        data["latency"] = {**data["latency"], "seconds": self.latency.value}
        try:
            checked = ToolCard.model_validate(data)
        except ValidationError as e:
            return base.errors_from(e), None  # lines of the file the card came from
        # model_copy keeps where the card was read from, so saving keeps the file's comments.
        card = base.model_copy(update={"description": checked.description, "price": checked.price,
                                       "latency": checked.latency})
        try:
            from orchlib.tools import build_tool

            build_tool(card)
        except CardError as e:
            return [e], None
        return [], card

    def validate(self) -> list[CardError]:
        """Check the edited values; shows and returns the problems (none: the card is updated)."""
        self.problems, card = self._check()
        if self.problems:
            items = "".join(f"<li>{_e(p)}</li>" for p in self.problems)
            self.message.value = f"<div class='orchlib-error' style='{_ERROR_STYLE}'>invalid:<ul>{items}</ul></div>"
        else:
            self.card = card
            self.message.value = "<div style='color:#1b5e20'>valid</div>"
            self.preview.value = self._preview(card)
        return self.problems

    def save(self, path: str | os.PathLike | None = None) -> Path | None:
        """Validate, then write the card (to `path`, else the path field); None when it is invalid."""
        if self.validate():
            return None
        target = Path(path or self.path.value).expanduser()
        try:
            written = save_card(self.card, target)
        except OSError as e:
            self.message.value = f"<div class='orchlib-error' style='{_ERROR_STYLE}'>cannot save: {_e(e)}</div>"
            return None
        self.message.value = f"<div style='color:#1b5e20'>saved to {_e(written)}</div>"
        return written


# ---------------------------------------------------------------------------------------------- be the user
class PersonUser:
    """A person in the user's seat: `reply` (awaited by the rollout) waits until `answer(text)` is
    called — from the panel's Send button, or from code — and returns what they wrote as the user's
    turn (label "person", free; its latency is the seconds the person took, counted apart as every
    user's is). A reply holding `stop`, or `answer(..., done=True)`, ends the conversation.
    `on_ask(messages)` is called, in the rollout's thread, each time the user is asked."""

    label = "person"

    def __init__(self, on_ask=None, stop: str = STOP_MARKER):
        self.on_ask, self.stop = on_ask, stop
        self.asked = 0
        self._lock = threading.Lock()
        self._pending: concurrent.futures.Future | None = None

    @property
    def waiting(self) -> bool:
        """Whether the rollout is waiting for the person's next message."""
        with self._lock:
            return self._pending is not None and not self._pending.done()

    async def reply(self, messages: list[dict[str, Any]]) -> UserTurn:
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            self._pending = future
        self.asked += 1
        if self.on_ask is not None:
            self.on_ask(messages)
        t0 = time.perf_counter()
        text, done = await asyncio.wrap_future(future)  # resolved from the kernel's thread by answer()
        if self.stop in text:
            text, done = text.replace(self.stop, "").strip(), True
        return UserTurn(text=text, done=done, latency_s=time.perf_counter() - t0, label=self.label)

    def answer(self, text: str, done: bool = False) -> bool:
        """Give the waiting rollout the user's message; False (nothing sent) when it is not waiting."""
        with self._lock:
            future, self._pending = self._pending, None
        if future is None or future.done():
            return False
        future.set_result((str(text), bool(done)))
        return True


class _WatchedToolbox(Toolbox):
    """The same tools; every observation is also handed to `seen(call, observation)` as it comes."""

    def __init__(self, inner: Toolbox, seen):
        super().__init__(list(inner))
        self._seen = seen

    async def call(self, call, context=None, **kw):
        obs = await super().call(call, context, **kw)
        self._seen(call, obs)
        return obs


class UserPanel(widgets.VBox):
    """Be the user of a task: `UserPanel(env, engine, task=None)` — the orchestrator (`engine`: the tiny
    policy, a trained one, an API policy) works on `task` (default: the environment's first test task)
    with the environment's tools and prompt settings, in a background thread; when it replies without
    calling a tool, the panel waits for you. Type the user's message and press **Send**; **End** ends the
    conversation (as a user who writes `###STOP###`). The timeline grows as the conversation goes: each
    tool call with what it returned, its cost (USD) and latency (s), the orchestrator's replies and
    yours; when the episode ends, its totals and `viz.timeline`. **New conversation** starts over.

    The episode is an ordinary `rollout` of a copy of `task` whose user is the panel's `PersonUser`,
    so `panel.trajectory` is a Trajectory like any other: `save(path)` writes it (JSONL) and
    `replay_task()` is the task with a replayed user (`UserSpec(kind="replayed")`, the turns you
    typed, as `ReplayedUser` replays them). From code: `send(text)`, `end()`, `wait_for_turn()` (until
    the panel waits for you or the episode ends), `wait()` (until it ends).
    """

    def __init__(self, env, *older, task: Task | None = None, config=None, seed: int | None = 0,
                 start: bool = True):
        from orchlib.env import Environment, bind_older
        from orchlib.rollout import RolloutConfig

        if isinstance(env, Environment):  # UserPanel(env, engine, task=..., config=...)
            args = bind_older("UserPanel(env, ...)", ("engine", "config"), older, {"config": config}, {"config": None})
            if "engine" not in args:
                raise TypeError("UserPanel(env, engine, task=...): the engine that orchestrates is missing")
            pool = list(env.test) or list(env.train)
            self.task, self.toolbox, self.engine = task or pool[0], env.tools, args["engine"]
            self.config = env.rollout_config(args["config"] or RolloutConfig(max_turns=8))
        else:  # the older UserPanel(task, toolbox, engine, config)
            args = bind_older("UserPanel(task, ...)", ("toolbox", "engine", "config"), older, {"config": config},
                              {"config": None})
            if "engine" not in args or task is not None:
                raise TypeError("UserPanel takes an Environment and an engine, UserPanel(env, engine, task=...), "
                                "or the older UserPanel(task, toolbox, engine)")
            self.task, self.toolbox, self.engine = env, args["toolbox"], args["engine"]
            self.config = args["config"] or RolloutConfig(max_turns=8)
        self.seed = seed
        self.trajectory: Trajectory | None = None
        self.error: BaseException | None = None
        self.error_traceback = ""
        self.user: PersonUser | None = None
        self.events: list[dict[str, Any]] = []   # the timeline's rows, in order
        self._state = "idle"
        self._ui_lock = threading.RLock()
        self._changed = threading.Condition(self._ui_lock)
        self._worker: threading.Thread | None = None
        self._t0 = 0.0

        self.header = widgets.HTML(self._header())
        self.status = widgets.HTML()
        self.timeline = widgets.HTML()
        self.timeline.add_class("orchlib-user-timeline-box")
        self.text = widgets.Text(placeholder="your message as the user", layout=widgets.Layout(width="60%"))
        self.text.add_class("orchlib-user-text")
        self.send_button = widgets.Button(description="Send", icon="paper-plane", tooltip="send as the user")
        self.end_button = widgets.Button(description="End", icon="stop", tooltip="end the conversation")
        self.restart_button = widgets.Button(description="New conversation", icon="refresh")
        for name in ("send", "end", "restart"):
            getattr(self, f"{name}_button").add_class(f"orchlib-user-{name}")
        self.chart = widgets.Output()
        self.send_button.on_click(lambda _: self.send())
        self.end_button.on_click(lambda _: self.end())
        self.restart_button.on_click(lambda _: self.start())
        controls = widgets.HBox([self.text, self.send_button, self.end_button, self.restart_button])
        super().__init__([self.header, self.status, self.timeline, controls, self.chart])
        self.add_class("orchlib-user-panel")
        self._draw()
        if start:
            self.start()

    # ------------------------------------------------------------------ what a script calls
    @property
    def state(self) -> str:
        """idle, working (the orchestrator's turn), waiting (yours), done or error."""
        return self._state

    @property
    def running(self) -> bool:
        return self._worker is not None and self._worker.is_alive()

    def start(self) -> None:
        """A new conversation (ignored while one is going on)."""
        if self.running:
            return
        with self._ui_lock:
            self.trajectory, self.error, self.error_traceback = None, None, ""
            self.events = []
            self.user = PersonUser(on_ask=self._on_ask)
            self._t0 = time.perf_counter()
            self.chart.outputs = ()
            self._set_state("working")
        self._worker = threading.Thread(target=self._run, name="orchlib-user-panel", daemon=True)
        self._worker.start()

    def send(self, text: str | None = None) -> bool:
        """Send `text` (default: the text box's) as the user's message; False when the panel is not
        waiting for you or the text is empty (nothing is sent)."""
        text = self.text.value if text is None else text
        if not text.strip() or self.user is None or not self.user.waiting:
            with self._ui_lock:
                self._draw_status("type a message first" if not text.strip() else "the orchestrator is working: "
                                  "wait for its reply")
            return False
        with self._ui_lock:
            self._add("you", text)
            self.text.value = ""
            self._set_state("working")
        if not self.user.answer(text):
            return False
        return True

    def end(self) -> bool:
        """End the conversation at the user's next turn (as writing the stop marker does)."""
        if self.user is None or not self.user.waiting:
            return False
        with self._ui_lock:
            self._add("you", "(ends the conversation)")
            self._set_state("working")
        return self.user.answer("", done=True)

    def wait_for_turn(self, timeout: float | None = None) -> str:
        """Block until the panel waits for your message or the episode is over; returns the state."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while self._state == "working":
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._changed.wait(left)
            return self._state

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the episode ends; False if it is still going after `timeout` s."""
        worker = self._worker
        if worker is not None:
            worker.join(timeout)
        return not self.running

    def save(self, path: str | os.PathLike) -> Path:
        """The finished conversation as a one-line trajectories JSONL file (written atomically)."""
        if self.trajectory is None:
            raise RuntimeError("no finished conversation to save yet")
        return write_jsonl([self.trajectory], path)

    def replay_task(self) -> Task:
        """The task with the turns you typed as a replayed user, for `rollout` to replay them."""
        if self.trajectory is None:
            raise RuntimeError("no finished conversation to replay yet")
        turns = [t.user for t in self.trajectory.turns if t.user is not None]
        if not turns:
            raise RuntimeError("the conversation ended before the user was asked anything")
        return self.task.model_copy(update={"user": UserSpec(kind="replayed", turns=turns)})

    # ------------------------------------------------------------------ the episode
    def _run(self) -> None:
        from orchlib.rollout import rollout

        user = self.user
        task = self.task.model_copy(update={"user": lambda _task: user})
        try:
            trajectory = rollout([task], _WatchedToolbox(self.toolbox, self._on_call), self.engine, self.config,
                                 seed=self.seed)[0]
        except Exception as e:  # shown on the panel and kept, never swallowed
            with self._ui_lock:
                self.error, self.error_traceback = e, traceback.format_exc()
                self._set_state("error")
            return
        with self._ui_lock:
            self.trajectory = trajectory
            self._add("end", f"finish: {trajectory.finish_reason} · outcome {trajectory.outcome:g} · "
                             f"{len(trajectory.turns)} turns", cost=trajectory.cost_usd, seconds=trajectory.latency_s)
            fig = viz.timeline(trajectory)
            fig.update_layout(height=140 + 28 * len(fig.data[0].y), margin={"l": 10, "r": 10, "t": 40, "b": 40})
            _show(self.chart, fig)
            self._set_state("done")

    def _on_call(self, call, obs) -> None:
        with self._ui_lock:
            args = json.dumps(call.arguments, ensure_ascii=False)
            body = f"error ({obs.error_kind}): {obs.error}" if obs.error else obs.content
            self._add("tool", f"{call.name}({args}) → {body}", cost=obs.cost_usd, seconds=obs.latency_s,
                      label=obs.label)

    def _on_ask(self, messages: list[dict[str, Any]]) -> None:
        with self._ui_lock:
            last = messages[-1].get("content", "") if messages else ""
            self._add("orchestrator", last or "(empty reply)")
            self._set_state("waiting")

    # ------------------------------------------------------------------ drawing
    def _add(self, who: str, text: str, cost: float | None = None, seconds: float | None = None,
             label: str = "") -> None:
        self.events.append({"who": who, "text": text, "cost_usd": cost, "latency_s": seconds, "label": label,
                            "at_s": time.perf_counter() - self._t0})
        self._draw()

    def _set_state(self, state: str) -> None:
        with self._changed:
            self._state = state
            waiting = state == "waiting"
            self.send_button.disabled = self.end_button.disabled = not waiting
            self.restart_button.disabled = state in ("working", "waiting")
            self._draw_status()
            self._changed.notify_all()

    def _header(self) -> str:
        P = self.task.preference
        shown = _e(P.render()) if P is not None else "default"
        return (f"<div><b>You are the user</b> of task <b>{_e(self.task.id)}</b> · policy "
                f"{_e(getattr(self.engine, 'name', type(self.engine).__name__))} · P: {shown}</div>"
                f"<div style='margin:4px 0'><b>your first message</b>: {_e(self.task.prompt)}</div>")

    def _draw_status(self, note: str = "") -> None:
        words = {"idle": "not started", "working": "the orchestrator is working…", "waiting": "your turn: type "
                 "a message and press Send", "done": "conversation over", "error": "the episode failed"}
        err = (f"<div style='{_ERROR_STYLE}'>{_e(type(self.error).__name__)}: {_e(self.error)}</div>"
               if self.error else "")
        extra = f" · <i>{_e(note)}</i>" if note else ""
        turns = sum(1 for e in self.events if e["who"] == "you")
        self.status.value = (f"<div class='orchlib-user-status' data-state='{self._state}' data-sent='{turns}'>"
                             f"{words[self._state]}{extra}</div>{err}")

    def _draw(self) -> None:
        colours = {"you": "#1565c0", "orchestrator": "#333", "tool": "#6a1b9a", "end": "#1b5e20"}
        rows = []
        for ev in self.events:
            money = "" if ev["cost_usd"] is None else f" · {_money(ev['cost_usd'])}"
            secs = "" if ev["latency_s"] is None else f" · {ev['latency_s']:.3g} s"
            label = f" [{_e(ev['label'])}]" if ev["label"] else ""
            rows.append(f"<div class='orchlib-user-event' data-who='{ev['who']}' style='margin:2px 0'>"
                        f"<span style='color:#888'>{ev['at_s']:6.1f} s</span> "
                        f"<b style='color:{colours[ev['who']]}'>{ev['who']}</b>{label}{money}{secs}: "
                        f"<span class='orchlib-user-said'>{_e(ev['text'])}</span></div>")
        total = sum(ev["cost_usd"] or 0.0 for ev in self.events if ev["who"] == "tool")
        foot = f"<div style='color:#555'>tool calls so far: {_money(total)}</div>" if rows else ""
        self.timeline.value = (f"<div class='orchlib-user-timeline' data-events='{len(self.events)}' "
                               f"style='border:1px solid #ddd;padding:4px;min-height:3em'>"
                               f"{''.join(rows) or '<i>nothing yet</i>'}{foot}</div>")
