"""Users in the loop: scripted, replayed and simulated (over a loopback OpenAI-compatible server), and
how a task names its user."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import orchlib
from orchlib.users import ReplayedUser, ScriptedUser, SimulatedUser, User, make_user, user_view
from orchlib.tasks import STOP_MARKER, Task, TaskFileError, UserSpec, load_tasks, save_tasks
from orchlib.trajectory import Trajectory, Turn, UserTurn

CONVO = [{"role": "user", "content": "Hi, I need help."},
         {"role": "assistant", "content": "Sure, which booking?"}]


def ask(user: User, n: int, messages=CONVO) -> list[UserTurn]:
    async def go():
        return [await user.reply(messages) for _ in range(n)]

    return asyncio.run(go())


def test_scripted_user_replies_in_order_and_ends_at_the_marker_or_when_out_of_turns():
    out = ask(ScriptedUser(["R1001.", "Yes."]), 3)
    assert [(u.text, u.done, u.label) for u in out] == [("R1001.", False, "scripted"), ("Yes.", False, "scripted"),
                                                        (STOP_MARKER, True, "scripted")]
    out = ask(ScriptedUser(["Thanks, bye. ###STOP###", "never"]), 1)
    assert (out[0].text, out[0].done) == ("Thanks, bye.", True)
    assert [u.done for u in ask(ScriptedUser(["a", "b", "c"], max_turns=2), 2)] == [False, True]
    seen = []
    fn_user = ScriptedUser(lambda messages: seen.append(len(messages)) or f"turn {len(seen)}")
    assert [u.text for u in ask(fn_user, 2)] == ["turn 1", "turn 2"] and seen == [2, 2]
    assert all(u.cost_usd == 0 and u.latency_s == 0 for u in out)


def test_replayed_user_reproduces_the_recorded_bill():
    recorded = [UserTurn(text="R1001.", cost_usd=0.01, latency_s=2.0, tokens_in=30, tokens_out=4, label="user:gpt"),
                UserTurn(text="Bye.", done=True, cost_usd=0.02, latency_s=1.0)]
    out = ask(ReplayedUser(recorded), 3)
    assert [(u.text, u.done, u.cost_usd, u.latency_s, u.label) for u in out] == [
        ("R1001.", False, 0.01, 2.0, "replay"), ("Bye.", True, 0.02, 1.0, "replay"), (STOP_MARKER, True, 0.0, 0.0,
                                                                                      "replay")]
    traj = Trajectory(task_id="t", turns=[Turn(text="a", user=recorded[0]), Turn(text="b"),
                                          Turn(text="c", user=recorded[1])])
    again = ask(ReplayedUser.from_trajectory(traj), 2)
    assert [u.text for u in again] == ["R1001.", "Bye."] and again[0].tokens_in == 30
    with pytest.raises(ValueError, match="no user turns"):
        ReplayedUser.from_trajectory(Trajectory(task_id="t", turns=[Turn(text="a")]))


def test_user_view_swaps_sides_and_hides_tools():
    msgs = [{"role": "user", "content": "Move my trip."},
            {"role": "assistant", "content": 'Checking.\n<tool_call>\n{"name": "get", "arguments": {}}\n</tool_call>'},
            {"role": "tool", "name": "get", "content": "R1001 ..."},
            {"role": "assistant", "content": '<tool_call>\n{"name": "get", "arguments": {}}\n</tool_call>'},
            {"role": "user", "content": "<tool_response>\nx\n</tool_response>"},
            {"role": "assistant", "content": "Shall I move you?"}]
    assert user_view(msgs) == [{"role": "assistant", "content": "Move my trip."},
                               {"role": "user", "content": "Checking."},
                               {"role": "user", "content": "Shall I move you?"}]


@pytest.fixture
def server():
    """A loopback chat-completions server answering from a list; records each request body."""
    answers: list[dict] = []
    bodies: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's naming)
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            raw = json.dumps(answers.pop(0)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}/v1", answers, bodies
    httpd.shutdown()
    thread.join()


def _reply(content=None, tool_calls=None, usage=(120, 8)) -> dict:
    msg = {"role": "assistant", "content": content}
    if tool_calls:
        msg["tool_calls"] = tool_calls
    return {"choices": [{"message": msg, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1]}}


def test_simulated_user_over_a_card_is_priced_and_sees_its_side(server, tmp_path):
    url, answers, bodies = server
    card = tmp_path / "user.yaml"
    card.write_text(f"name: user_sim\nkind: llm\ndescription: plays the user\n"
                    f"backend: {{client: openai, model: sim-1, base_url: '{url}'}}\n"
                    f"price: {{per_m_input: 1.0, per_m_output: 4.0}}\n")
    answers += [_reply("My booking is R1001."), _reply("All good, thanks! ###STOP###", usage=(150, 6)),
                _reply(None, [{"id": "c1", "type": "function", "function": {"name": "end_conversation",
                                                                            "arguments": "{}"}}])]
    task = Task(id="t", prompt="Hi, I need help.",
                user=UserSpec(kind="simulated", card=str(card), instructions="You are Mia; booking R1001."))
    user = make_user(task)
    first, second, third = ask(user, 3)
    assert (first.text, first.done, first.label) == ("My booking is R1001.", False, "user:sim-1")
    assert first.cost_usd == pytest.approx((120 * 1.0 + 8 * 4.0) / 1e6)   # the card's price on `usage`
    assert first.tokens_in == 120 and first.latency_s > 0
    assert (second.text, second.done) == ("All good, thanks!", True)
    assert third.done  # its own tool ends the conversation too
    sent = bodies[0]
    assert sent["model"] == "sim-1" and sent["tools"][0]["function"]["name"] == "end_conversation"
    assert "You are Mia; booking R1001." in sent["messages"][0]["content"]
    assert STOP_MARKER in sent["messages"][0]["content"]
    # the task was the user's own words; the agent's question is the other party's (chat APIs want the
    # other party first, so a stand-in opens)
    assert sent["messages"][1:] == [{"role": "user", "content": "(The agent is waiting for your request.)"},
                                    {"role": "assistant", "content": "Hi, I need help."},
                                    {"role": "user", "content": "Sure, which booking?"}]


def test_simulated_user_over_an_endpoint_has_a_turn_limit(server):
    url, answers, bodies = server
    answers += [_reply("one"), _reply("two")]
    task = Task(id="t", prompt="", user={"kind": "simulated", "base_url": url, "model": "m", "instructions": "x",
                                         "max_turns": 2})
    out = ask(make_user(task), 2, messages=[{"role": "assistant", "content": "Hello, how can I help?"}])
    assert [(u.text, u.done, u.cost_usd) for u in out] == [("one", False, 0.0), ("two", True, 0.0)]
    # the agent spoke first: the user's model reads it as the other party's opening
    assert bodies[0]["messages"][1:] == [{"role": "user", "content": "Hello, how can I help?"}]


def test_make_user_from_a_spec_a_function_or_an_import_path():
    assert make_user(Task(id="t", prompt="p")) is None
    scripted = make_user(Task(id="t", prompt="p", user={"kind": "scripted", "turns": ["a"]}))
    assert isinstance(scripted, ScriptedUser) and scripted.turns == ["a"]
    replayed = make_user(Task(id="t", prompt="p", user={"kind": "replayed",
                                                         "turns": [{"text": "a", "cost_usd": 0.5}]}))
    assert isinstance(replayed, ReplayedUser) and replayed.turns[0].cost_usd == 0.5
    made = make_user(Task(id="t", prompt="p", user=lambda task: ScriptedUser([task.id])))
    assert made.turns == ["t"]
    # two episodes never share a user's place in its script
    task = Task(id="t", prompt="p", user={"kind": "scripted", "turns": ["a", "b"]})
    assert make_user(task) is not make_user(task)
    with pytest.raises(TypeError, match="user factory returned int"):
        make_user(Task(id="t", prompt="p", user=lambda task: 3))
    with pytest.raises(ValueError, match="needs an `llm` card"):
        SimulatedUser.from_card(str(Path(orchlib.__file__).parent / "toolcards" / "calculator.yaml"), "x")


def test_a_task_file_keeps_the_user_and_names_a_bad_one(tmp_path):
    tasks = [Task(id="a", prompt="p", user={"kind": "scripted", "turns": ["yes", "bye ###STOP###"]}),
             Task(id="b", prompt="p", user={"kind": "replayed", "turns": [{"text": "r", "latency_s": 1.5}]})]
    assert load_tasks(save_tasks(tasks, tmp_path / "t.jsonl")) == tasks
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "prompt": "p"}\n{"id": "b", "prompt": "p", "user": {"kind": "scripted"}}\n')
    with pytest.raises(TaskFileError, match=r"bad.jsonl:2: user: a scripted user needs turns"):
        load_tasks(bad)
    bad.write_text('{"id": "b", "prompt": "p", "user": {"kind": "simulated", "instructions": "x", "model": "m"}}\n')
    with pytest.raises(TaskFileError, match=r"bad.jsonl:1: user: a simulated user needs a card, or base_url"):
        load_tasks(bad)
    bad.write_text('{"id": "b", "prompt": "p", "user": {"kind": "robot", "turns": ["x"]}}\n')
    with pytest.raises(TaskFileError, match=r"bad.jsonl:1: user: kind: Input should be"):
        load_tasks(bad)
