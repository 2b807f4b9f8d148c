"""Text from a model, a tool, a person or a file never reaches a panel's HTML (or a plotly figure's
text, which plotly draws as a subset of HTML) unescaped: a tool name the policy wrote, a reward file's
quoted tool names and profile name, a task id, a tool's output.

Each case uses a name that is markup (`<img ... onerror=...>`) and one that starts with `<b>` (a
table once took a cell starting with `<b>` for its own bold), then looks for the raw tags."""

from __future__ import annotations

import html
import json
from types import SimpleNamespace

from orchlib import viz
from orchlib.chat import render_call
from orchlib.env import Environment
from orchlib.envs.airline import airline_tasks, environment
from orchlib.ledger import ledger
from orchlib.models import build_tokenizer
from orchlib.reward import Reward
from orchlib.rollout import RolloutConfig
from orchlib.sweep import SweepPoint, SweepResult
from orchlib.tasks import Preference, Task
from orchlib.testing import ScriptedEngine
from orchlib.trajectory import Observation, ToolCall, Trajectory, Turn
from orchlib.widgets import RewardPlayground, TrainerPanel, UserPanel, breakdown_html, trajectory_html

IMG = "<img src=x onerror=alert(1)>"
BOLD = "<b><img src=y onerror=alert(2)>"   # sorts before IMG: a calls cell then starts with "<b>"
IMG_ESCAPED = "&lt;img src=x onerror=alert(1)&gt;"
BOLD_ESCAPED = "&lt;b&gt;&lt;img src=y onerror=alert(2)&gt;"


def safe(text: str, both: bool = True) -> None:
    """No raw tag from the names, and the names are there, escaped."""
    assert "<img" not in text and "<b><img" not in text
    assert IMG_ESCAPED in text
    if both:
        assert BOLD_ESCAPED in text


def outputs_text(out) -> str:
    """What an Output widget shows (plotly's mime bundle), as one string."""
    assert out.outputs
    return json.dumps(out.outputs, ensure_ascii=False)


def evil_trajectory(i: int = 0) -> Trajectory:
    calls = [ToolCall(name=IMG, arguments={"q": IMG}), ToolCall(name=BOLD)]
    obs = [Observation(content=f"result {IMG}", tool=IMG, label=BOLD, latency_s=1.0, cost_usd=0.001),
           Observation(content="", tool=BOLD, error=f"failed {BOLD}", error_kind="tool_failure", latency_s=0.5),
           Observation(content="Error", error=f"unknown tool {IMG}", error_kind="unknown_tool")]
    turn = Turn(text=f"calling {IMG}", calls=calls, observations=obs, gen_latency_s=0.5, latency_s=1.5,
                cost_usd=0.001, tokens_out=4)
    return Trajectory(task_id=f"task {BOLD}", group_index=i, turns=[turn], calls={IMG: 1, BOLD: 2},
                      outcome=float(i % 2), cost_usd=0.001, latency_s=1.5, final_answer=IMG,
                      preference={"name": IMG, "outcome": 1.0, "cost": 0.5, "tools": {BOLD: 0.5}},
                      category=IMG, finish_reason="max_turns")


# ---------------------------------------------------------------------------------------------- widgets
def test_explain_table_escapes_a_calls_cell_that_starts_with_b():
    group = [evil_trajectory(i) for i in range(3)]
    pg = RewardPlayground("outcome", group=group)
    table = pg.table.value
    safe(table)
    # the calls cell: both tools, escaped, the "<b>" one first
    assert f"<td>{BOLD_ESCAPED}×2, {IMG_ESCAPED}×1</td>" in table
    # the reward column keeps the bold the table adds itself, around its number (outcome: 0, 1, 0)
    assert [table.count(f"<td><b>{r}</b></td>") for r in ("0", "1")] == [2, 1] and table.count("<b>") == 3
    # the breakdown's group label is the task id
    assert f"<td>task {BOLD_ESCAPED}</td>" in pg.breakdown_box.value and "<img" not in pg.breakdown_box.value
    assert pg.breakdown_box.value == breakdown_html(pg.breakdown)


