"""The chat format the orchestrator speaks: Qwen/Hermes-style template, segments and tool-call parsing.

Tools are listed as JSON in the system turn; the model writes calls as
`<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` and reads results as
`<tool_response>\n...\n</tool_response>` inside a user turn (the Qwen2.5/Qwen3 convention).
The rollout never re-tokenises a conversation: it appends `observation_segment(...)` ids after
the sampled ids, and those strings are exactly what `CHAT_TEMPLATE` renders for the same messages.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, Iterable

from orchlib import safejson
from orchlib.trajectory import ToolCall, new_tool_call

__all__ = [
    "IM_START", "IM_END", "TOOL_CALL", "TOOL_CALL_END", "CALL_OPENING", "TOOL_RESPONSE", "TOOL_RESPONSE_END", "PAD",
    "SPECIAL_TOKENS", "CHAT_TEMPLATE", "ToolCallParseError", "parse_tool_calls", "render_call", "render_assistant",
    "observation_segment", "system_text", "call_name_mask", "tools_block", "template_renders_tools",
]

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
TOOL_CALL, TOOL_CALL_END = "<tool_call>", "</tool_call>"
# How every rendered call starts, up to the tool's name (render_call's layout): the choice is the next id.
CALL_OPENING = TOOL_CALL + '\n{"name": "'
TOOL_RESPONSE, TOOL_RESPONSE_END = "<tool_response>", "</tool_response>"
PAD = "<|endoftext|>"
SPECIAL_TOKENS = [PAD, IM_START, IM_END, TOOL_CALL, TOOL_CALL_END, TOOL_RESPONSE, TOOL_RESPONSE_END]

TOOLS_HEADER = (
    "\n\n# Tools\nCall tools as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>. "
    "Available tools:\n<tools>"
)

# Jinja template stored on the tokenizer (tokenizer.apply_chat_template). Kept byte-identical to the
# Python helpers below; tests/test_chat.py checks both agree. transformers renders templates with
# trim_blocks, which eats a newline right after a block tag, so such newlines are written {{ '\\n' }}.
CHAT_TEMPLATE = (
    "{% if tools or messages[0]['role'] == 'system' %}<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}{% endif %}"
    "{% if tools %}{% raw %}" + TOOLS_HEADER + "{% endraw %}"
    "{% for tool in tools %}{{ '\\n' }}{{ tool | tojson }}{% endfor %}{{ '\\n' }}</tools>{% endif %}"
    "<|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'user' %}<|im_start|>user\n{{ m['content'] }}<|im_end|>\n"
    "{% elif m['role'] == 'assistant' %}<|im_start|>assistant\n{{ m['content'] or '' }}"
    "{% for tc in m.get('tool_calls') or [] %}"
    "{% set f = tc['function'] if tc['function'] is defined else tc %}"
    "{% if m['content'] or not loop.first %}{{ '\\n' }}{% endif %}"
    "<tool_call>\n{\"name\": {{ f['name'] | tojson }}, \"arguments\": {{ f['arguments'] | tojson }}}\n</tool_call>"
    "{% endfor %}<|im_end|>\n"
    "{% elif m['role'] == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}<|im_start|>user{% endif %}"
    "{{ '\\n' }}<tool_response>\n{{ m['content'] }}\n</tool_response>"
    "{% if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}<|im_end|>\n{% endif %}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tools_block(tools: list[dict[str, Any]]) -> str:
    """The tools as CHAT_TEMPLATE lists them after the system text (header, one JSON line each)."""
    return TOOLS_HEADER + "".join("\n" + json.dumps(t, ensure_ascii=False) for t in tools) + "\n</tools>"


def system_text(system: str, tools: list[dict[str, Any]] | None) -> str:
    """The system turn exactly as CHAT_TEMPLATE renders it (used to check the template)."""
    return f"{IM_START}system\n{system}" + (tools_block(tools) if tools else "") + f"{IM_END}\n"


_PROBE_TOOL = {"type": "function", "function": {"name": "orchlib_probe_tool_7f3a", "description": "",
                                                "parameters": {"type": "object", "properties": {}}}}


def template_renders_tools(tokenizer) -> bool:
    """Whether the tokenizer's chat template lists `tools=` at all. Many templates (SmolLM2's plain ChatML
    among them) drop the argument without a word; the rollout then lists the tools itself
    (`tools_block` in the system turn), so any chat template can drive an orchestrator."""
    template = getattr(tokenizer, "chat_template", None)
    key = template if isinstance(template, str) else repr(template)
    if key not in _RENDERS_TOOLS:
        msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
        text = tokenizer.apply_chat_template(msgs, tools=[_PROBE_TOOL], tokenize=False, add_generation_prompt=True)
        _RENDERS_TOOLS[key] = _PROBE_TOOL["function"]["name"] in text
    return _RENDERS_TOOLS[key]


_RENDERS_TOOLS: dict[str, bool] = {}  # chat template → whether it renders tools (probed once per template)


def render_call(call: ToolCall) -> str:
    """One call as the model should write it."""
    return (f'{TOOL_CALL}\n{{"name": {json.dumps(call.name, ensure_ascii=False)}, '
            f'"arguments": {json.dumps(call.arguments, ensure_ascii=False)}}}\n{TOOL_CALL_END}')


def render_assistant(content: str, calls: Iterable[ToolCall] = ()) -> str:
    """An assistant turn's text (without template tokens) as CHAT_TEMPLATE renders it."""
    rendered = [render_call(c) for c in calls]
    return content + ("\n" if content and rendered else "") + "\n".join(rendered)


