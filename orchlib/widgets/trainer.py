"""`TrainerPanel`: Step, Run N and Pause over a `Trainer`, with live charts, a trajectory browser and P
sliders."""

from __future__ import annotations

import threading
import traceback

import ipywidgets as widgets

from orchlib import viz
from orchlib.tasks import Preference
from orchlib.widgets.common import _ERROR_STYLE, _show, _e, _money, trajectory_html

__all__ = ["TrainerPanel"]


# ---------------------------------------------------------------------------------------------- trainer panel
def _paired_profiles(trainer) -> tuple[str, ...]:
    """The profiles the trainer's sampler repeats each task under (it then sets P itself), else ()."""
    from orchlib.experiments.variants import PairedProfiles  # here: a panel without a trainer needs no torch

    sampler = trainer.hooks.sampler
    return sampler.profiles if isinstance(sampler, PairedProfiles) else ()


class TrainerPanel(widgets.VBox):
    """Drive a `Trainer` from a notebook: Step, Run N and Pause; reward and tool-mix charts redrawn
    after every step; a browser over the last steps' trajectories; preference sliders.

    Preference sliders set P for the *next* steps: the panel gives the trainer the environment it was
    given with train tasks that each carry the sliders' P (`trainer.env = env.replace(train=[task with
    P, ...])`), since the trainer draws each step's tasks from `trainer.env.train`. A step already
    running keeps its P. "Tasks' own P" puts the original tasks back. The same is `panel.set_preference(P or None)`.
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
        self._env = trainer.env  # the world as given: its tasks' own P
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
            self.trainer.env = self._env
            values = self._slider_start
        else:
            with_p = [t.model_copy(update={"preference": P}) for t in self._env.train]
            self.trainer.env = self._env.replace(train=with_p)
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
        first = next((t.preference for t in self._env.train if t.preference is not None), None) or Preference()
        offered = sorted({n for t in self._env.train for n in (t.tools if t.tools is not None
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
