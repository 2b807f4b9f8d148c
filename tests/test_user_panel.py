"""Be the user: the UserPanel driven from Python (Send, End, the text box) on an airline conversation
with a written orchestrator; the timeline grows turn by turn; the typed turns replay with ReplayedUser."""

from __future__ import annotations

import asyncio

from orchlib.env import Environment
from orchlib.chat import render_call
from orchlib.envs.airline import AIRLINE, airline_tasks, environment
from orchlib.users import ReplayedUser
from orchlib.models import build_tokenizer
from orchlib.rollout import RolloutConfig, rollout
from orchlib.testing import ScriptedEngine
from orchlib.trajectory import ToolCall, read_jsonl
from orchlib.widgets import PersonUser, UserPanel

TOK = build_tokenizer()
TASK = next(t for t in airline_tasks() if t.id == "airline-cancel")
CONFIG = RolloutConfig(max_turns=8, max_new_tokens=200, max_total_tokens=4096)
AGENT = ["Which reservation is it?",
         render_call(ToolCall(name="get_reservation", arguments={"reservation_id": "R1002"})),
         "R1002 holds 2 passengers on HA201; cancelling refunds $240.00. Shall I cancel it?",
         render_call(ToolCall(name="cancel_reservation", arguments={"reservation_id": "R1002"})),
         "R1002 is cancelled and $240.00 is refunded to your balance."]
WAIT = 60  # seconds: generous on two busy cores; every wait returns as soon as the state changes


def panel() -> UserPanel:
    return UserPanel(environment(), ScriptedEngine(TOK, AGENT), task=TASK, config=CONFIG)


def test_a_typed_conversation_is_a_trajectory_that_replays(tmp_path):
    p = panel()
    assert p.wait_for_turn(WAIT) == "waiting"
    assert [e["who"] for e in p.events] == ["orchestrator"] and p.events[0]["text"] == "Which reservation is it?"
    assert not p.send_button.disabled and "data-state='waiting'" in p.status.value
    assert p.send("   ") is False  # nothing typed: nothing sent
    p.text.value = "It is R1002."
    p.send_button.click()  # what the browser's click does
    assert p.text.value == ""
    assert p.wait_for_turn(WAIT) == "waiting"
    tool = next(e for e in p.events if e["who"] == "tool")
    assert tool["text"].startswith('get_reservation({"reservation_id": "R1002"}) → R1002')
    assert tool["cost_usd"] == 0.0 and tool["latency_s"] is not None
    assert "It is R1002." in p.timeline.value and "data-who='tool'" in p.timeline.value
    assert p.send("Yes, cancel it.")
    assert p.wait_for_turn(WAIT) == "waiting"
    assert p.end()
    assert p.wait(WAIT) and p.state == "done"
    t = p.trajectory
    assert t.finish_reason == "user_stop" and t.outcome == 1.0
    typed = [turn.user for turn in t.turns if turn.user is not None]
    assert [u.text for u in typed] == ["It is R1002.", "Yes, cancel it.", ""] and typed[-1].done
    assert all(u.label == "person" and u.cost_usd == 0.0 for u in typed)
    assert [e["who"] for e in p.events] == ["orchestrator", "you", "tool", "orchestrator", "you", "tool",
                                            "orchestrator", "you", "end"]
    assert len(p.chart.outputs) == 1  # the episode's timeline figure

    saved = read_jsonl(p.save(tmp_path / "conversation.jsonl"))[0]
    replayed = ReplayedUser.from_trajectory(saved)
    assert [asyncio.run(replayed.reply([])).text for _ in range(3)] == ["It is R1002.", "Yes, cancel it.", ""]
    again = rollout(Environment(train=[p.replay_task()], tools=AIRLINE.toolbox), ScriptedEngine(TOK, AGENT),
                    config=CONFIG)[0]
    assert [turn.user.text for turn in again.turns if turn.user] == [u.text for u in typed]
    assert again.outcome == 1.0 and again.finish_reason == "user_stop"


def test_the_stop_marker_ends_and_a_new_conversation_starts_over():
    p = panel()
    assert p.wait_for_turn(WAIT) == "waiting"
    assert p.send("Never mind. ###STOP###")
    assert p.wait(WAIT) and p.state == "done" and p.trajectory.finish_reason == "user_stop"
    assert p.trajectory.turns[0].user.text == "Never mind." and p.send("late") is False
    p.engine = ScriptedEngine(TOK, AGENT)
    p.restart_button.click()
    assert p.wait_for_turn(WAIT) == "waiting" and p.trajectory is None and len(p.events) == 1


def test_a_failing_orchestrator_is_shown_not_swallowed():
    p = UserPanel(environment(), ScriptedEngine(TOK, []), task=TASK, config=CONFIG)  # a script with no turn
    assert p.wait(WAIT) and p.state == "error"
    assert p.error is not None and "data-state='error'" in p.status.value


def test_person_user_answers_only_when_asked():
    user = PersonUser()
    assert not user.waiting and user.answer("hello") is False
