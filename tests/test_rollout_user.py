"""A user in the loop, end to end: conversations through the airline database with a scripted user,
τ²-style scoring, the user's cost apart, token masks, replays, turn endings and one GRPO step."""

from __future__ import annotations

import asyncio
import time

import pytest

from orchlib.env import Environment
from orchlib.chat import IM_END, render_call
from orchlib.envs.airline import AIRLINE, INITIAL, airline_tasks
from orchlib.envs.db import state_hash
from orchlib.users import ReplayedUser
from orchlib.models import build_tokenizer
from orchlib.prompting import shown_preference, tool_schemas
from orchlib.rollout import RolloutConfig, rollout
from orchlib.tasks import Task
from orchlib.testing import ScriptedEngine
from orchlib.tools import FunctionTool, Tool, Toolbox, ToolError
from orchlib.trajectory import Observation, ToolCall, UserTurn, read_jsonl, write_jsonl

TOK = build_tokenizer()
TASKS = {t.id: t for t in airline_tasks()}
CONFIG = RolloutConfig(max_turns=8, max_new_tokens=200, max_total_tokens=4096)


def call(name: str, **arguments) -> str:
    return render_call(ToolCall(name=name, arguments=arguments))


# The agent's side of each golden conversation (the users' side is the tasks' scripted user).
CHANGE = ["Sure. What is your reservation id?",
          call("get_reservation", reservation_id="R1001"),
          call("search_flights", origin="JFK", destination="SFO", date="2024-05-11"),
          "HA101 on 2024-05-11 costs $350.00, $30.00 more than your fare. Shall I move you?",
          call("change_flight", reservation_id="R1001", flight_id="HA101"),
          "Done: you are on HA101 on 2024-05-11 and $30.00 was charged."]
CANCEL = [call("get_reservation", reservation_id="R1002"),
          "R1002 holds 2 passengers on HA201; cancelling refunds $240.00. Shall I cancel it?",
          call("cancel_reservation", reservation_id="R1002"),
          "R1002 is cancelled and $240.00 is refunded to your balance."]
TRANSFER = [call("get_reservation", reservation_id="R1003"),
            "R1003 has already flown, so it cannot be refunded.",
            call("transfer_to_human_agents", summary="refund for a flown reservation R1003"),
            "never reached: the transfer ends the conversation"]
GOLDEN = {"airline-change": CHANGE, "airline-cancel": CANCEL, "airline-transfer": TRANSFER}


def run(scripts: dict[str, list[str]], tasks=None, config=CONFIG, **kw):
    tasks = tasks or [TASKS[k] for k in scripts]
    return rollout(Environment(train=tasks, tools=AIRLINE.toolbox), ScriptedEngine(TOK, scripts, tasks=tasks),
                   config=config, **kw)


def test_the_golden_conversations_score_one_and_end_as_tau2_does():
    trajs, envs = run(GOLDEN, return_states=True)
    by = {t.task_id: t for t in trajs}
    assert [t.outcome for t in trajs] == [1.0, 1.0, 1.0]
    assert by["airline-change"].finish_reason == by["airline-cancel"].finish_reason == "user_stop"
    assert by["airline-transfer"].finish_reason == "final_tool"  # the tool ended it, its 4th turn never ran
    assert len(by["airline-transfer"].turns) == 3
    assert by["airline-transfer"].final_answer.startswith("Transferred to a human agent")
    # the envs came back: each is the episode's own database, equal to the golden replay
    for t, env in zip(trajs, envs):
        assert state_hash(env) == state_hash(AIRLINE.replay(TASKS[t.task_id]))
    change = envs[0]
    assert change["reservations"]["R1001"]["flight_id"] == "HA101"
    assert change["users"]["mia_li"]["balance_cents"] == 50000 - 3000
    assert INITIAL["reservations"]["R1001"]["flight_id"] == "HA100"  # the shared original is untouched
    # the conversation: the user's replies after the turns without calls, in the script's order
    users = [(i, t.user.text, t.user.done) for i, t in enumerate(by["airline-change"].turns) if t.user]
    assert users == [(0, "My reservation is R1001.", False), (3, "Yes, please move me to HA101.", False),
                     (5, "Thanks, that's all.", True)]


