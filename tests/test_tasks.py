"""Task files and answer checkers, against hand-written expectations."""

from __future__ import annotations

import json

import pytest

from orchlib.tasks import (CHECKERS, PROFILES, Golden, Preference, Task, TaskFileError, check_answer,
                           extract_number, load_tasks, save_tasks)
from orchlib.trajectory import ToolCall


def _task(**kw) -> Task:
    base = dict(id="t", prompt="What is 2 + 2?", answer="4", checker="numeric")
    return Task(**{**base, **kw})


@pytest.mark.parametrize("text, want", [
    ("#### 18", 18.0), ("She makes $<<9*2=18>>18.\n#### 18", 18.0), ("1,234.5 apples", 1234.5),
    ("first 3 then 7.", 7.0), ("-12", -12.0), ("2.5e3", 2500.0), ("no digits", None), (None, None),
])
def test_extract_number(text, want):
    assert extract_number(text) == want


@pytest.mark.parametrize("checker, answer, gold, want", [
    ("exact", "  Paris. ", "paris", 1.0), ("exact", "Paris, France", "paris", 0.0),
    ("exact", "New   York", "new york", 1.0),
    ("contains", "It is Paris, France", "paris", 1.0), ("contains", "Lyon", "paris", 0.0),
    ("contains", "The answer is He.", "h", 1.0),  # contains is lenient: why "mentions" exists
    ("mentions", "[simulated] The answer is He.", "He", 1.0), ("mentions", "The answer is He.", "h", 0.0),
    ("mentions", "South America.", "south america", 1.0), ("mentions", "8 in stock", "8", 1.0),
    ("mentions", "18 in stock", "8", 0.0), ("mentions", "$14.80", "80", 0.0),
    ("mentions", "costs $14.75.", "14.75", 1.0),
    ("numeric", "The answer is 10,063", "10063", 1.0), ("numeric", "10063.0000001", "10063", 1.0),
    ("numeric", "10064", "10063", 0.0), ("numeric", "no number", "5", 0.0),
    ("sympy", "2*(x+1)", "2x+2", 1.0), ("sympy", "x^2", "x*x", 1.0), ("sympy", "x+1", "x", 0.0),
    ("sympy", "((", "x", 0.0),
])
def test_checkers(checker, answer, gold, want):
    assert check_answer(_task(checker=checker, answer=gold), answer) == want


def test_checkers_score_missing_answer_zero():
    for name in CHECKERS:
        assert check_answer(_task(checker=name), None) == 0.0


def test_numeric_tolerance_from_meta():
    t = _task(answer="100", meta={"tolerance": 0.05})
    assert t.score("104") == 1.0 and t.score("106") == 0.0


def _half(answer, task, env):
    return 0.5 if env == "db" else 0.0


def test_import_path_checker_and_env_factory():
    t = _task(checker=f"{__name__}:_half", state=f"{__name__}:_factory")
    assert t.make_state() == "db"
    assert t.score("x", t.make_state()) == 0.5
    with pytest.raises(ValueError, match="pkg.module:function"):
        _task(checker="no_colon_here").score("4")


def _factory(task):
    return "db"


def test_preference_render_is_stable():
    p = Preference(name="mine", cost=0.5, tools={"gpt4": -1.0, "calculator": 1}, extra={"z": 2})
    assert p.render() == ("Preference (mine): accuracy=1, cost=0.5, latency=0, calculator=1, gpt4=-1, z=2")
    assert set(PROFILES) == {"accuracy", "thrifty", "fast", "local-only"}


def test_preference_instruction_says_each_weight_by_its_sign_then_the_weights():
    p = Preference(name="mine", cost=0.5, latency=-1, tools={"gpt4": -1.0, "calculator": 1, "x": 0}, extra={"z": 2})
    assert p.instruction() == (
        "Get the answer right. Every dollar spent counts against you: call a cheap tool that is good enough "
        "rather than a dear one. Taking longer counts for you. Calls to calculator count for you. "
        "Calls to gpt4 count against you.")
    assert p.render(instruction=True) == f"Preference (mine): {p.instruction()} ({p.render().split(': ', 1)[1]})"
    accuracy, thrifty = PROFILES["accuracy"].instruction(), PROFILES["thrifty"].instruction()
    assert accuracy == ("Get the answer right. What a tool costs does not matter: a dear tool is worth its price if "
                        "it is more often right. Time does not matter.")
    # the two demo profiles differ in a clause, not in one digit
    assert len(set(thrifty.split()) - set(accuracy.split())) >= 10
    assert PROFILES["thrifty"].render(weights=False, instruction=True) == "Preference (thrifty):"
    vector = p.render().split(": ", 1)[1]
    assert p.render(instruction=True, words="Mind the bill.") == f"Preference (mine): Mind the bill. ({vector})"
    assert p.render(words="Mind the bill.") == p.render()  # words are an instruction's: none without one
    # the words alone, no vector after them
    assert p.render(instruction=True, words="Mind the bill.", vector=False) == "Preference (mine): Mind the bill."
    assert p.render(instruction=True, vector=False) == f"Preference (mine): {p.instruction()}"


