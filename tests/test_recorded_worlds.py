"""Bring your own recorded world, end to end, on the small world of tests/data/recorded_world/ (written
for orchlib): recorded OpenAI-format conversations become replayed episodes (scripted agent per task
id, replayed user with its stop marker), a benchmark's tools (schemas plus callables all named
`invoke(data, ...)`) become a database environment in one call, and a recording with nested fields,
recorded costs, a 0-10 grade scale and a bad row becomes priced replay tools. The same steps as
docs/recorded-worlds.md; every figure is worked out by hand from the files."""

from __future__ import annotations

import importlib.util
import json
import warnings

import pytest
from conftest import REPO

from orchlib.env import Environment
from orchlib.chat import render_call
from orchlib.envs.db import DBDomain, state_hash
from orchlib.models import build_tokenizer
from orchlib.openai_messages import read_openai_jsonl, replayed_user, to_openai_messages
from orchlib.prices import load_prices
from orchlib.rollout import RolloutConfig, rollout
from orchlib.tasks import Golden, Task
from orchlib.testing import ScriptedEngine
from orchlib.tools import Toolbox, build_tool
from orchlib.recordings import ReplaySettings, load_recording
from orchlib.tools.replay import replay_cards
from orchlib.trajectory import ToolCall

WORLD = REPO / "tests" / "data" / "recorded_world"
TOK = build_tokenizer()
CONFIG = RolloutConfig(max_turns=8, max_new_tokens=200, max_total_tokens=4096)


