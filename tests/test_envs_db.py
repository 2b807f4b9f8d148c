"""The database-environment helper: state hashes, fresh copies, golden replay through the tools, and the
τ²-style checker (state + required outputs + how the episode ended)."""

from __future__ import annotations

import dataclasses

import pytest

from orchlib.envs import airline
from orchlib.envs.airline import AIRLINE, INITIAL, airline_tasks
from orchlib.envs.db import Database, DBDomain, canonical_json, said_to_user, state_hash
from orchlib.tasks import Task, load_tasks, save_tasks
from orchlib.trajectory import ToolCall, Trajectory, Turn

TASKS = {t.id: t for t in airline_tasks()}


class Row(Database):
    name: str
    cents: int


@dataclasses.dataclass
class DataRow:
    name: str
    cents: int


def test_state_hash_is_canonical_over_models_dataclasses_and_json():
    import hashlib

    a = {"b": [1, 2], "a": {"y": "é", "x": None}}
    b = {"a": {"x": None, "y": "é"}, "b": [1, 2]}   # same content, other key order
    assert state_hash(a) == state_hash(b)
    assert canonical_json(a) == '{"a":{"x":null,"y":"é"},"b":[1,2]}'  # by hand
    assert state_hash(a) == hashlib.sha256(canonical_json(a).encode()).hexdigest()
    assert state_hash({"b": [2, 1], "a": {"y": "é", "x": None}}) != state_hash(a)  # list order is state
    row = {"name": "x", "cents": 5}
    assert Row(**row).state_hash() == state_hash(DataRow(**row)) == state_hash(row)
    with pytest.raises(ValueError):
        state_hash({"x": float("nan")})  # NaN has no canonical JSON


def test_make_state_hands_out_independent_copies():
    task = TASKS["airline-change"]
    a, b = AIRLINE.make_state(task), AIRLINE.make_state(task)
    a["users"]["mia_li"]["balance_cents"] = 0
    assert b["users"]["mia_li"]["balance_cents"] == INITIAL["users"]["mia_li"]["balance_cents"] == 50000
    assert state_hash(b) == state_hash(INITIAL) != state_hash(a)


def test_replay_runs_the_golden_calls_through_the_tools():
    task = TASKS["airline-change"]
    env = AIRLINE.replay(task)
    assert env["reservations"]["R1001"]["flight_id"] == "HA101"
    assert env["flights"]["HA100"]["seats"] == 5 and env["flights"]["HA101"]["seats"] == 1
    assert env["users"]["mia_li"]["balance_cents"] == 47000   # 35000 - 32000 charged, by hand
    # the tools check arguments as the agent's calls are checked: a number where the schema wants a string
    bad = [ToolCall(name="change_flight", arguments={"reservation_id": "R1001", "flight_id": 101})]
    with pytest.raises(ValueError, match="call 0 change_flight failed: .*schema"):
        AIRLINE.replay(task, bad)
    with pytest.raises(ValueError, match="'book' is not a airline tool"):
        AIRLINE.replay(task, [ToolCall(name="book")])
    with pytest.raises(ValueError, match="no seats|0 seats left"):
        AIRLINE.replay(task, [ToolCall(name="change_flight", arguments={"reservation_id": "R1001",
                                                                        "flight_id": "HA102"})])


def _traj(task: Task, texts: list[str], finish: str = "user_stop") -> Trajectory:
    return Trajectory(task_id=task.id, turns=[Turn(text=t) for t in texts], final_answer=texts[-1],
                      finish_reason=finish)


def test_check_scores_state_and_what_the_user_was_told():
    task = TASKS["airline-cancel"]
    right = AIRLINE.replay(task)
    said = ["R1002 refunds $240.00 when cancelled. Go ahead?", "Cancelled."]
    assert AIRLINE.check("Cancelled.", task, right, trajectory=_traj(task, said)) == 1.0
    # the fact said in an earlier turn counts with the trajectory; with the answer alone it is missing
    assert AIRLINE.check("Cancelled.", task, right) == 0.0
    assert AIRLINE.check("Refunded $240.00.", task, right) == 1.0
    # the wrong state: nothing written (env None means the initial state), or another write
    assert AIRLINE.check("Refunded $240.00.", task, None) == 0.0
    other = AIRLINE.replay(task, task.golden.calls + [ToolCall(name="cancel_reservation",
                                                               arguments={"reservation_id": "R1001"})])
    assert AIRLINE.check("Refunded $240.00.", task, other) == 0.0
    # an episode that did not end on its own scores 0 whatever its state
    for finish in ("max_turns", "token_budget", "length"):
        assert AIRLINE.check(said[-1], task, right, trajectory=_traj(task, said, finish)) == 0.0
    with pytest.raises(TypeError, match="needs a dict, got list"):
        AIRLINE.check("x", task, [])


