"""`RewardPlayground`: edit a reward and see its LaTeX and each term's share on a sample group."""

from __future__ import annotations

import html
import json
import os
from typing import Sequence

import ipywidgets as widgets
import plotly.graph_objects as go

from orchlib import viz
from orchlib.reward import Reward
from orchlib.reward.breakdown import breakdown
from orchlib.reward.names import latex_name
from orchlib.tasks import PROFILES, Preference
from orchlib.trajectory import Trajectory
from orchlib.widgets.common import _e, _show, _error_html, _explain_table, breakdown_html

__all__ = ["RewardPlayground", "sample_group", "reward_text"]


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
        # The LaTeX holds strings from the reward's text (term names, quoted tool names), already
        # LaTeX-escaped by latex_name; HTMLMath sets it as HTML before MathJax reads the text, so it is
        # HTML-escaped too (MathJax sees the decoded text: `&` and `<` still typeset as written).
        terms = "".join(f"$${_e(latex_name(name))} = {_e(tex)}$$" for name, tex in r.term_latex().items())
        self.formula.value = f"$$R = {_e(r.latex())}$$" + (f"<details><summary>terms</summary>{terms}</details>"
                                                            if terms else "")
        self.explanation = r.explain(self.group, P=P)
        self.table.value = _explain_table(self.explanation, self.group)
        self.breakdown = breakdown(r, [self.group], P)
        self.breakdown_box.value = breakdown_html(self.breakdown)
        self.figure = viz.explain_figure(self.explanation, labels=[f"#{t.group_index}" for t in self.group],
                                         title=f"Each term's contribution under P = {html.escape(P.name, quote=False)}")
        self.figure.update_layout(height=340)
        _show(self.chart, self.figure)
