"""A database tool that never returns, or fails half-way, leaves the episode's state as it was; runaway
calls neither exhaust the tool threads nor keep the process alive; the golden replay has a timeout.
And a recorded benchmark's rules: tools that end the episode, the messages the answer rule reads, and
τ-bench's own output check."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
import time

import pytest
from conftest import REPO

from orchlib.chat import render_call
from orchlib.env import Environment
from orchlib.envs.db import (Database, DBDomain, messages_to_user, mentions_number, said_to_user, state_hash,
                             tau_bench_mentions)
from orchlib.models import build_tokenizer
from orchlib.rollout import RolloutConfig, rollout
from orchlib.tasks import Golden, Task
from orchlib.testing import ScriptedEngine
from orchlib.tools import ToolContext
from orchlib.tools import function as function_tools
from orchlib.trajectory import ToolCall, Trajectory, Turn

STOP = threading.Event()
RUNNING = [0]      # spin calls still running (the test process's own count, not the library's)
SEEN: list = []    # the state object each spin call was given


def spin(env: dict) -> str:
    """Count for ever (until the test is over)."""
    SEEN.append(env)
    RUNNING[0] += 1
    try:
        while not STOP.is_set():
            env["n"] = env.get("n", 0) + 1
            time.sleep(0.002)
    finally:
        RUNNING[0] -= 1
    return "stopped"


def read(env: dict) -> str:
    """Read the count."""
    return str(env.get("n", 0))


def bump(env: dict, by: int) -> str:
    """Add to the count.

    Args:
        by: how much
    """
    env["n"] = env.get("n", 0) + by
    return str(env["n"])


def bump_then_fail(env: dict) -> str:
    """Add 99, then fail."""
    env["n"] = env.get("n", 0) + 99
    env["half"] = "done"
    raise RuntimeError("disk full")


DOMAIN = DBDomain("counter", lambda task: {"n": 0}, [spin, read, bump, bump_then_fail], timeout_s=0.5)
TASK = Task(id="t", prompt="Count.", state=DOMAIN.make_state, checker=DOMAIN.check)


@pytest.fixture(autouse=True)
def _stop_spinning():
    STOP.clear()
    SEEN.clear()
    yield
    STOP.set()
    deadline = time.monotonic() + 20
    while RUNNING[0] and time.monotonic() < deadline:
        time.sleep(0.01)


def _call(name: str, env, timeout_s: float = 5.0, **arguments):
    [obs] = DOMAIN.toolbox.call_many_sync([ToolCall(name=name, arguments=arguments)], ToolContext(state=env),
                                          timeout_s=timeout_s)
    return obs


def test_a_call_that_never_returns_times_out_and_leaves_the_state_as_it_was():
    env = DOMAIN.make_state(TASK)
    before = state_hash(env)
    t0 = time.perf_counter()
    obs = _call("spin", env, timeout_s=0.3)
    assert time.perf_counter() - t0 < 5
    assert obs.error_kind == "timeout" and obs.error == "spin did not answer within 0.3 s"
    assert state_hash(env) == before
    time.sleep(0.3)  # the thread still runs, and writes only into its own copy
    assert RUNNING[0] == 1 and SEEN[0] is not env and SEEN[0]["n"] > 0
    assert state_hash(env) == before and env == {"n": 0}


def test_runaway_calls_do_not_hold_up_a_later_call():
    env = DOMAIN.make_state(TASK)
    t0 = time.perf_counter()
    for _ in range(40):
        assert _call("spin", env, timeout_s=0.05).error_kind == "timeout"
    obs = _call("read", env, timeout_s=5.0)
    assert time.perf_counter() - t0 < 10  # 40 x 0.05 s of timeouts, then the read at once
    assert obs.error is None and obs.content == "0"
    assert _call("bump", env, by=2).content == "2" and env == {"n": 2}


def test_past_the_limit_of_runaway_calls_a_call_fails_at_once_saying_why(monkeypatch):
    pool = function_tools.workers()
    assert pool.runaway == 0  # the other tests' runaway calls have stopped
    monkeypatch.setattr(pool, "max_runaway", 2)
    env = DOMAIN.make_state(TASK)
    for _ in range(2):
        assert _call("spin", env, timeout_s=0.05).error_kind == "timeout"
    t0 = time.perf_counter()
    obs = _call("read", env, timeout_s=5.0)
    assert time.perf_counter() - t0 < 2
    assert obs.error_kind == "tool_failure"
    assert "2 earlier calls of sync tool functions timed out and are still running (at most 2)" in obs.error
    STOP.set()  # they end: their threads leave, and calls run again
    deadline = time.monotonic() + 20
    while pool.runaway and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pool.runaway == 0 and _call("read", env).content == "0"


def test_a_call_that_writes_then_fails_leaves_nothing_behind():
    env = DOMAIN.make_state(TASK)
    obs = _call("bump_then_fail", env)
    assert obs.error_kind == "tool_failure" and obs.error == "bump_then_fail failed: RuntimeError: disk full"
    assert env == {"n": 0}
    # a call that succeeds is kept, in the same object the episode holds
    assert _call("bump", env, by=5).content == "5" and env == {"n": 5}


def test_writes_run_at_once_each_keep_their_change():
    # call_many runs a turn's calls concurrently (the rollout's stateful_calls="concurrent"): each write
    # copies the state, so without one writer at a time the second commit would undo the first
    env = DOMAIN.make_state(TASK)
    calls = [ToolCall(name="bump", arguments={"by": by}) for by in (2, 3, 4)]
    obs = DOMAIN.toolbox.call_many_sync(calls, ToolContext(state=env))
    assert [o.error for o in obs] == [None] * 3 and env == {"n": 9}
    assert sorted(int(o.content) for o in obs) == [2, 5, 9]


class Counter(Database):
    n: int = 0
    log: list[str] = []


@dataclasses.dataclass
class DataCounter:
    n: int = 0
    log: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(slots=True)
class SlotCounter:
    n: int = 0
    log: list[str] = dataclasses.field(default_factory=list)


def add(env, by: int) -> str:
    """Add and log.

    Args:
        by: how much
    """
    env.n += by
    env.log.append(f"+{by}")
    if by < 0:
        raise ValueError("no negative amounts")
    return str(env.n)


@pytest.mark.parametrize("kind", [Counter, DataCounter, SlotCounter])
def test_typed_states_are_kept_on_success_and_untouched_on_failure(kind):
    domain = DBDomain("typed", lambda task: kind(), [add])
    env = domain.make_state(TASK)
    [bad] = domain.toolbox.call_many_sync([ToolCall(name="add", arguments={"by": -1})], ToolContext(state=env))
    assert bad.error_kind == "tool_failure" and (env.n, env.log) == (0, [])
    [good] = domain.toolbox.call_many_sync([ToolCall(name="add", arguments={"by": 3})], ToolContext(state=env))
    assert good.content == "3" and (env.n, env.log) == (3, ["+3"]) and isinstance(env, kind)
    assert state_hash(env) == state_hash({"n": 3, "log": ["+3"]})


def test_declared_read_only_tools_read_the_episodes_state_itself():
    domain = DBDomain("declared", lambda task: {"n": 0}, [read, bump], write_tools={"bump"})
    assert [domain.toolbox[n].writes for n in ("bump", "read")] == [True, False]
    env = domain.make_state(TASK)
    [obs] = domain.toolbox.call_many_sync([ToolCall(name="bump", arguments={"by": 4})], ToolContext(state=env))
    assert obs.content == "4" and env == {"n": 4}


def test_a_golden_replay_through_a_tool_that_never_returns_fails_within_its_timeout():
    task = TASK.model_copy(update={"golden": Golden(calls=[ToolCall(name="bump", arguments={"by": 1}),
                                                           ToolCall(name="spin")])})
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=r"^task t: call 1 spin failed: spin did not answer within 0.5 s$"):
        DOMAIN.replay(task)
    assert time.perf_counter() - t0 < 10
    with pytest.raises(ValueError, match="timeout_s must be a positive number"):
        DBDomain("d", lambda task: {}, [read], timeout_s=0)


def test_a_process_with_a_runaway_tool_left_running_exits():
    script = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
from orchlib.envs.db import DBDomain
from orchlib.tools import ToolContext
from orchlib.trajectory import ToolCall

def spin(env: dict) -> str:
    '''Never return.'''
    while True:
        env["n"] = env.get("n", 0) + 1

domain = DBDomain("d", lambda task: {{"n": 0}}, [spin])
env = {{"n": 0}}
[obs] = domain.toolbox.call_many_sync([ToolCall(name="spin")], ToolContext(state=env), timeout_s=0.2)
print(obs.error_kind, env)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "timeout {'n': 0}"


# ------------------------------------------------------------------------- a recorded benchmark's rules
TRANSFER = {"type": "function", "function": {
    "name": "transfer_to_human_agents", "description": "Hand the conversation to a human agent.",
    "parameters": {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}}}


def transfer(data, summary):
    return "Transfer successful"


def test_a_schema_and_callable_tool_can_end_the_episode():
    tok = build_tokenizer()
    domain = DBDomain("desk", lambda task: {"n": 0}, [(TRANSFER, transfer), read], state="data",
                      final_tools={"transfer_to_human_agents"})
    assert domain.toolbox["transfer_to_human_agents"].card.final and not domain.toolbox["read"].card.final
    task = Task(id="desk", prompt="I want a human.", state=domain.make_state, checker=domain.check)
    hand_over = render_call(ToolCall(name="transfer_to_human_agents", arguments={"summary": "wants a human"}))
    engine = ScriptedEngine(tok, {"desk": [hand_over, "never written"]}, tasks=[task])
    [traj] = rollout(Environment(train=[task], tools=domain.toolbox), engine,
                     config=RolloutConfig(max_turns=4, max_new_tokens=64))
    assert traj.finish_reason == "final_tool" and traj.final_answer == "Transfer successful"
    assert len(traj.turns) == 1 and traj.outcome == 1.0  # no writes, nothing required: the golden state
    # without final_tools the same call is an ordinary one, and the episode goes on
    plain = DBDomain("desk", lambda task: {"n": 0}, [(TRANSFER, transfer)], state="data")
    assert not plain.toolbox["transfer_to_human_agents"].card.final
    with pytest.raises(ValueError, match=r"final_tools \['nope'\] are not tools of the domain"):
        DBDomain("desk", lambda task: {}, [read], final_tools={"nope"})


def _conversation(*turns: str) -> Trajectory:
    return Trajectory(task_id="r", turns=[Turn(text=t) for t in turns], final_answer=turns[-1],
                      finish_reason="user_stop")


# The refund's amount written beside a call: text the user never reads.
ASIDE = "Refunding 1240 now.\n" + render_call(ToolCall(name="read"))
BESIDE = _conversation("Your refund will be $1,240.", ASIDE, "Done.")


def test_which_messages_the_answer_rule_reads():
    assert messages_to_user(BESIDE) == ["Your refund will be $1,240.", "Done."]
    assert said_to_user(BESIDE) == "Your refund will be $1,240.\nRefunding 1240 now.\nDone.\nDone."
    aside = _conversation(ASIDE, "Done.")
    task = TASK.model_copy(update={"meta": {"required": ["1240"]}})
    everything = DBDomain("r", lambda t: {"n": 0}, [read])
    to_user = DBDomain("r", lambda t: {"n": 0}, [read], reads="to_user")
    assert everything.check("Done.", task, {"n": 0}, aside) == 1.0  # today's default: all text counts
    assert to_user.check("Done.", task, {"n": 0}, aside) == 0.0     # the user was never told
    assert to_user.check("Done.", task, {"n": 0}, BESIDE) == 1.0    # told in the first message
    with pytest.raises(ValueError, match='reads must be "all" or "to_user"'):
        DBDomain("r", lambda t: {}, [read], reads="user")


@pytest.mark.parametrize("said, fact, ours, taus", [
    ("It comes to $1,234.", "1234", True, True),
    ("It comes to $1,234.", "1,234", True, False),   # τ-bench keeps the fact's commas: never found
    ("Ship 18 boxes.", "8", False, True),            # τ-bench takes any substring
    ("Flight HA101 is booked.", "ha101", True, True),
    ("Refund: 240.50 dollars", "240", False, True),
    ("a, b and c", "a b", False, True),               # every comma goes, not only thousands separators
])
def test_tau_bench_output_check_and_the_default_rule_on_hand_written_text(said, fact, ours, taus):
    assert mentions_number(said, fact) is ours
    assert tau_bench_mentions(said, fact) is taus
    assert tau_bench_mentions(said, fact) == (fact.lower() in said.lower().replace(",", ""))  # τ-bench's line


def test_tau_bench_reads_each_message_to_the_user_on_its_own():
    tau = DBDomain("r", lambda t: {"n": 0}, [read], reads="to_user", answer_rule=tau_bench_mentions)
    task = TASK.model_copy(update={"meta": {"required": ["seat 12", "row 34"]}})
    told = _conversation("Your seat 12, confirmed.", "Also row 34.", "Bye.")
    assert tau.check("Bye.", task, {"n": 0}, told) == 1.0
    # a fact split over two messages is not in any one of them
    split = task.model_copy(update={"meta": {"required": ["12 also"]}})
    assert tau.check("Bye.", split, {"n": 0}, _conversation("Seat 12", "also row 34.")) == 0.0
    assert tau.check("Seat 12 also.", split, {"n": 0}) == 1.0  # no trajectory: the answer is the one message
