"""A rollout lets each episode's env go once the episode has ended and been scored, so a long rollout
holds only the running episodes' states; `return_states=True` keeps them all and returns them."""

from __future__ import annotations

import contextlib
import gc
import weakref

from orchlib.env import Environment
from orchlib.chat import parse_tool_calls, render_call
from orchlib.models import build_tokenizer
from orchlib.rollout import RolloutConfig, rollout
from orchlib.tasks import Task
from orchlib.testing import ScriptedEngine
from orchlib.tools import FunctionTool, Toolbox
from orchlib.trajectory import ToolCall

TOK = build_tokenizer()
CONFIG = RolloutConfig(max_turns=8, max_new_tokens=200, max_total_tokens=4096)


class State:
    """One episode's state: a plain object, so a weak reference tells when nothing holds it."""

    def __init__(self, task_id: str):
        self.task_id, self.notes = task_id, []


def call(name: str, **arguments) -> str:
    return render_call(ToolCall(name=name, arguments=arguments))


# Episodes that end at different turns: "short" answers at its 2nd turn, "mid" at its 3rd; "long" asks
# which finished episodes' states are still alive at its 2nd turn (after "short" ended) and its 4th
# (after both ended), then answers at its 5th.
SCRIPTS = {"short": [call("note", text="short"), "done"],
           "mid": [call("note", text="mid"), call("note", text="mid"), "done"],
           "long": [call("note", text="long"), call("alive"), call("note", text="long"), call("alive"), "done"]}
NOTES = {"short": 1, "mid": 2, "long": 2}


def setup():
    """Tasks whose checker keeps a weak reference to the env it scored, and a toolbox whose `alive`
    tool reports which of those envs are still held."""
    scored: dict[str, weakref.ref] = {}

    def check(answer, task, env) -> float:
        scored[task.id] = weakref.ref(env)
        return float(env.notes == [task.id] * NOTES[task.id])

    def note(env: State, text: str) -> str:
        """Write a note into the episode's state.

        Args:
            text: the note.
        """
        env.notes.append(text)
        return "noted"

    def alive() -> str:
        """Which scored episodes' states are still held."""
        gc.collect()  # a state kept only by a reference cycle is not held
        held = sorted(k for k, ref in scored.items() if ref() is not None)
        return f"scored: {', '.join(sorted(scored)) or 'none'}; held: {', '.join(held) or 'none'}"

    tasks = [Task(id=k, prompt=f"task {k}", state=lambda task: State(task.id), checker=check)
             for k in SCRIPTS]
    box = Toolbox([FunctionTool.from_function(note), FunctionTool.from_function(alive)])
    return tasks, box, scored


def probes(traj) -> list[str]:
    return [o.content for t in traj.turns for o in t.observations if o.tool == "alive"]


def test_an_episodes_env_is_let_go_when_it_ends():
    tasks, box, scored = setup()
    trajs = rollout(Environment(train=tasks, tools=box), ScriptedEngine(TOK, SCRIPTS, tasks=tasks), config=CONFIG)
    by = {t.task_id: t for t in trajs}
    assert [len(by[k].turns) for k in SCRIPTS] == [2, 3, 5]
    assert [t.outcome for t in trajs] == [1.0, 1.0, 1.0]  # each checker read its episode's notes first
    # seen from the episode still running: every episode that ended was scored and its state let go
    assert probes(by["long"]) == ["scored: short; held: none", "scored: mid, short; held: none"]
    gc.collect()
    assert sorted(scored) == ["long", "mid", "short"]
    assert all(ref() is None for ref in scored.values())


def test_return_states_keeps_every_episodes_state():
    tasks, box, scored = setup()
    trajs, envs = rollout(Environment(train=tasks, tools=box), ScriptedEngine(TOK, SCRIPTS, tasks=tasks),
                          config=CONFIG, return_states=True)
    by = {t.task_id: t for t in trajs}
    assert probes(by["long"]) == ["scored: short; held: short", "scored: mid, short; held: mid, short"]
    assert [e.task_id for e in envs] == [t.task_id for t in trajs]
    assert [e.notes for e in envs] == [["short"], ["mid", "mid"], ["long", "long"]]
    assert all(scored[e.task_id]() is e for e in envs)  # the very envs the checkers scored


class ScriptedChat:
    """An API-style policy (messages in, one reply out) answering each task from its script."""

    name, max_in_flight = "scripted-chat", 1  # one episode at a time: each ends before the next begins

    def start(self, system, user, tools):
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def session(self):
        return contextlib.nullcontext()

    async def chat(self, messages, tools, session):
        from orchlib.engines.openai import ChatReply, PolicyCall

        task_id = messages[1]["content"].removeprefix("task ").split("\n")[0]
        text = SCRIPTS[task_id][sum(m["role"] == "assistant" for m in messages)]
        content, calls = parse_tool_calls(text)
        return ChatReply(text=text, content=content, calls=[PolicyCall(c) for c in calls],
                         message={"role": "assistant", "content": text}, tokens_in=10, tokens_out=5)


def test_an_api_policys_episodes_let_their_envs_go_too():
    tasks, box, scored = setup()
    trajs = rollout(Environment(train=tasks, tools=box), ScriptedChat(), config=CONFIG)
    by = {t.task_id: t for t in trajs}
    assert [t.outcome for t in trajs] == [1.0, 1.0, 1.0]
    assert probes(by["long"]) == ["scored: mid, short; held: none"] * 2  # "long" runs after both ended
    tasks, box, scored = setup()
    trajs, envs = rollout(Environment(train=tasks, tools=box), ScriptedChat(), config=CONFIG, return_states=True)
    assert probes({t.task_id: t for t in trajs}["long"]) == ["scored: mid, short; held: mid, short"] * 2
    assert [e.notes for e in envs] == [["short"], ["mid", "mid"], ["long", "long"]]
