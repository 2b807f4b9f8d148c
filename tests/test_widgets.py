"""Widgets driven from Python: button clicks and value changes, then the state they must have changed."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest
from conftest import REPO, TOY_ROLLOUT

from orchlib.env import Environment
from orchlib.cards import load_card
from orchlib.envs.toy import toy_tasks, toy_toolbox
from orchlib.models import load_policy
from orchlib.reward import Reward
from orchlib.rollout import RolloutConfig
from orchlib.tasks import PROFILES, Preference
from orchlib.experiments.variants import VariantConfig
from orchlib.train import GRPOConfig, Trainer
from orchlib.widgets import RewardPlayground, ToolCardEditor, TrainerPanel, sample_group, trajectory_html

PLOTLY = "application/vnd.plotly.v1+json"


@pytest.fixture()
def trainer(tiny_policy, policy_cache):
    # A private copy of the tiny policy: training must not change the session's shared one.
    model, tok = load_policy(next(Path(policy_cache).glob("default-tiny-s0-*")))
    cfg = GRPOConfig(tasks_per_step=2, group_size=2, rollout=RolloutConfig(**TOY_ROLLOUT))
    return Trainer((model, tok), Environment(train=toy_tasks(6), tools=toy_toolbox(),
                                             reward=Reward.load(REPO / "rewards/toolorchestra.yaml")), cfg)


def chart_points(out) -> int:
    """Points of the first trace (the reward) of the figure an Output widget shows."""
    (output,) = out.outputs
    return len(output["data"][PLOTLY]["data"][0].get("x", []))


def test_step_button_steps_in_the_background_and_redraws(trainer):
    panel = TrainerPanel(trainer)
    assert "data-step='0'" in panel.status.value and chart_points(panel.reward_chart) == 0
    panel.step_button.click()
    assert panel.wait(120)
    assert trainer.step_count == 1 and len(trainer.history) == 1
    assert "data-step='1'" in panel.status.value and "data-state='idle'" in panel.status.value
    assert chart_points(panel.reward_chart) == 1
    assert list(panel.reward_figure.data[0].y) == [trainer.history[0]["reward"]]
    assert PLOTLY in panel.mix_chart.outputs[0]["data"]
    panel.step_button.click()
    assert panel.wait(120) and trainer.step_count == 2 and chart_points(panel.reward_chart) == 2
    # the browser follows the newest step and shows its first rollout
    assert [v for _, v in panel.step_picker.options] == [1, 2] and panel.step_picker.value == 2
    assert len(panel.rollout_picker.options) == 4 and panel.rollout_picker.value == 0
    last = panel.reports[-1]
    assert last.trajectories[0].task_id in panel.conversation.value
    panel.rollout_picker.value = 3
    assert f"#{last.trajectories[3].group_index}" in panel.conversation.value
    assert panel.timeline_chart.outputs and PLOTLY in panel.timeline_chart.outputs[0]["data"]
    panel.step_picker.value = 1
    assert panel.reports[0].trajectories[0].task_id in panel.conversation.value


def test_run_can_be_paused_and_only_one_step_runs_at_a_time(trainer):
    inside, most = 0, 0
    guard = threading.Lock()
    step = trainer.step

    def counted():
        nonlocal inside, most
        with guard:
            inside += 1
            most = max(most, inside)
        try:
            time.sleep(0.05)  # widen the window in which two steps could overlap
            return step()
        finally:
            with guard:
                inside -= 1

    trainer.step = counted
    panel = TrainerPanel(trainer)
    panel.n_steps.value = 500
    panel.run_button.click()
    assert panel.running and panel.step_button.disabled and panel.run_button.disabled
    assert not panel.pause_button.disabled
    panel.step()  # a step asked for from the kernel thread waits for the running one
    deadline = time.time() + 120
    while trainer.step_count < 3 and time.time() < deadline:
        time.sleep(0.05)
    panel.pause_button.click()
    assert panel.wait(60)
    assert most == 1
    assert 3 <= trainer.step_count < 500 and len(trainer.history) == trainer.step_count
    assert "data-state='paused'" in panel.status.value and not panel.step_button.disabled
    assert chart_points(panel.reward_chart) == trainer.step_count


def test_preference_sliders_set_p_of_the_next_steps(trainer):
    panel = TrainerPanel(trainer, background=False)
    given = trainer.env
    assert set(panel.sliders) == {"outcome", "cost", "latency", "tools/right", "tools/wrong"}
    panel.sliders["cost"].value = 0.75
    panel.sliders["tools/wrong"].value = -0.5
    assert all(t.preference == Preference(name="panel", outcome=1.0, cost=0.75, tools={"wrong": -0.5})
               for t in trainer.env.train)
    assert [t.id for t in trainer.env.train] == [t.id for t in toy_tasks(6)]
    # the panel changed the trainer's environment (its tasks), nothing else of it
    assert trainer.env is not given and (trainer.env.tools, trainer.env.reward) == (given.tools, given.reward)
    assert "cost=0.75" in panel.preference_label.value
    panel.step_button.click()  # background=False: the step runs inside the click
    assert trainer.step_count == 1
    assert all(t.preference["cost"] == 0.75 and t.preference["tools"] == {"wrong": -0.5}
               for t in panel.reports[-1].trajectories)
    panel.own_p_button.click()
    assert trainer.env is given  # the world as it was given, its tasks' own P
    assert all(t.preference is None for t in trainer.env.train) and "own P" in panel.preference_label.value
    # the sliders go back to where they started, so a later nudge does not revive the rest of that P
    assert panel.sliders["cost"].value == 0.0 and panel.sliders["tools/wrong"].value == 0.0
    panel.sliders["latency"].value = 0.5
    assert all(t.preference == Preference(name="panel", latency=0.5) for t in trainer.env.train)
    panel.set_preference(PROFILES["thrifty"])  # from code: the sliders follow, P keeps its name
    assert all(t.preference == PROFILES["thrifty"] for t in trainer.env.train)
    assert panel.sliders["cost"].value == 1.0 and panel.sliders["tools/wrong"].value == 0.0


def test_a_failing_step_is_shown_not_swallowed(trainer):
    def broken():
        raise RuntimeError("engine on fire")

    trainer.step = broken
    panel = TrainerPanel(trainer)
    panel.run(3)
    assert panel.wait(30)
    assert isinstance(panel.error, RuntimeError) and "engine on fire" in panel.error_traceback
    assert "engine on fire" in panel.status.value and "data-state='error'" in panel.status.value
    assert not panel.step_button.disabled


def test_paired_profiles_disable_the_sliders(tiny_policy, policy_cache):
    model, tok = load_policy(next(Path(policy_cache).glob("default-tiny-s0-*")))
    cfg = GRPOConfig(tasks_per_step=1, group_size=2, rollout=RolloutConfig(**TOY_ROLLOUT))
    paired = VariantConfig(paired_profiles=("accuracy", "thrifty")).hooks()
    panel = TrainerPanel(Trainer((model, tok), Environment(train=toy_tasks(2), tools=toy_toolbox(),
                                                           reward=Reward.from_string("outcome")), cfg, hooks=paired))
    assert all(s.disabled for s in panel.sliders.values()) and "paired profiles" in panel.preference_label.value


def test_trajectory_html_escapes_and_shows_calls_costs_and_errors():
    from test_viz import timeline_trajectory

    t = timeline_trajectory().model_copy(update={"prompt": "<b>2+2</b>?", "final_answer": "4"})
    page = trajectory_html(t, reward=0.5)
    assert "&lt;b&gt;2+2&lt;/b&gt;" in page and "<b>2+2</b>" not in page
    assert page.count("→ call") == 4 and "error (malformed_call): bad" in page and "error (tool_failure)" in page
    assert "$0.01" in page and "reward 0.5" in page


# ---------------------------------------------------------------------------------------------- reward playground
def test_playground_shows_latex_and_each_terms_contribution():
    reward = Reward.load(REPO / "rewards/cost_penalty.yaml")
    pg = RewardPlayground(reward)
    assert reward.latex() in pg.formula.value and pg.error is None
    assert "name: cost_penalty" in pg.editor.value and "spend: -P.cost * cost" in pg.editor.value
    group = sample_group()
    # cost_penalty: accuracy + spend, spend = -P.cost * cost with its own P.cost = 10
    want_spend = [-10 * t.cost_usd for t in group]
    assert list(pg.explanation.contributions["spend"]) == pytest.approx(want_spend)
    bars = {t.name: list(t.y) for t in pg.figure.data}
    assert bars["spend"] == pytest.approx(want_spend) and bars["accuracy"] == [t.outcome for t in group]
    assert pg.table.value.count("<tr>") == 1 + len(group)
    pg.profile.value = "thrifty"  # P.cost = 1
    assert list(pg.explanation.contributions["spend"]) == pytest.approx([-t.cost_usd for t in group])


def test_playground_edits_and_shows_syntax_errors_inline():
    pg = RewardPlayground("outcome")
    pg.editor.value = "outcome - 2 * cost"  # what typing in the editor does
    assert pg.error is None and "cost" in pg.formula.value
    assert list(pg.explanation.reward) == pytest.approx([t.outcome - 2 * t.cost_usd for t in sample_group()])
    good, latex = pg.reward, pg.formula.value
    assert not pg.set_text("outcome - (cost")
    assert "RewardSyntaxError" in pg.message.value and "outcome - (cost" in pg.message.value
    assert "^" in pg.message.value
    assert pg.reward is good and pg.formula.value == latex  # the last good reward stays
    assert not pg.set_text("name: x\nterms:\n  a: outcome\n  b: cost **\nreward: a + b")
    assert "RewardFileError" in pg.message.value and ":4: terms.b" in pg.message.value
    assert not pg.set_text("outcome * P.budget")  # parses, but the default P has no budget entry
    assert pg.error is not None and pg.message.value
    assert pg.set_text("name: y\nterms:\n  a: outcome\nreward: 2 * a") and pg.message.value == ""
    assert list(pg.explanation.reward) == [2 * t.outcome for t in sample_group()]


# ---------------------------------------------------------------------------------------------- card editor
@pytest.fixture()
def card_file(tmp_path):
    path = tmp_path / "calculator.yaml"
    shutil.copy(REPO / "toolcards/calculator.yaml", path)
    return path


def test_card_editor_saves_edits_and_keeps_comments(card_file, tmp_path):
    ed = ToolCardEditor(card_file)
    assert ed.description.value == load_card(card_file).description and str(card_file) == ed.path.value
    assert "calculator" in ed.header.value and "expression" in ed.header.value
    ed.description.value = "Exact arithmetic on an expression."
    ed.price["per_call"].value = 0.002
    ed.latency.value = 0.5
    ed.save_button.click()
    assert "saved" in ed.message.value
    text = card_file.read_text()
    assert text.startswith("# Exact arithmetic through orchlib.tools.calculator")
    card = load_card(card_file)
    assert card.description == "Exact arithmetic on an expression." and card.price.per_call == 0.002
    assert card.latency.seconds == 0.5 and card.parameters == ed._loaded.parameters
    other = tmp_path / "copy.yaml"
    ed.path.value = str(other)
    ed.save_button.click()
    assert load_card(other) == card


def test_card_editor_rejects_bad_prices_and_empty_descriptions(card_file):
    before = card_file.read_text()
    ed = ToolCardEditor(card_file)
    ed.price["per_m_output"].value = -1.0
    ed.validate_button.click()
    assert [p.field for p in ed.problems] == ["price.per_m_output"]
    assert "price.per_m_output" in ed.message.value and "greater than or equal to 0" in ed.message.value
    assert ed.save() is None and card_file.read_text() == before
    ed.price["per_m_output"].value = 0.0
    ed.description.value = ""
    assert [p.field for p in ed.validate()] == ["description"]
    with pytest.raises(ValueError):
        ed.edited()
    ed.description.value = "ok"
    assert ed.validate() == [] and "valid" in ed.message.value and ed.card.description == "ok"
