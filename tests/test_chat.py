"""The chat format: special tokens, the template, and the tool-call parser."""

from __future__ import annotations

import json

import pytest

from orchlib.chat import (IM_END, IM_START, SPECIAL_TOKENS, ToolCallParseError, call_name_mask, observation_segment,
                          parse_tool_calls, render_assistant, render_call, system_text)
from orchlib.trajectory import ToolCall

TOOLS = [{"type": "function", "function": {"name": "calculator", "description": "Exact arithmetic.",
          "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}}},
         {"type": "function", "function": {"name": "search", "description": "Look things up.",
          "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}]


def test_special_tokens_are_single_ids_and_round_trip(tiny_policy):
    _, tok = tiny_policy
    seen = set()
    for s in SPECIAL_TOKENS:
        ids = tok.encode(s, add_special_tokens=False)
        assert len(ids) == 1, (s, ids)
        assert tok.decode(ids) == s
        seen.add(ids[0])
    assert len(seen) == len(SPECIAL_TOKENS)
    assert tok.eos_token == IM_END and tok.pad_token_id == tok.convert_tokens_to_ids("<|endoftext|>")


def test_digits_are_single_tokens(tiny_policy):
    _, tok = tiny_policy
    pieces = tok.tokenize("12345")
    assert [p.lstrip("Ġ") for p in pieces] == list("12345")


def _conversation():
    calls = [ToolCall(name="calculator", arguments={"expression": "17 * 3"}),
             ToolCall(name="search", arguments={"query": "atomic number of neon"})]
    return calls, [
        {"role": "system", "content": "You are an orchestrator."},
        {"role": "user", "content": "What is 17*3?"},
        {"role": "assistant", "content": "Two tools.",
         "tool_calls": [{"type": "function", "function": c.model_dump()} for c in calls]},
        {"role": "tool", "content": "51"},
        {"role": "tool", "content": "Neon: atomic number 10."},
        {"role": "assistant", "content": "51"},
    ]


def test_template_renders_tools_calls_and_observations_exactly(tiny_policy):
    _, tok = tiny_policy
    calls, msgs = _conversation()
    text = tok.apply_chat_template(msgs, tools=TOOLS, tokenize=False)
    expected = (system_text("You are an orchestrator.", TOOLS)
                + f"{IM_START}user\nWhat is 17*3?{IM_END}\n"
                + f"{IM_START}assistant\n" + render_assistant("Two tools.", calls) + IM_END
                + observation_segment(["51", "Neon: atomic number 10."])
                + "51" + IM_END + "\n")
    assert text == expected
    # tools are listed one JSON object per line inside <tools>
    inner = text.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    assert [json.loads(line) for line in inner] == TOOLS


def test_generation_prompt_opens_assistant_turn(tiny_policy):
    _, tok = tiny_policy
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text == f"{IM_START}user\nhi{IM_END}\n{IM_START}assistant\n"


@pytest.mark.parametrize("n_calls", [1, 2, 3])
def test_render_then_parse_recovers_calls(tiny_policy, n_calls):
    _, tok = tiny_policy
    calls = [ToolCall(name=f"tool_{i}", arguments={"x": i, "s": "a \"quoted\" é", "nested": {"k": [1, 2]}})
             for i in range(n_calls)]
    msgs = [{"role": "user", "content": "q"},
            {"role": "assistant", "content": "thinking",
             "tool_calls": [{"type": "function", "function": c.model_dump()} for c in calls]}]
    text = tok.apply_chat_template(msgs, tokenize=False)
    turn = text.split(f"{IM_START}assistant\n")[1].removesuffix(f"{IM_END}\n")
    content, parsed = parse_tool_calls(turn)
    assert content == "thinking"
    assert parsed == calls


def test_parser_tolerates_whitespace():
    text = 'a <tool_call>  \n\n {"name":"calc","arguments":{"e":"1+1"}}   \n</tool_call> b'
    content, calls = parse_tool_calls(text)
    assert calls == [ToolCall(name="calc", arguments={"e": "1+1"})]
    assert content == "a  b"


def test_parser_no_calls_is_plain_content():
    assert parse_tool_calls("  The answer is 5. ") == ("The answer is 5.", [])


def test_arguments_may_be_omitted():
    assert parse_tool_calls('<tool_call>{"name": "now"}</tool_call>')[1] == [ToolCall(name="now")]


@pytest.mark.parametrize("text, reason", [
    ('<tool_call>{"name": "calc", "arguments": {"e": 1}</tool_call>', "invalid JSON"),
    ("<tool_call>{'name': 'calc'}</tool_call>", "invalid JSON"),
    ('<tool_call>["calc"]</tool_call>', "expected a JSON object, got list"),
    ('<tool_call>{"arguments": {}}</tool_call>', "'name' must be a non-empty string"),
    ('<tool_call>{"name": 3}</tool_call>', "'name' must be a non-empty string"),
    ('<tool_call>{"name": "c", "arguments": "1+1"}</tool_call>', "'arguments' must be a JSON object, got str"),
    ('<tool_call>{"name": "c", "args": {}}</tool_call>', "unexpected key(s) ['args']"),
    ('<tool_call>{"name": "c"}', "never closed"),
    ('{"name": "c"}</tool_call>', "without an opening"),
    ('<tool_call><tool_call>{"name": "c"}</tool_call>', "opened again"),
])
def test_malformed_calls_say_what_is_wrong(text, reason):
    with pytest.raises(ToolCallParseError) as e:
        parse_tool_calls(text)
    assert reason in str(e.value)
    assert e.value.position >= 0


def test_render_call_is_parseable_json():
    call = ToolCall(name="calculator", arguments={"expression": "2 + 2"})
    assert parse_tool_calls(render_call(call))[1] == [call]


def test_call_name_mask_marks_exactly_the_sampled_ids_of_each_tool_name(tiny_policy):
    _, tok = tiny_policy
    prompt = tok.encode("<|im_start|>user\nuse the tools: calculator, generalist<|im_end|>\n", add_special_tokens=False)
    calls = [ToolCall(name="calculator", arguments={"expression": "2 + 3"}), ToolCall(name="generalist")]
    reply = tok.encode(render_assistant("thinking", calls) + IM_END, add_special_tokens=False)
    # a call whose "name" follows its arguments is still read as the model wrote it
    late = tok.encode('<tool_call>\n{"arguments": {"q": "name"}, "name": "search"}\n</tool_call>',
                      add_special_tokens=False)
    ids, mask = prompt + reply + late, [0] * len(prompt) + [1] * (len(reply) + len(late))
    marked = call_name_mask(ids, mask, tok)
    assert all(m == 0 for m in marked[:len(prompt)])  # the prompt names tools too, but was not sampled
    spans, cur = [], []
    for i, m in zip(ids, marked):
        if m:
            cur.append(i)
        elif cur:
            spans.append(tok.decode(cur))
            cur = []
    assert spans == ["calculator", "generalist", "search"]
    # the same ids not sampled (an observation, say) are never marked
    assert call_name_mask(ids, [0] * len(ids), tok) == [0] * len(ids)


def test_a_text_parsed_again_gives_new_calls_that_are_the_callers_to_change():
    text = 'Let me look. <tool_call>{"name": "search", "arguments": {"q": "x", "opts": {"k": [1, 2]}}}</tool_call>'
    content, first = parse_tool_calls(text)
    first[0].arguments["opts"]["k"].append(3)  # a caller changing what it got
    first[0].arguments["q"] = "changed"
    again = parse_tool_calls(text)
    assert again == (content, [ToolCall(name="search", arguments={"q": "x", "opts": {"k": [1, 2]}})])
    assert again[1][0] is not first[0] and again[1][0].arguments is not first[0].arguments
    bad = '<tool_call>{"name": "search", "extra": 1}</tool_call>'
    messages = []
    for _ in range(2):  # a malformed text raises the same error every time it is seen
        with pytest.raises(ToolCallParseError) as e:
            parse_tool_calls(bad)
        messages.append(str(e.value))
    assert messages[0] == messages[1] and "unexpected key(s) ['extra']" in messages[0]