def test_said_to_user_leaves_tool_calls_out():
    from orchlib.chat import render_assistant

    t = Trajectory(task_id="x", turns=[Turn(text=render_assistant("Looking.", [ToolCall(name="get_user",
                                                                                     arguments={"user_id": "u"})])),
                                       Turn(text="Found it.")], final_answer="Found it.")
    assert said_to_user(t) == "Looking.\nFound it.\nFound it."


def test_golden_hash_is_computed_once_per_task_not_per_trial(monkeypatch):
    domain = DBDomain("airline", lambda task: INITIAL, list(AIRLINE.functions.values()))
    calls = []
    real = domain._replay
    monkeypatch.setattr(domain, "_replay", lambda task, env, c: calls.append(task.id) or real(task, env, c))
    task = TASKS["airline-change"]
    for _ in range(3):
        domain.golden_hash(task)
    assert calls == ["airline-change"]
    # k trials of one task under their own ids (and other required facts): the same replay, not k
    for k in range(4):
        domain.golden_hash(task.model_copy(update={"id": f"airline-change#{k}", "meta": {"required": []}}))
    assert calls == ["airline-change"]
    fewer = task.model_copy(update={"id": "shorter", "golden": task.golden.model_copy(
        update={"calls": task.golden.calls[:1]})})
    domain.golden_hash(fewer)
    assert calls == ["airline-change", "shorter"]  # other golden calls: another replay
    assert domain.golden_hash(fewer) == state_hash(INITIAL)  # a look-up alone writes nothing


def test_domain_setup_errors_are_named():
    with pytest.raises(ValueError, match="write_tools \\['nope'\\]"):
        DBDomain("d", lambda task: {}, [airline.get_user], write_tools={"nope"})
    with pytest.raises(ValueError, match="two tools with the same name"):
        DBDomain("d", lambda task: {}, [airline.get_user, airline.get_user])


def test_tasks_name_the_domain_by_module_object_attribute_and_survive_a_task_file(tmp_path):
    path = save_tasks(list(TASKS.values()), tmp_path / "airline.jsonl")
    back = load_tasks(path)
    assert back == list(TASKS.values())
    task = back[0]
    assert task.state == "orchlib.envs.airline:AIRLINE.make_state"
    assert state_hash(task.make_state()) == state_hash(INITIAL)
    assert task.score("You are on HA101 and $30.00 was charged.", AIRLINE.replay(task)) == 1.0
    # a callable works in code, and cannot be written to a file
    in_code = task.model_copy(update={"state": AIRLINE.make_state, "checker": AIRLINE.check})
    assert in_code.score("You are on HA101 and $30.00 was charged.", AIRLINE.replay(task)) == 1.0
    with pytest.raises(ValueError, match="task airline-change: checker is a Python function"):
        save_tasks([in_code], tmp_path / "no.jsonl")
    assert not (tmp_path / "no.jsonl").exists()


def test_bad_import_paths_are_refused_when_the_task_is_made():
    with pytest.raises(ValueError, match="expected an import path"):
        Task(id="x", prompt="p", state="orchlib.envs.airline.AIRLINE")
    with pytest.raises(ValueError, match="unknown checker"):
        Task(id="x", prompt="p", checker="not a path")


def test_the_shop_runs_on_the_same_helper():
    from orchlib.envs import shop

    task = next(t for t in shop.shop_tasks(0) if t.meta["kind"] == "cancel")
    assert isinstance(shop.SHOP, DBDomain) and isinstance(shop.make_shop_env(task), Database)
    assert shop.check(task.golden.answer, task, shop.replay(task)) == 1.0
    assert shop.SHOP.golden_hash(task) == shop.replay(task).state_hash()