def test_user_tokens_are_in_the_ids_with_mask_zero_and_render_as_the_chat_template_does():
    [traj] = run({"airline-change": CHANGE})
    task = TASKS["airline-change"]
    # reference: the chat template over the whole conversation, rendered in one piece (the last user
    # turn ended the episode, so no ids follow it; assistant turns as the text they wrote)
    system = CONFIG.system_prompt + "\n" + shown_preference(task).render()
    msgs = [{"role": "system", "content": system}] + [{"role": m["role"], "content": m["content"]}
                                                      for m in traj.to_messages()[:-1]]
    rendered = TOK.apply_chat_template(msgs, tools=tool_schemas(AIRLINE.toolbox, task), tokenize=False)
    assert TOK.decode(traj.ids, skip_special_tokens=False) + "\n" == rendered
    assert [m["role"] for m in msgs].count("user") == 3  # the task, then the user's two replies
    sampled = TOK.decode([i for i, m in zip(traj.ids, traj.mask) if m], skip_special_tokens=False)
    assert sampled == "".join(t + IM_END for t in CHANGE)
    masked = TOK.decode([i for i, m in zip(traj.ids, traj.mask) if not m], skip_special_tokens=False)
    for reply in ("My reservation is R1001.", "Yes, please move me to HA101."):
        assert f"<|im_start|>user\n{reply}<|im_end|>" in masked and reply not in sampled
    assert len(traj.ids) == len(traj.mask) == len(traj.logprobs)
    assert traj.num_tokens == sum(len(TOK.encode(t + IM_END, add_special_tokens=False)) for t in CHANGE)


def test_the_users_cost_and_latency_are_counted_apart():
    recorded = [UserTurn(text="My reservation is R1001.", cost_usd=0.002, latency_s=1.5),
                UserTurn(text="Yes, please move me to HA101.", cost_usd=0.003, latency_s=2.0),
                UserTurn(text="Thanks.", done=True, cost_usd=0.001, latency_s=0.5)]
    task = TASKS["airline-change"].model_copy(update={"user": lambda task: ReplayedUser(recorded)})
    [traj] = run({"airline-change": CHANGE}, tasks=[task])
    assert traj.outcome == 1.0 and traj.finish_reason == "user_stop"
    assert traj.user_cost_usd == pytest.approx(0.006) and traj.user_latency_s == pytest.approx(4.0)
    # the orchestrator's own bill is its turns (its tokens + free local tools), without the user's
    assert traj.cost_usd == pytest.approx(sum(t.cost_usd for t in traj.turns))
    assert all(t.cost_usd < 0.001 for t in traj.turns)
    assert traj.latency_s == pytest.approx(sum(t.latency_s for t in traj.turns))
    assert [t.user.label for t in traj.turns if t.user] == ["replay"] * 3


@pytest.mark.parametrize("case", ["wrong_flight", "no_write", "required_missing", "ran_out_of_turns"])
def test_wrong_state_missing_outputs_and_unfinished_conversations_score_zero(case):
    script = list(CHANGE)
    config = CONFIG
    if case == "wrong_flight":    # the wrong write: same words, a different final state
        script[4] = call("cancel_reservation", reservation_id="R1001")
    elif case == "no_write":      # says it is done without doing it
        script[4] = call("get_user", user_id="mia_li")
    elif case == "required_missing":  # the right state, but the user never hears the fare difference
        script[3] = "HA101 is free the next day. Shall I move you?"
        script[5] = "Done: you are on HA101."
    else:                          # the conversation is cut by max_turns before the user ends it
        config = CONFIG.model_copy(update={"max_turns": 4})
    [traj] = run({"airline-change": script}, config=config)
    assert traj.outcome == 0.0
    assert traj.finish_reason == ("max_turns" if case == "ran_out_of_turns" else "user_stop")


