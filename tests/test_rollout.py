"""The orchestration loop with scripted policies and the real tiny model."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import torch

from orchlib.env import Environment
from orchlib.chat import IM_END, parse_tool_calls, render_assistant
from orchlib.engines import SamplingParams, TransformersEngine
from orchlib.prompting import render_prompt
from orchlib.rollout import RolloutConfig, rollout
from orchlib.tasks import PROFILES, Task
from orchlib.testing import ScriptedEngine
from orchlib.tools import Toolbox
from orchlib.tools.function import FunctionTool
from orchlib.trajectory import ToolCall, read_jsonl, write_jsonl


async def add(a: int, b: int) -> str:
    """Add two integers slowly.

    Args:
        a: first addend
        b: second addend
    """
    await asyncio.sleep(0.3)
    return str(a + b)


async def mul(a: int, b: int) -> str:
    """Multiply two integers slowly.

    Args:
        a: first factor
        b: second factor
    """
    await asyncio.sleep(0.3)
    return str(a * b)


async def sleepy(seconds: float) -> str:
    """Sleep, then say so.

    Args:
        seconds: how long
    """
    await asyncio.sleep(seconds)
    return "slept"


def oracle(question: str) -> str:
    """An answering tool whose answer ends the episode.

    Args:
        question: ignored
    """
    return "42"


@pytest.fixture(scope="module")
def toolbox():
    return Toolbox([FunctionTool.from_function(add), FunctionTool.from_function(mul),
                    FunctionTool.from_function(sleepy),
                    FunctionTool.from_function(oracle, final=True)])


def call(name, **args):
    return render_assistant("", [ToolCall(name=name, arguments=args)])


TASK = Task(id="t1", prompt="What is (1+2)*4?", answer="12", checker="numeric", category="arithmetic",
            preference=PROFILES["thrifty"])


def test_several_turns_and_concurrent_calls(tiny_policy, toolbox):
    _, tok = tiny_policy
    two_calls = render_assistant("Both at once.", [ToolCall(name="add", arguments={"a": 1, "b": 2}),
                                                   ToolCall(name="mul", arguments={"a": 3, "b": 4})])
    engine = ScriptedEngine(tok, [two_calls, call("mul", a=3, b=4), "12"])
    cfg = RolloutConfig(policy_seconds_per_token=0.001, max_new_tokens=200)
    t0 = time.perf_counter()
    [traj] = rollout(Environment(train=[TASK], tools=toolbox), engine, config=cfg)
    wall = time.perf_counter() - t0
    assert traj.finish_reason == "answer" and traj.final_answer == "12" and traj.outcome == 1.0
    assert traj.calls == {"add": 1, "mul": 2}
    assert traj.errors == {}
    first = traj.turns[0]
    assert [o.content for o in first.observations] == ["3", "12"]
    # the two 0.3 s calls ran concurrently: the turn's latency is generation + the longest call
    longest = max(o.latency_s for o in first.observations)
    assert 0.3 <= longest < 0.5
    assert first.latency_s == pytest.approx(first.gen_latency_s + longest)
    assert first.gen_latency_s == pytest.approx(first.tokens_out * 0.001)
    assert wall < 0.3 * 3 + 0.5  # 3 calls of 0.3 s over 2 turns: sequential would be ≥ 0.9 s
    assert traj.latency_s == pytest.approx(sum(t.latency_s for t in traj.turns))
    # the policy's own tokens are priced by its card (0.2 / 0.2 USD per M ids by default)
    own = sum(t.cost_usd for t in traj.turns)
    assert traj.cost_usd == pytest.approx(own) and traj.cost_usd > 0
    assert engine.calls == [1, 1, 1]


def test_errors_become_observations_and_are_counted(tiny_policy, toolbox):
    _, tok = tiny_policy
    turns = ['<tool_call>{"name": "add", "arguments": {"a": 1,}}</tool_call>',     # malformed JSON
             call("subtract", a=1, b=2),                                         # unknown tool
             call("add", a="one", b=2),                                          # schema violation
             call("sleepy", seconds=2.0),                                        # timeout
             "12"]
    engine = ScriptedEngine(tok, turns)
    [traj] = rollout(Environment(train=[TASK], tools=toolbox), engine, config=RolloutConfig(max_turns=6,
                                                                                            tool_timeout_s=0.2))
    assert traj.errors == {"malformed_call": 1, "unknown_tool": 1, "schema_violation": 1, "timeout": 1}
    kinds = [[o.error_kind for o in t.observations] for t in traj.turns]
    assert kinds == [["malformed_call"], ["unknown_tool"], ["schema_violation"], ["timeout"], []]
    # the policy reads each error in the next prompt
    text = tok.decode(traj.ids, skip_special_tokens=False)
    for needle in ["invalid JSON", "subtract", "do not match its schema", "within 0.2 s"]:
        assert needle in text
    assert traj.final_answer == "12" and traj.outcome == 1.0
    assert traj.turns[3].observations[0].latency_s == pytest.approx(0.2, abs=0.1)


def test_final_tool_ends_episode(tiny_policy, toolbox):
    _, tok = tiny_policy
    engine = ScriptedEngine(tok, [call("oracle", question="?"), "never reached"])
    task = TASK.model_copy(update={"answer": "42"})
    [traj] = rollout(Environment(train=[task], tools=toolbox), engine, config=RolloutConfig())
    assert traj.finish_reason == "final_tool" and traj.final_answer == "42" and traj.outcome == 1.0
    assert len(traj.turns) == 1


def test_max_turns_and_token_budget(tiny_policy, toolbox):
    _, tok = tiny_policy
    engine = ScriptedEngine(tok, [call("add", a=1, b=1)], on_end="repeat")  # a policy stuck in a loop
    [traj] = rollout(Environment(train=[TASK], tools=toolbox), engine, config=RolloutConfig(max_turns=3))
    assert traj.finish_reason == "max_turns" and len(traj.turns) == 3 and traj.calls == {"add": 3}
    assert traj.final_answer is None and traj.outcome == 0.0
    [traj] = rollout(Environment(train=[TASK], tools=toolbox), ScriptedEngine(tok, [call("add", a=1, b=1)],
                                                                              on_end="repeat"),
                     config=RolloutConfig(max_turns=50, max_total_tokens=600))
    assert traj.finish_reason == "token_budget" and len(traj.ids) <= 600


def test_ids_and_mask_line_up_with_the_conversation(tiny_policy, toolbox):
    _, tok = tiny_policy
    script = [render_assistant("Let me add.", [ToolCall(name="add", arguments={"a": 1, "b": 2})]),
              render_assistant("", [ToolCall(name="add", arguments={"a": 5, "b": 7}),
                                    ToolCall(name="mul", arguments={"a": 2, "b": 2})]),
              "The answer is 12"]
    cfg = RolloutConfig(max_new_tokens=200)
    [traj] = rollout(Environment(train=[TASK], tools=toolbox), ScriptedEngine(tok, script), config=cfg)
    eos = tok.convert_tokens_to_ids(IM_END)
    sampled = [i for i, m in zip(traj.ids, traj.mask) if m]
    assert tok.decode(sampled, skip_special_tokens=False) == "".join(t + IM_END for t in script)
    assert [t.text for t in traj.turns] == script
    # full sequence = prompt + (sampled + observation segment)* + final sampled turn, in order
    prompt = render_prompt(TASK, toolbox.schemas(), tok, cfg)
    assert traj.ids[:traj.prompt_len] == tok.encode(prompt, add_special_tokens=False)
    assert all(m == 0 for m in traj.mask[:traj.prompt_len]) and traj.ids[-1] == eos and traj.mask[-1] == 1
    # and it is exactly what the chat template renders for the same messages
    system = prompt.split("<|im_start|>system\n")[1].split("\n\n# Tools")[0]
    msgs = [{"role": "system", "content": system}] + traj.to_messages()
    for m in msgs:  # the template renders calls itself; give it the parsed form
        if m["role"] == "assistant":
            m["content"], calls = parse_tool_calls(m["content"])
            if calls:
                m["tool_calls"] = [{"type": "function", "function": c.model_dump()} for c in calls]
    rendered = tok.apply_chat_template(msgs, tools=toolbox.schemas(), tokenize=False)
    assert tok.decode(traj.ids, skip_special_tokens=False) + "\n" == rendered
    # mask runs: sampled ids are exactly the turns' tokens
    assert sum(traj.mask) == sum(t.tokens_out for t in traj.turns) == len(traj.logprobs) - traj.mask.count(0)


def test_real_model_logprobs_match_a_forward_pass(tiny_policy, toolbox):
    model, tok = tiny_policy
    engine = TransformersEngine(model, tok, seed=0)
    tasks = [TASK, TASK.model_copy(update={"id": "t2", "prompt": "Add 17 and 25."})]
    trajs = rollout(Environment(train=tasks, tools=toolbox), engine, config=RolloutConfig(max_new_tokens=24),
                    group_size=3, seed=1)
    assert len(trajs) == 6 and [t.task_id for t in trajs] == ["t1"] * 3 + ["t2"] * 3
    for t in trajs:
        ids = torch.tensor([t.ids])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits.float(), -1)[0, :-1].gather(-1, ids[0, 1:, None])[:, 0]
        mask = torch.tensor(t.mask[1:], dtype=torch.bool)
        diff = (logp[mask] - torch.tensor(t.logprobs[1:])[mask]).abs().max().item()
        assert diff <= 1e-4
        assert sum(t.mask) == sum(turn.tokens_out for turn in t.turns) > 0


def test_engine_batches_and_seeds(tiny_policy):
    model, tok = tiny_policy
    engine = TransformersEngine(model, tok)
    prompts = [tok.encode("hello"), tok.encode("What is the capital of France?")]
    a = engine.generate(prompts, SamplingParams(max_new_tokens=8, seed=5))
    b = engine.generate(prompts, SamplingParams(max_new_tokens=8, seed=5))
    assert [g.ids for g in a.outputs] == [g.ids for g in b.outputs]
    greedy = engine.generate(prompts[:1], SamplingParams(max_new_tokens=8, temperature=0))
    with torch.no_grad():
        ref = model.generate(torch.tensor([prompts[0]]), max_new_tokens=8, do_sample=False)[0, len(prompts[0]):]
    assert greedy.outputs[0].ids == ref.tolist()[:len(greedy.outputs[0].ids)]


def test_jsonl_round_trip(tiny_policy, toolbox, tmp_path):
    _, tok = tiny_policy
    trajs = rollout(Environment(train=[TASK], tools=toolbox), ScriptedEngine(tok, [call("add", a=1, b=2), "3"]),
                    config=RolloutConfig(), group_size=2)
    path = write_jsonl(trajs, tmp_path / "t.jsonl")
    back = read_jsonl(path)
    assert back == trajs
    assert [json.loads(line) for line in path.read_text().splitlines()] == [t.model_dump(mode="json") for t in trajs]
    (tmp_path / "bad.jsonl").write_text(path.read_text().splitlines()[0] + "\n{not json\n")
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        read_jsonl(tmp_path / "bad.jsonl")


def test_a_tool_the_task_does_not_offer_is_unknown(tiny_policy, toolbox):
    _, tok = tiny_policy
    task = TASK.model_copy(update={"tools": ["add"]})
    engine = ScriptedEngine(tok, [render_assistant("", [ToolCall(name="mul", arguments={"a": 2, "b": 3}),
                                                        ToolCall(name="add", arguments={"a": 2, "b": 3})]), "5"])
    [traj] = rollout(Environment(train=[task], tools=toolbox), engine, config=RolloutConfig(max_new_tokens=200))
    obs = traj.turns[0].observations
    assert [o.error_kind for o in obs] == ["unknown_tool", None] and obs[1].content == "5"
    assert "offers add" in obs[0].error and traj.errors == {"unknown_tool": 1}
    prompt = tok.decode(traj.ids[:traj.prompt_len])
    assert '"mul"' not in prompt and '"add"' in prompt  # only offered tools are listed


def test_preference_is_rendered_in_the_system_turn_after_the_task_or_opening_the_reply(tiny_policy, toolbox):
    _, tok = tiny_policy
    line = "Preference (thrifty): accuracy=1, cost=1, latency=0"
    system = render_prompt(TASK, toolbox.schemas(), tok, RolloutConfig())
    user = render_prompt(TASK, toolbox.schemas(), tok, RolloutConfig(preference_at="user"))
    reply = render_prompt(TASK, toolbox.schemas(), tok, RolloutConfig(preference_at="assistant"))
    end = render_prompt(TASK, toolbox.schemas(), tok, RolloutConfig(preference_at="system_end"))
    hidden = render_prompt(TASK, toolbox.schemas(), tok, RolloutConfig(show_preference=False))
    assert system.count(line) == 1 and user.count(line) == 1 and reply.count(line) == 1 and end.count(line) == 1
    assert line not in hidden
    assert system.index(line) < system.index("# Tools") < system.index(TASK.prompt)
    assert f"<|im_start|>user\n{TASK.prompt}\n\n{line}<|im_end|>\n<|im_start|>assistant\n" in user
    assert f"</tools>\n{line}<|im_end|>\n<|im_start|>user\n{TASK.prompt}<|im_end|>" in end
    assert reply.endswith(f"<|im_start|>user\n{TASK.prompt}<|im_end|>\n<|im_start|>assistant\n{line}\n")
    assert system.replace("\n" + line, "") == hidden == user.replace("\n\n" + line, "")
    assert hidden == reply.removesuffix(line + "\n") == end.replace("\n" + line, "")


@pytest.mark.parametrize("where", ["system", "user", "assistant", "system_end"])
def test_preference_style_name_shows_the_profiles_name_where_p_goes_and_no_weight(tiny_policy, toolbox, where):
    _, tok = tiny_policy
    weights = render_prompt(TASK, toolbox.schemas(), tok, RolloutConfig(preference_at=where))
    name = render_prompt(TASK, toolbox.schemas(), tok, RolloutConfig(preference_at=where, preference_style="name"))
    line = "Preference (thrifty): accuracy=1, cost=1, latency=0"
    assert name == weights.replace(line, "Preference (thrifty):") and name.count("Preference (thrifty):") == 1
    assert "cost=" not in name and "accuracy=" not in name


@pytest.mark.parametrize("where", ["system", "user", "assistant", "system_end"])
def test_preference_style_instruction_puts_the_words_before_the_weights_where_p_goes(tiny_policy, toolbox, where):
    _, tok = tiny_policy
    weights = render_prompt(TASK, toolbox.schemas(), tok, RolloutConfig(preference_at=where))
    said = render_prompt(TASK, toolbox.schemas(), tok, RolloutConfig(preference_at=where,
                                                                     preference_style="instruction"))
    line = "Preference (thrifty): accuracy=1, cost=1, latency=0"
    words = ("Preference (thrifty): Get the answer right. Every dollar spent counts against you: call a cheap tool "
             "that is good enough rather than a dear one. Time does not matter. (accuracy=1, cost=1, latency=0)")
    assert said == weights.replace(line, words) and said.count("Preference (") == 1
    # words written for a profile replace the generated ones for that profile only
    own = RolloutConfig(preference_at=where, preference_style="instruction",
                        preference_words={"thrifty": "Spend as little as you can.", "accuracy": "Be right."})
    assert render_prompt(TASK, toolbox.schemas(), tok, own) == weights.replace(
        line, "Preference (thrifty): Spend as little as you can. (accuracy=1, cost=1, latency=0)")
    other = own.model_copy(update={"preference_words": {"accuracy": "Be right."}})
    assert render_prompt(TASK, toolbox.schemas(), tok, other) == said
    # and only under the instruction style
    plain = own.model_copy(update={"preference_style": "weights"})
    assert render_prompt(TASK, toolbox.schemas(), tok, plain) == weights
    # the words style: the same words, no weights after them
    alone = own.model_copy(update={"preference_style": "words"})
    assert render_prompt(TASK, toolbox.schemas(), tok, alone) == weights.replace(
        line, "Preference (thrifty): Spend as little as you can.")
    # a profile with no words written keeps its weights: the sentences say only each weight's sign
    generated = alone.model_copy(update={"preference_words": {"accuracy": "Be right."}})
    assert render_prompt(TASK, toolbox.schemas(), tok, generated) == said


# A ChatML template that drops `tools=` (as SmolLM2's does): the rollout must list the tools itself.
PLAIN_CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.mark.parametrize("template", ["renders tools", "drops tools"])
def test_brief_lists_tools_as_compact_does_and_each_description_on_a_line(tiny_policy, toolbox, template):
    import copy

    from orchlib.chat import TOOLS_HEADER, template_renders_tools
    from orchlib.prompting import tool_schemas

    _, tok = tiny_policy
    if template == "drops tools":
        tok = copy.deepcopy(tok)
        tok.chat_template = PLAIN_CHATML
    assert template_renders_tools(tok) == (template == "renders tools")
    task = TASK.model_copy(update={"tools": ["mul", "add"]})
    compact = render_prompt(task, tool_schemas(toolbox, task, "compact"), tok, RolloutConfig(tool_schema="compact"))
    brief = render_prompt(task, tool_schemas(toolbox, task, "brief"), tok, RolloutConfig(tool_schema="brief"))
    # written out from the functions' docstrings, in the toolbox's order
    notes = "\nWhat the tools are:\nadd: Add two integers slowly.\nmul: Multiply two integers slowly."
    assert brief.count(notes) == 1 and brief.replace(notes, "") == compact
    assert '"description"' not in brief and "sleepy" not in brief  # only offered tools, and not in the list
    if template == "drops tools":
        assert notes + "<|im_end|>" in brief and brief.index("</tools>") < brief.index(notes)
    else:  # the template lists the tools after the system text, which the notes end
        assert notes + TOOLS_HEADER in brief