def test_save_and_load_round_trip(tmp_path):
    tasks = [
        _task(id="a", preference=PROFILES["thrifty"], tools=["calculator"], category="arithmetic",
              golden=Golden(calls=[ToolCall(name="calculator", arguments={"expression": "2 + 2"})], answer="4",
                            alternatives=[[ToolCall(name="python", arguments={"code": "print(2 + 2)"})]])),
        _task(id="b", checker="exact", answer="Paris", meta={"source": "x"}),
    ]
    path = save_tasks(tasks, tmp_path / "sub" / "tasks.jsonl")
    assert load_tasks(path) == tasks
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temporary file left


def _write(tmp_path, lines: list[str]):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_malformed_json_names_line(tmp_path):
    good = json.dumps({"id": "a", "prompt": "p"})
    path = _write(tmp_path, [good, "", '{"id": "b", "prompt": '])
    with pytest.raises(TaskFileError, match=r"bad\.jsonl:3: invalid JSON"):
        load_tasks(path)


@pytest.mark.parametrize("obj, field", [
    ({"id": "a"}, "prompt"),                                            # missing field
    ({"id": "a", "prompt": "p", "colour": 1}, "colour"),                # unknown field
    ({"id": "a", "prompt": "p", "tools": "calculator"}, "tools"),       # wrong type
    ({"id": "a", "prompt": "p", "preference": {"cost": "lots"}}, "preference.cost"),
    ({"id": "a", "prompt": "p", "golden": {"calls": [{"name": "x", "args": {}}]}}, "golden.calls.0.args"),
])
def test_malformed_task_names_line_and_field(tmp_path, obj, field):
    path = _write(tmp_path, [json.dumps({"id": "ok", "prompt": "fine"}), json.dumps(obj)])
    with pytest.raises(TaskFileError) as e:
        load_tasks(path)
    assert str(e.value).startswith(f"{path}:2: {field}:")


def test_non_object_line_is_an_error(tmp_path):
    path = _write(tmp_path, ["[1, 2]"])
    with pytest.raises(TaskFileError, match=r":1: \(task\): "):
        load_tasks(path)


def test_bad_bytes_name_their_line_and_a_bom_is_accepted(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"id": "a", "prompt": "p"}\n{"id": "b", "prompt": "caf\xe9"}\n')
    with pytest.raises(TaskFileError, match=r"latin1\.jsonl:2: not UTF-8: byte 0xe9"):
        load_tasks(path)
    path.write_bytes(b'\xef\xbb\xbf{"id": "a", "prompt": "p"}\r\n')  # as some editors save it
    assert [t.id for t in load_tasks(path)] == ["a"]


@pytest.mark.parametrize("obj, message", [
    ({"id": "a", "prompt": "p", "checker": "numerc"}, "checker: unknown checker 'numerc'"),
    ({"id": "a", "prompt": "p", "state": "shop"}, "state: expected an import path"),
    # NaN is not JSON: the line is refused as it is read, before any field
    ({"id": "a", "prompt": "p", "preference": {"cost": float("nan")}}, "NaN is not a JSON number"),
])
def test_fields_that_would_fail_only_when_scored_fail_on_load(tmp_path, obj, message):
    path = _write(tmp_path, [json.dumps(obj)])
    with pytest.raises(TaskFileError) as e:
        load_tasks(path)
    assert str(e.value).startswith(f"{path}:1: {message}")


def test_the_episode_state_factory_is_written_and_read_as_state(tmp_path):
    """`Task.state` names the factory of an episode's state; a task file says `state`, and a file that still
    says `env` is refused, naming the line and field, rather than run without its database."""
    task = _task(state="orchlib.envs.airline:AIRLINE.make_state")
    save_tasks([task], tmp_path / "t.jsonl")
    line = json.loads((tmp_path / "t.jsonl").read_text())
    assert line["state"] == "orchlib.envs.airline:AIRLINE.make_state" and "env" not in line
    [back] = load_tasks(tmp_path / "t.jsonl")
    assert back.state == task.state and back.make_state()["reservations"]["R1002"]["status"] != "cancelled"
    path = _write(tmp_path, [json.dumps({"id": "a", "prompt": "p", "env": "orchlib.envs.airline:AIRLINE.make_state"})])
    with pytest.raises(TaskFileError, match=r":1: env: "):
        load_tasks(path)


def test_duplicate_ids_are_an_error(tmp_path):
    path = _write(tmp_path, [json.dumps({"id": "a", "prompt": "p"}), json.dumps({"id": "b", "prompt": "q"}),
                             json.dumps({"id": "a", "prompt": "r"})])
    with pytest.raises(TaskFileError, match=r":3: id: 'a' is already the id of line 1"):
        load_tasks(path)