def test_a_recorded_conversation_replays_with_every_output_byte_identical(tmp_path):
    first = run(GOLDEN)
    path = write_jsonl(first, tmp_path / "conversations.jsonl")
    recorded = read_jsonl(path)

    def replayed(traj):  # each task's user replays its own recording
        return lambda task: ReplayedUser.from_trajectory(traj)

    tasks = [TASKS[t.task_id].model_copy(update={"user": replayed(t)}) for t in recorded]
    again = rollout(Environment(train=tasks, tools=AIRLINE.toolbox), ScriptedEngine.from_trajectories(TOK, recorded),
                    config=CONFIG)
    for a, b in zip(recorded, again):
        assert [o.content for t in a.turns for o in t.observations] == \
               [o.content for t in b.turns for o in t.observations]
        assert [t.user.text if t.user else None for t in a.turns] == [t.user.text if t.user else None for t in b.turns]
        assert a.ids == b.ids and a.mask == b.mask and a.outcome == b.outcome == 1.0
        assert a.finish_reason == b.finish_reason


def test_the_checker_gets_the_trajectory_and_callables_are_accepted():
    seen = []

    def checker(answer, task, env, trajectory=None):
        seen.append((answer, trajectory.finish_reason, len(trajectory.turns), env["users"]["mia_li"]["balance_cents"]))
        return 0.5

    def old_style(answer, task, env):  # three arguments: still called as before
        return float(answer is not None)

    base = TASKS["airline-change"]
    tasks = [base.model_copy(update={"checker": checker, "state": AIRLINE.make_state}),
             base.model_copy(update={"id": "old", "checker": old_style})]
    trajs = rollout(Environment(train=tasks, tools=AIRLINE.toolbox), ScriptedEngine(TOK, {"airline-change": CHANGE},
                                                                                    tasks=[tasks[0]]), config=CONFIG)
    assert [t.outcome for t in trajs] == [0.5, 1.0]
    assert seen == [(CHANGE[-1], "user_stop", 6, 47000)]


class _Spy(Tool):
    """Records the conversation a tool is shown."""

    seen: list = []

    async def _run(self, arguments, context):
        _Spy.seen.append([m["role"] for m in context.messages])
        return Observation(content="ok")


def test_with_an_empty_prompt_tools_see_the_first_assistant_turn():
    def spy(note: str) -> str:
        """Look.

        Args:
            note: anything.
        """
        return note

    box = Toolbox([_Spy(FunctionTool.from_function(spy).card.model_copy(update={"backend": {}}))])
    task = Task(id="empty", prompt="", checker="contains", answer="ok")
    script = ["Hello, how can I help?" + "\n" + call("spy", note="a"), "ok"]
    _Spy.seen.clear()
    [traj] = rollout(Environment(train=[task], tools=box), ScriptedEngine(TOK, script), config=CONFIG)
    assert _Spy.seen == [["assistant"]] and traj.outcome == 1.0


def test_stateful_calls_of_a_turn_run_in_the_order_written():
    def slow_append(env: list, item: str, delay: float) -> str:
        """Append after a delay.

        Args:
            item: what to append.
            delay: seconds to wait first.
        """
        time.sleep(delay)
        env.append(item)
        return item

    box = Toolbox([FunctionTool.from_function(slow_append)])
    assert box["slow_append"].stateful
    task = Task(id="order", prompt="go", state=lambda task: [], checker=lambda a, t, state: float(state == ["a", "b"]),
                answer="x")
    turn = call("slow_append", item="a", delay=0.2) + "\n" + call("slow_append", item="b", delay=0.0)
    results = {}
    for mode in ("in_order", "concurrent"):
        cfg = CONFIG.model_copy(update={"stateful_calls": mode})
        (traj,), (env,) = rollout(Environment(train=[task], tools=box), ScriptedEngine(TOK, [turn, "done"]),
                                  config=cfg, return_states=True)
        results[mode] = (env, traj.outcome, traj.turns[0].latency_s - traj.turns[0].gen_latency_s,
                         [o.latency_s for o in traj.turns[0].observations])
    env, outcome, tools_s, each = results["in_order"]
    assert env == ["a", "b"] and outcome == 1.0
    assert tools_s == pytest.approx(sum(each))            # one after the other: the times add up
    env, outcome, tools_s, each = results["concurrent"]
    assert env == ["b", "a"] and outcome == 0.0            # scheduling decided the state
    assert tools_s == pytest.approx(max(each))