def observation_segment(contents: Iterable[str]) -> str:
    """Text appended after a sampled turn (which ends in <|im_end|>) to show the tool results and
    open the next assistant turn. Matches CHAT_TEMPLATE for consecutive tool messages."""
    body = "".join(f"\n{TOOL_RESPONSE}\n{c}\n{TOOL_RESPONSE_END}" for c in contents)
    return f"\n{IM_START}user{body}{IM_END}\n{IM_START}assistant\n"


class ToolCallParseError(ValueError):
    """A malformed tool call. `reason` says what was wrong; `position` is a character offset."""

    def __init__(self, reason: str, position: int, snippet: str = ""):
        self.reason, self.position, self.snippet = reason, position, snippet
        where = f" at character {position}"
        super().__init__(f"malformed tool call{where}: {reason}" + (f" in {snippet!r}" if snippet else ""))


_TAG = re.compile(re.escape(TOOL_CALL) + "|" + re.escape(TOOL_CALL_END))


def parse_tool_calls(text: str, names: Any = None) -> tuple[str, list[ToolCall]]:
    """Split assistant text into (content outside the calls, calls).

    Tolerant of whitespace around the JSON, strict about the JSON itself: it must be one object with
    a string "name" and an object "arguments" (may be omitted for no arguments), nothing else.
    `names`: the `orchlib.toolnames.ToolNames` the tools were listed under, when an export mapped
    them; calls come back under the cards' names (a name it does not know stays as written).
    Each call returns new ToolCall objects (their arguments are the caller's to change), though a
    text seen before is not checked again (`_split`: many episodes write the same turn).
    """
    content, parts = _split(text)
    if content is None:
        raise ToolCallParseError(*parts)
    # a call's JSON is read again for fresh arguments (C speed); no arguments need no reading
    calls = [new_tool_call(name, {} if body is None else json.loads(body).get("arguments", {}))
             for name, body in parts]
    if names is not None:
        calls = [ToolCall(name=names.internal(c.name), arguments=c.arguments) for c in calls]
    return content, calls


@functools.lru_cache(maxsize=4096)  # thread-safe; texts are a turn long (max_new_tokens)
def _split(text: str) -> tuple[str | None, tuple]:
    """(content, ((name, the call's JSON, or None when it has no arguments), ...)) of a checked text, or
    (None, ToolCallParseError's arguments): immutable, so one cached result serves every caller."""
    parts: list[tuple[str, str | None]] = []
    content_parts: list[str] = []
    pos, open_at = 0, -1
    try:
        for m in _TAG.finditer(text):
            if m.group() == TOOL_CALL:
                if open_at >= 0:
                    raise ToolCallParseError(f"{TOOL_CALL} opened again before {TOOL_CALL_END}", m.start())
                content_parts.append(text[pos:m.start()])
                open_at = m.end()
            else:
                if open_at < 0:
                    raise ToolCallParseError(f"{TOOL_CALL_END} without an opening {TOOL_CALL}", m.start())
                body = text[open_at:m.start()]
                call = _parse_one(body, open_at)
                parts.append((call.name, body if call.arguments else None))
                open_at, pos = -1, m.end()
        if open_at >= 0:
            raise ToolCallParseError(f"{TOOL_CALL} is never closed with {TOOL_CALL_END}", open_at - len(TOOL_CALL))
    except ToolCallParseError as e:
        return None, (e.reason, e.position, e.snippet)
    content_parts.append(text[pos:])
    return "".join(content_parts).strip(), tuple(parts)


def _parse_one(body: str, offset: int) -> ToolCall:
    snippet = body.strip()[:80]
    try:
        obj = safejson.loads(body)
    except safejson.JSONInputError as e:
        raise ToolCallParseError(e.message, offset + e.pos, snippet) from None
    if not isinstance(obj, dict):
        raise ToolCallParseError(f"expected a JSON object, got {type(obj).__name__}", offset, snippet)
    extra = set(obj) - {"name", "arguments"}
    if extra:
        raise ToolCallParseError(f"unexpected key(s) {sorted(extra)}; only 'name' and 'arguments'", offset, snippet)
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise ToolCallParseError("'name' must be a non-empty string", offset, snippet)
    args = obj.get("arguments", {})
    if not isinstance(args, dict):
        raise ToolCallParseError(f"'arguments' must be a JSON object, got {type(args).__name__}", offset, snippet)
    return new_tool_call(name, args)


_NAME_KEY = re.compile(r'"name"\s*:\s*"')


def call_name_mask(ids: list[int], mask: list[int], tokenizer) -> list[int]:
    """1 on the sampled ids (mask 1) that spell a tool call's name, 0 elsewhere: the ids where the
    orchestrator chooses a tool. Reads the ids one at a time, as they were sampled (nothing is
    re-tokenised): after `<tool_call>`, past `"name": "`, up to the closing quote."""
    open_id, close_id = tokenizer.convert_tokens_to_ids(TOOL_CALL), tokenizer.convert_tokens_to_ids(TOOL_CALL_END)
    out, state, seen = [0] * len(ids), "", ""
    for i, (tok, sampled) in enumerate(zip(ids, mask)):
        if not sampled or tok in (open_id, close_id):
            state, seen = ("seek" if sampled and tok == open_id else ""), ""
            continue
        if state == "seek":
            seen += tokenizer.decode([tok])
            found = _NAME_KEY.search(seen)
            if found:  # this id may hold the key's end and the name's start
                state, piece = "name", seen[found.end():]
                seen = ""
                if piece:
                    out[i], state = _name_part(piece, state)
        elif state == "name":
            out[i], state = _name_part(tokenizer.decode([tok]), state)
    return out


def _name_part(piece: str, state: str) -> tuple[int, str]:
    """(whether `piece` holds part of the name, the next state): a quote ends the name."""
    if '"' not in piece:
        return 1, state
    return int(piece.index('"') > 0), "done"
