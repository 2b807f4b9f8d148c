"""`UserPanel` and `PersonUser`: a person types the user's turns while the orchestrator works."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import ipywidgets as widgets

from orchlib import viz
from orchlib.tasks import STOP_MARKER, Task, UserSpec
from orchlib.tools import Toolbox
from orchlib.trajectory import Trajectory, UserTurn, write_jsonl
from orchlib.widgets.common import _ERROR_STYLE, _show, _e, _money

__all__ = ["UserPanel", "PersonUser"]


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

    def __init__(self, env, engine, *, task: Task | None = None, config=None, seed: int | None = 0,
                 start: bool = True):
        from orchlib.env import Environment
        from orchlib.rollout import RolloutConfig

        if not isinstance(env, Environment):
            raise TypeError(f"UserPanel(env, engine, task=...): env is an orchlib.Environment, not "
                            f"{type(env).__name__}")
        pool = list(env.test) or list(env.train)
        self.task, self.toolbox, self.engine = task or pool[0], env.tools, engine
        self.config = config or RolloutConfig(max_turns=8)
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
        from orchlib.env import Environment
        from orchlib.rollout import rollout

        user = self.user
        task = self.task.model_copy(update={"user": lambda _task: user})
        try:
            watched = Environment(name="user panel", train=[task], tools=_WatchedToolbox(self.toolbox, self._on_call))
            trajectory = rollout(watched, self.engine, config=self.config, seed=self.seed)[0]
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