def test_a_tool_ends_the_episode_itself_even_when_its_card_is_not_final():
    assert not AIRLINE.toolbox["transfer_to_human_agents"].card.final
    obs = AIRLINE.toolbox.call_many_sync([ToolCall(name="transfer_to_human_agents", arguments={"summary": "s"})],
                                         None)
    assert obs[0].final  # before: the card's False overwrote the call's True


def test_a_script_that_runs_out_is_an_error_not_a_repeat():
    from orchlib.engines.scripted import ScriptExhausted

    # a one-turn script that writes: asked again, it must not write again
    with pytest.raises(ScriptExhausted, match="has 1 turns; turn 2 was asked"):
        run({"airline-cancel": [call("cancel_reservation", reservation_id="R1002")]})


def test_a_user_that_fails_ends_the_conversation_and_is_counted():
    class Broken:
        async def reply(self, messages):
            await asyncio.sleep(0)
            raise ToolError("user model: HTTP 503")

    task = TASKS["airline-change"].model_copy(update={"user": lambda task: Broken()})
    [traj] = run({"airline-change": CHANGE}, tasks=[task])
    assert traj.errors == {"user_failure": 1} and traj.finish_reason == "user_stop"
    assert traj.turns[0].user.error == "user model: HTTP 503"


def test_an_api_policy_talks_with_the_user_too():
    from orchlib.engines.openai import ChatReply, PolicyCall

    class FakePolicy:  # what rollout needs from an API policy, answering from a script
        name, max_in_flight = "fake", 2

        def __init__(self, script):
            self.script, self.seen = script, []

        def start(self, system, user, tools):
            return [{"role": "system", "content": system}, {"role": "user", "content": user}]

        def session(self):
            import contextlib

            return contextlib.nullcontext()

        async def chat(self, messages, tools, session):
            self.seen.append([m["role"] for m in messages])
            text = self.script[sum(m["role"] == "assistant" for m in messages)]
            from orchlib.chat import parse_tool_calls

            content, calls = parse_tool_calls(text)
            return ChatReply(text=text, content=content, calls=[PolicyCall(c) for c in calls],
                             message={"role": "assistant", "content": text}, tokens_in=10, tokens_out=5)

    class Session:
        async def __aenter__(self):
            return None

        async def __aexit__(self, *a):
            return None

    policy = FakePolicy(CHANGE)
    policy.session = lambda: Session()
    [traj] = rollout(Environment(train=[TASKS["airline-change"]], tools=AIRLINE.toolbox), policy, config=CONFIG)
    assert traj.outcome == 1.0 and traj.finish_reason == "user_stop" and traj.ids == []
    assert [t.user.text for t in traj.turns if t.user][:2] == ["My reservation is R1001.",
                                                              "Yes, please move me to HA101."]
    assert policy.seen[1][-2:] == ["assistant", "user"]  # the user's reply came back as a user message


def test_grpo_accepts_conversations_with_a_user_for_one_step(tiny_policy):
    """The trainer's own rollout runs the conversations (here scripted, one script per episode of the
    group: the golden one and a wrong write), rewards them by the database, and updates the model."""
    import torch

    from orchlib.reward import Reward
    from orchlib.train import GRPOConfig, Trainer

    class Scripted(ScriptedEngine):
        def clear_prefix_cache(self) -> None:  # the trainer frees its engine's cache after each rollout
            pass

    model, tok = tiny_policy
    task = TASKS["airline-change"]
    wrong = CHANGE[:4] + [call("cancel_reservation", reservation_id="R1001")] + CHANGE[5:]
    cfg = GRPOConfig(rollout=CONFIG, group_size=2, tasks_per_step=1, kl_coef=0.0, seed=0)
    trainer = Trainer((model, tok), Environment(train=[task], tools=AIRLINE.toolbox,
                                                reward=Reward.from_string("name: a\nreward: outcome")), cfg)
    trainer.engine = Scripted(tok, {task.id: [CHANGE, wrong]}, tasks=[task])
    before = [p.detach().clone() for p in trainer.model.parameters()]
    report = trainer.step()
    assert [t.outcome for t in report.trajectories] == [1.0, 0.0]
    assert all(t.finish_reason == "user_stop" and sum(1 for x in t.turns if x.user) == 3 for t in report.trajectories)
    assert report.rewards == [1.0, 0.0] and report.advantages[0] > 0 > report.advantages[1]
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