def test_reward_latex_from_a_file_is_escaped_for_html_and_latex(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("name: evil\n"
                    f"preference: {{name: '{IMG}', outcome: 1.0}}\n"
                    "terms:\n"
                    f"  spend: -0.1 * calls['{IMG}'] - P.tools['{BOLD}']\n"
                    "reward: outcome + spend\n", encoding="utf-8")
    reward = Reward.load(path)
    pg = RewardPlayground(path, group=[evil_trajectory(i) for i in range(2)])
    assert pg.error is None
    safe(pg.formula.value)
    # MathJax reads the text the browser decodes: exactly the reward's LaTeX, whose tool names are
    # LaTeX text with the special characters escaped (no `}` or `\` from the file closes \text{...})
    shown = html.unescape(pg.formula.value)
    assert f"$$R = {reward.latex()}$$" in shown
    assert f"$$\\mathrm{{spend}} = {reward.term_latex()['spend']}$$" in shown
    assert "\\text{<img src=x onerror=alert(1)>}" in reward.latex()
    # the profile name from the file reaches the chart's title: escaped there too
    title = pg.figure.layout.title.text
    assert IMG_ESCAPED in title and "<img" not in title
    safe(outputs_text(pg.chart), both=False)


def test_reward_latex_keeps_latex_specials_of_a_quoted_tool_name_inside_text():
    reward = Reward.from_string("outcome - calls['a}\\\\b$<x>&']")
    pg = RewardPlayground(reward)
    assert "\\text{a\\}\\textbackslash{}b\\$<x>\\&}" in reward.latex()
    assert "\\text{a\\}\\textbackslash{}b\\$&lt;x&gt;\\&amp;}" in pg.formula.value and "<x>" not in pg.formula.value


def test_trajectory_html_escapes_tool_names_labels_outputs_and_preference():
    page = trajectory_html(evil_trajectory(1), reward=1.0)
    safe(page)
    assert page.count(f"<b>{IMG_ESCAPED}</b>") == 2  # the call and its result, each named in bold


class _FakeTrainer:
    """What TrainerPanel reads of a Trainer, with steps whose trajectories and metrics name tools
    by markup (the panel is under test, not GRPO)."""

    def __init__(self):
        self.history: list[dict] = []
        self.env = Environment(train=[Task(id="t", prompt=IMG, tools=[IMG, BOLD], preference=Preference(name=IMG))])
        self.hooks = SimpleNamespace(sampler=None)
        self.toolbox = SimpleNamespace(names=[IMG, BOLD])
        self.step_count = 0

    def step(self):
        self.step_count += 1
        self.history.append({"step": float(self.step_count), "reward": 0.5, "accuracy": 1.0,
                             f"share/{IMG}": 0.25, f"share/{BOLD}": 0.75, f"reward/{IMG}": 0.1})
        return SimpleNamespace(step=self.step_count, trajectories=[evil_trajectory(1)], rewards=[1.0])


def test_trainer_panel_escapes_trajectories_charts_and_preference():
    panel = TrainerPanel(_FakeTrainer(), background=False)
    panel.run(1)
    assert panel.error is None, panel.error_traceback
    safe(panel.conversation.value)
    safe(outputs_text(panel.mix_chart))
    safe(outputs_text(panel.timeline_chart))
    safe(outputs_text(panel.reward_chart), both=False)
    panel.set_preference(Preference(name=IMG, tools={BOLD: 0.5}))
    safe(panel.preference_label.value)


def test_user_panel_escapes_what_the_orchestrator_the_tools_and_the_person_wrote():
    tok = build_tokenizer()
    task = next(t for t in airline_tasks() if t.id == "airline-cancel").model_copy(update={"id": f"x {BOLD}"})
    agent = [render_call(ToolCall(name=IMG, arguments={"q": BOLD})), f"Which one? {IMG}", "Done."]
    p = UserPanel(environment(), ScriptedEngine(tok, agent), task=task,
                  config=RolloutConfig(max_turns=4, max_new_tokens=200, max_total_tokens=4096))
    assert p.wait_for_turn(60) == "waiting"
    assert p.send(BOLD)
    assert p.wait_for_turn(60) == "waiting", p.error_traceback
    p.end()
    assert p.wait(60) and p.state == "done", p.error_traceback
    safe(p.timeline.value)
    assert "<img" not in p.header.value and f"<b>x {BOLD_ESCAPED}</b>" in p.header.value
    safe(outputs_text(p.chart), both=False)


# ---------------------------------------------------------------------------------------------- figures
def test_every_figure_escapes_names_from_data():
    trajs = [evil_trajectory(i) for i in range(2)]
    history = [{"step": 1.0, "reward": 0.5, f"share/{IMG}": 0.5, f"share/{BOLD}": 0.5, f"reward/{BOLD}": 0.1,
                f"profile/{IMG}/reward": 0.2, f"profile/{IMG}/share/{BOLD}": 1.0,
                f"profile/{IMG}/advantage/{BOLD}": 0.5}]
    figures = {
        "tool_distribution": viz.tool_distribution({BOLD: trajs, IMG: trajs}),
        "tool_distribution by": viz.tool_distribution(trajs, by="category"),
        "tool_mix_over_steps": viz.tool_mix_over_steps(history),
        "reward_curves": viz.reward_curves(history, profiles=True, keys=(f"share/{IMG}",)),
        "push_and_share": viz.push_and_share(history, BOLD),
        "cost_accuracy": viz.cost_accuracy({BOLD: (0.1, 0.5), IMG: (0.2, 0.9)}),
        "timeline": viz.timeline(trajs[0]),
        "ledger_figure": viz.ledger_figure(ledger(trajs)),
    }
    reward = Reward.from_string(f"outcome - 0.1 * calls['{IMG}']")
    figures["explain_figure"] = viz.explain_figure(reward.explain(trajs), labels=[IMG, BOLD])
    point = SweepPoint(Preference(name=IMG, tools={BOLD: 1.0}), 2, 0.5, 0.1, 1.0, {BOLD: 0.5, IMG: 0.5})
    figures["sweep_figure"] = viz.sweep_figure(SweepResult(BOLD, [point], {IMG: (0.2, 0.4, 1.0)}))
    for name, fig in figures.items():
        text = fig.to_json()
        assert "<img" not in text, name
        assert IMG_ESCAPED in text or BOLD_ESCAPED in text, name


def test_a_name_in_a_hover_template_is_shown_not_substituted():
    fig = viz.tool_distribution({"p": [Trajectory(task_id="t", calls={"%{x}<b>": 1})]})
    assert fig.data[0].name == "%{x}&lt;b&gt;"
    assert fig.data[0].hovertemplate.startswith("&#37;{x}&lt;b&gt;<br>%{x}")