def _tools_module():
    spec = importlib.util.spec_from_file_location("recorded_world_tools", WORLD / "tools.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _domain(**kw) -> DBDomain:
    schemas = json.loads((WORLD / "tools.json").read_text(encoding="utf-8"))
    tools = _tools_module().TOOLS
    return DBDomain("store", lambda task: json.loads((WORLD / "db.json").read_text(encoding="utf-8")),
                    [(s, tools[s["function"]["name"]].invoke) for s in schemas], state="data",
                    write_tools={"cancel_pending_order"}, **kw)


def _tasks(domain: DBDomain, trajectories) -> list[Task]:
    facts = {t["task_id"]: t for t in json.loads((WORLD / "tasks.json").read_text(encoding="utf-8"))}
    return [Task(id=t.task_id, prompt=t.prompt, tools=sorted(domain.functions), state=domain.make_state,
                 checker=domain.check, user=replayed_user(t), meta={"required": facts[t.task_id]["outputs"]},
                 golden=Golden(calls=[ToolCall(**a) for a in facts[t.task_id]["actions"]]))
            for t in trajectories]


def test_recorded_conversations_replay_as_episodes_with_the_benchmarks_tools_and_reward():
    recorded = read_openai_jsonl(WORLD / "conversations.jsonl")
    assert [t.task_id for t in recorded] == ["cancel-ana", "total-ben"]
    assert recorded[0].prompt == recorded[1].prompt == "Hi, I need help with an order."  # the same opening
    domain = _domain(copy="fresh")  # the loader reads the file: a new database per episode, nothing copied
    tasks = _tasks(domain, recorded)
    engine = ScriptedEngine.from_trajectories(TOK, recorded)  # keyed by task id, not by the opening words
    envs: list
    replayed, envs = rollout(Environment(train=tasks, tools=domain.toolbox), engine, config=CONFIG, return_states=True)
    for old, new in zip(recorded, replayed):
        assert [turn.text for turn in new.turns] == [turn.text for turn in old.turns]  # each task its own script
        # the benchmark's tools answer as they answered in the recording
        assert [o.content for t in new.turns for o in t.observations] == \
               [o.content for t in old.turns for o in t.observations]
        # the user replays its recorded replies; the last one holds the stop marker: it ends the
        # conversation, and the marker is not shown to the agent
        assert new.finish_reason == "user_stop"
        assert new.turns[-1].user.done and new.turns[-1].user.text == old.turns[-1].user.text.replace(
            "###STOP###", "").strip()
        assert new.outcome == 1.0  # "$23,553" told to the user holds the required "23553"
    assert envs[0]["orders"]["#W1001"]["status"] == "cancelled" and envs[1]["orders"]["#W1002"]["status"] == "delivered"
    # The reward is the benchmark's: the final database against the golden actions' one, by hash.
    db = json.loads((WORLD / "db.json").read_text(encoding="utf-8"))
    db["orders"]["#W1001"].update(status="cancelled", cancel_reason="ordered by mistake")
    assert domain.golden_hash(tasks[0]) == state_hash(db) == state_hash(envs[0])


def test_a_recorded_conversation_goes_out_as_it_came_in():
    rows = [json.loads(line) for line in (WORLD / "conversations.jsonl").read_text(encoding="utf-8").splitlines()]
    for row, traj in zip(rows, read_openai_jsonl(WORLD / "conversations.jsonl")):
        assert to_openai_messages(traj) == row["messages"]
        assert traj.meta["system"] == row["messages"][0]["content"]
        assert traj.calls == {"cancel-ana": {"cancel_pending_order": 1, "get_order_details": 1},
                              "total-ben": {"get_order_details": 1}}[traj.task_id]


def test_a_recording_with_nested_fields_recorded_costs_a_grade_scale_and_a_bad_row():
    path = WORLD / "recording.jsonl"
    columns = dict(prompt_column="question", response_column="response", grade_column="score", grade_scale=(0, 10),
                   tokens_in_column="usage.prompt_tokens", tokens_out_column="usage.completion_tokens",
                   tokens_reasoning_column="usage.completion_tokens_details.reasoning_tokens",
                   cost_column="cost", latency_column="latency", on_error="skip")
    with pytest.warns(UserWarning, match=r"1 bad row\(s\) left out") as caught:
        cards = replay_cards(path, prices=load_prices(), latency={"gpt-5": {"seconds": 30.0}, "Qwen/Qwen3-32B": 2.0},
                             output_includes_reasoning={"gpt-5": True}, **columns)
    skipped = f"{path}:6: score: not a grade on the scale [0, 10]: 11"
    assert skipped in str(caught[0].message)
    assert load_recording(path, ReplaySettings(path=str(path), model="", **columns)).skipped == [skipped]
    gpt5, qwen = (build_tool(c) for c in cards)
    assert [c.name for c in cards] == ["gpt-5", "Qwen_Qwen3-32B"]
    assert [c.latency.seconds for c in cards] == [30.0, 2.0]  # per model, declared for calls without a time
    assert [c.price.per_m_input for c in cards] == [1.25, 0.8]  # from the table ("Qwen/Qwen3-32B" is an alias)

    from orchlib.tools import ToolContext

    def ask(tool, question):
        return tool.call_sync({}, ToolContext(task_id="q", prompt=question))

    obs = ask(gpt5, "What is 17 * 23?")
    # OpenAI's completion_tokens already count the reasoning; billed as recorded, not re-priced
    assert (obs.tokens_out, obs.tokens_reasoning, obs.cost_usd, obs.latency_s) == (120, 100, 0.0004, 6.5)
    assert obs.meta["grade"] == 1.0
    obs = ask(qwen, "What is the square root of 1764?")
    # no recorded cost: priced from tokens, reasoning counted apart: 44 in, 8 + 300 out, all at $0.8/M
    assert (obs.tokens_in, obs.tokens_out, obs.latency_s) == (44, 308, 2.0)
    assert obs.cost_usd == pytest.approx((44 + 308) * 0.8 / 1e6, rel=1e-12)
    assert obs.meta["grade"] == pytest.approx(0.2)
    assert ask(qwen, "How many primes are there below 20?").error_kind == "tool_failure"  # its row was skipped
    # The alternative: re-priced at the table's rates (1.25 $/M in, 10 $/M out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        repriced = build_tool(replay_cards(path, ["gpt-5"], prices=load_prices(), output_includes_reasoning=True,
                                           billing="reprice", **columns)[0])
    assert ask(repriced, "What is 17 * 23?").cost_usd == pytest.approx((40 * 1.25 + 120 * 10.0) / 1e6, rel=1e-12)


def test_recorded_answers_score_episodes_through_the_recorded_checker():
    path = WORLD / "recording.jsonl"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the bad row, as above
        cards = replay_cards(path, prices=load_prices(), prompt_column="question", grade_column="score",
                             grade_scale=(0, 10), on_error="skip", tokens_in_column="usage.prompt_tokens",
                             tokens_out_column="usage.completion_tokens", cost_column="cost")
    box = Toolbox(build_tool(c) for c in cards)
    questions = ["What is 17 * 23?", "What is the square root of 1764?"]
    tasks = [Task(id=f"q{i}", prompt=q, checker="recorded", answer=a, tools=["Qwen_Qwen3-32B"])
             for i, (q, a) in enumerate(zip(questions, ["391", "42"]))]
    engine = ScriptedEngine(TOK, [render_call(ToolCall(name="Qwen_Qwen3-32B", arguments={}))])
    config = CONFIG.model_copy(update={"policy_price_in": 0.0, "policy_price_out": 0.0})
    got = rollout(Environment(train=tasks, tools=box), engine, config=config)
    assert [t.outcome for t in got] == [1.0, pytest.approx(0.2)]  # 10/10 and 2/10
    assert [t.cost_usd for t in got] == [pytest.approx(50 * 0.8 / 1e6), pytest.approx(52 * 0.8 / 1e6)]
