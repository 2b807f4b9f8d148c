"""Conversations in OpenAI's chat format, in and out: recorded agent runs become Trajectories.

    traj = from_openai_messages(messages, task_id="17")         # one recorded conversation
    trajs = read_openai_jsonl("conversations.jsonl")             # {"task_id": ..., "messages": [...]} per line
    engine = ScriptedEngine.from_trajectories(tokenizer, trajs)  # the recorded agent, per task id
    task = Task(..., user=replayed_user(traj))                   # the recorded user, stop marker honoured
    to_openai_messages(traj) == messages                         # and back

The format is Chat Completions': `system` (or `developer`) messages, the user's opening message(s),
then `assistant` messages with `content` and `tool_calls` (`{"id", "type": "function", "function":
{"name", "arguments": "<JSON text>"}}`), one `tool` message per call (`tool_call_id`, `content`), and
the user's replies. Content given as a list of parts (`[{"type": "text", "text": ...}]`) is joined.

What each message becomes: the system text goes to `meta["system"]`, the opening user message is the
prompt, each assistant message is a Turn whose text is its content followed by its calls as the
orchestrator writes them (`orchlib.chat.render_assistant`: what ScriptedEngine replays), each tool
message is an Observation of its call (in the order of the calls), and a user reply after a turn is
that turn's UserTurn (`done` when it holds the stop marker). The ids of the calls are kept in
`meta["tool_call_ids"]`, so `to_openai_messages` writes them back. Content is kept with the
whitespace at its ends trimmed, as the orchestrator's parser reads it.

A recording holds no token ids: the trajectory's `ids`, `mask` and `logprobs` are empty (a replay
through a rollout makes them). A malformed conversation raises ConversationError (a ValueError), one
line naming the file and line (or the task), the message and the field. Call arguments must be
values JSON can carry back out: no NaN or infinity, no integer too long to write, no nesting past
`orchlib.safejson.MAX_DEPTH`.

Text holding the orchestrator's call markup (`<tool_call>`, `</tool_call>`) in an assistant
message is refused, not escaped: the orchestrator writes text and calls in one channel, so such text
would be replayed (and exported) as a real call, and any escape would make the replayed agent say
something it never said. A refusal keeps every conversation that is read exactly faithful, and
names the message to fix (a call the API failed to parse belongs in its `tool_calls`).
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Iterable, Literal, Mapping, Sequence

from orchlib.chat import TOOL_CALL, TOOL_CALL_END, ToolCallParseError, parse_tool_calls, render_assistant
from orchlib.safejson import problem
from orchlib.tasks import STOP_MARKER, UserSpec
from orchlib.trajectory import Observation, ToolCall, Trajectory, Turn, UserTurn

__all__ = ["ConversationError", "from_openai_messages", "to_openai_messages", "read_openai_jsonl", "replayed_user"]

_ROLES = ("system", "developer", "user", "assistant", "tool")


class ConversationError(ValueError):
    """A malformed recorded conversation: one line, `"{file}:{line}: messages[i].field: problem"` (or
    `"task {id}: ..."` for a conversation not read from a file)."""


def _shown(value: Any, limit: int = 60) -> str:
    """A value as an error shows it: its repr, cut short, on one line."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def _argument_problem(value: Any) -> str | None:
    """Why call arguments could not be carried and written back as they were read, or None."""
    why = problem(value)
    if why:
        return why
    stack = [value]
    while stack:  # depth is bounded by `problem` above
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, float) and not math.isfinite(item):
            return f"{item!r} is not a JSON number (JSON has no NaN or infinity)"
        elif isinstance(item, int) and not isinstance(item, bool) and item.bit_length() > 10_000:
            return f"an integer of {item.bit_length():,} bits is too long to write back"
    return None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (JSON has no NaN or infinity)")


def _content(message: Mapping[str, Any], where: str) -> str:
    """A message's text: a string, None, or a list of text parts (joined)."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                raise ConversationError(f"{where}.content[{j}]: a part must be text or {{'type': 'text', 'text': ...}}")
        return "".join(texts)
    raise ConversationError(f"{where}.content: must be text, a list of text parts or null, not "
                            f"{type(content).__name__}")


def _calls(message: Mapping[str, Any], where: str) -> tuple[list[ToolCall], list[str]]:
    raw = message.get("tool_calls")
    raw = [] if raw is None else raw
    if not isinstance(raw, list):
        raise ConversationError(f"{where}.tool_calls: must be a list, not {type(raw).__name__}")
    calls, ids = [], []
    for j, item in enumerate(raw):
        at = f"{where}.tool_calls[{j}]"
        fn = item.get("function") if isinstance(item, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or not fn["name"].strip():
            raise ConversationError(f"{at}.function.name: every call needs a function with a name")
        name = fn["name"]
        why = _argument_problem(name) or ("it holds call markup" if TOOL_CALL in name or TOOL_CALL_END in name
                                          else None)
        if why:
            raise ConversationError(f"{at}.function.name: {why}")
        arguments = fn.get("arguments", {})
        if isinstance(arguments, str):  # the API's form: JSON text
            try:
                arguments = json.loads(arguments, parse_constant=_reject_constant) if arguments.strip() else {}
            except json.JSONDecodeError as e:
                raise ConversationError(f"{at}.function.arguments: not JSON: {e.msg} (column {e.colno})") from None
            except RecursionError:
                raise ConversationError(f"{at}.function.arguments: JSON nested too deeply") from None
            except ValueError as e:  # NaN or infinity, or an integer too long to read
                raise ConversationError(f"{at}.function.arguments: {str(e).splitlines()[0][:200]}") from None
        if not isinstance(arguments, dict):
            raise ConversationError(f"{at}.function.arguments: must be a JSON object, not {type(arguments).__name__}")
        why = _argument_problem(arguments)
        if why is None and any(tag in json.dumps(arguments, ensure_ascii=False) for tag in (TOOL_CALL, TOOL_CALL_END)):
            why = "they hold the call markup (<tool_call> or </tool_call>), which would end the call early on replay"
        if why:
            raise ConversationError(f"{at}.function.arguments: {why}")
        call_id = item.get("id")
        if call_id is not None and (not isinstance(call_id, str) or _argument_problem(call_id)):
            raise ConversationError(f"{at}.id: must be text, not {_shown(call_id)}")
        calls.append(ToolCall(name=name, arguments=arguments))
        ids.append(call_id or f"call_{j}")
    return calls, ids


def from_openai_messages(messages: Sequence[Mapping[str, Any]], task_id: str, *, group_index: int = 0,
                         category: str = "", stop: str = STOP_MARKER, source: str = "") -> Trajectory:
    """The Trajectory of one recorded conversation (see the module's docstring). `stop`: the marker by
    which the user ends the conversation; `source`: where the conversation was read, for errors (else
    errors name the task)."""
    prefix = f"{source}: " if source else f"task {_shown(task_id)}: "
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        raise ConversationError(f"{prefix}messages: must be a list of messages, not {type(messages).__name__}")
    system: list[str] = []
    opening: list[str] = []
    turns: list[Turn] = []
    call_ids: list[list[str]] = []
    waiting: dict[str, int] = {}  # call id → its place in the last turn's calls, until its result comes
    results: dict[int, Observation] = {}
    for i, message in enumerate(messages):
        where = f"{prefix}messages[{i}]"
        if not isinstance(message, Mapping):
            raise ConversationError(f"{where}: a message must be an object, not {type(message).__name__}")
        role = message.get("role")
        if not isinstance(role, str) or role not in _ROLES:
            raise ConversationError(f"{where}.role: {_shown(role)} is not one of {list(_ROLES)}")
        if role != "tool" and waiting:
            _unanswered(waiting, where)
        text = _content(message, where)
        why = _argument_problem(text)
        if why:
            raise ConversationError(f"{where}.content: {why}")
        if role == "assistant" and (TOOL_CALL in text or TOOL_CALL_END in text):
            tag = TOOL_CALL if TOOL_CALL in text else TOOL_CALL_END
            raise ConversationError(f"{where}.content: the text holds the call markup {tag} (at character "
                                    f"{text.index(tag)}), which the orchestrator would replay as a call; a "
                                    "call belongs in tool_calls (see orchlib.openai_messages)")
        if role in ("system", "developer"):
            if turns or opening:
                raise ConversationError(f"{where}.role: a {role} message after the conversation began")
            system.append(text)
        elif role == "user" and not turns:
            opening.append(text)
        elif role == "user":
            last = turns[-1]
            if last.user is not None:  # two user messages in a row: one reply, as the agent read them
                text = last.user.text + "\n\n" + text
            last.user = UserTurn(text=text, done=stop in text, label="recorded")
        elif role == "assistant":
            if not opening:
                raise ConversationError(f"{where}: the assistant speaks before the user's opening message")
            calls, ids = _calls(message, where)
            content = text.strip()
            turns.append(Turn(text=render_assistant(content, calls), calls=calls))
            call_ids.append(ids)
            if len(set(ids)) != len(ids):
                raise ConversationError(f"{where}.tool_calls: two calls share an id")
            waiting = {call_id: j for j, call_id in enumerate(ids)}
            results = {}
        else:  # a tool result
            call_id = message.get("tool_call_id")
            if not turns or not turns[-1].calls:
                raise ConversationError(f"{where}: a tool result with no call before it")
            if not isinstance(call_id, str):  # a list or an object is no id (and cannot be looked up)
                raise ConversationError(f"{where}.tool_call_id: must be text, not {_shown(call_id)}")
            if call_id not in waiting:
                pending = sorted(waiting)
                raise ConversationError(f"{where}.tool_call_id: {_shown(call_id)} answers none of the calls waiting "
                                        f"for a result ({_shown(pending or 'none', 200)})")
            j = waiting.pop(call_id)
            results[j] = Observation(content=text, tool=turns[-1].calls[j].name, label="recorded")
            if not waiting:
                turns[-1].observations = [results[k] for k in range(len(results))]
    if waiting:
        _unanswered(waiting, f"{prefix}messages[{len(messages)}]")
    if not opening:
        raise ConversationError(f"{prefix}messages: no user message opens the conversation")
    last = turns[-1] if turns else None
    last_at = max((i for i, m in enumerate(messages) if isinstance(m, Mapping) and m.get("role") == "assistant"),
                  default=0)
    answer = None
    if last is not None and not last.calls:
        try:  # markup was refused above, so this finds none; a parse error is still named, never raw
            answer = parse_tool_calls(last.text)[0]
        except ToolCallParseError as e:
            raise ConversationError(f"{prefix}messages[{last_at}].content: {e}") from None
    reason = ("user_stop" if last is not None and last.user is not None and last.user.done
              else "answer" if last is not None and not last.calls and last.user is None else "")
    meta: dict[str, Any] = {"tool_call_ids": call_ids}
    if system:
        meta["system"] = "\n\n".join(system)
    return Trajectory(task_id=task_id, group_index=group_index, prompt="\n\n".join(opening), category=category,
                      turns=turns, final_answer=answer, finish_reason=reason, meta=meta,
                      calls=_count(c.name for t in turns for c in t.calls))


def _unanswered(waiting: dict[str, int], where: str) -> None:
    missing = sorted(waiting, key=waiting.get)
    raise ConversationError(f"{where}: the calls {_shown(missing, 200)} of the assistant message before have no "
                            "tool result")


def _count(names: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name in names:
        out[name] = out.get(name, 0) + 1
    return dict(sorted(out.items()))


def to_openai_messages(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The conversation in OpenAI's chat format: system text (from `meta["system"]`), the prompt, each
    turn's assistant message (content outside the calls, `tool_calls` with JSON-text arguments), one
    `tool` message per observation, and the user's replies. Calls keep the ids they were read with."""
    out: list[dict[str, Any]] = []
    if trajectory.meta.get("system"):
        out.append({"role": "system", "content": trajectory.meta["system"]})
    if trajectory.prompt:
        out.append({"role": "user", "content": trajectory.prompt})
    known_ids = trajectory.meta.get("tool_call_ids") or []
    for t, turn in enumerate(trajectory.turns):
        try:
            content, calls = parse_tool_calls(turn.text)
        except ToolCallParseError:  # a malformed call is what the assistant said
            content, calls = turn.text, []
        calls = turn.calls or calls
        message: dict[str, Any] = {"role": "assistant", "content": content or None}
        ids = known_ids[t] if t < len(known_ids) and len(known_ids[t]) == len(calls) else [
            f"call_{t}_{j}" for j in range(len(calls))]
        if calls:
            message["tool_calls"] = [{"id": ids[j], "type": "function", "function": {
                "name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}} for j, c in enumerate(calls)]
        out.append(message)
        for j, obs in enumerate(turn.observations):
            out.append({"role": "tool", "tool_call_id": ids[j] if j < len(ids) else f"call_{t}_{j}",
                        "content": obs.content})
        if turn.user is not None:
            out.append({"role": "user", "content": turn.user.text})
    return out


def read_openai_jsonl(path: str | os.PathLike, *, task_id_field: str = "task_id",
                      messages_field: str = "messages", stop: str = STOP_MARKER,
                      trials: Literal["episodes", "groups"] = "episodes") -> list[Trajectory]:
    """Trajectories of a JSONL file of recorded conversations, one `{task_id_field: ..., messages_field:
    [...]}` per line. A bad line raises ConversationError naming the file, line, message and field.

    Several conversations of one task (a benchmark's trials, τ²'s pass^k) are numbered in file order,
    `meta["trial"]` 0, 1, …, and `meta["task_id"]` keeps the task's own id. `trials`:

    - "episodes" (default): each trial is an episode of its own, its task id `"{id}#{trial}"` (a task
      with one conversation keeps its id), so `Task(id=t.task_id, ..., user=replayed_user(t))` per
      trajectory and `ScriptedEngine.from_trajectories` replay every trial with its own agent and user
      turns (look the benchmark's facts up by `t.meta["task_id"]`);
    - "groups": the trials are group indices 0, 1, … of one task id, for `rollout(..., group_size=k)`
      (one Task per id: its user, if replayed, is one trial's for every episode)."""
    if trials not in ("episodes", "groups"):
        raise ValueError(f"trials must be 'episodes' or 'groups', not {trials!r}")
    out: list[Trajectory] = []
    seen: dict[str, int] = {}
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            where = f"{path}:{lineno}"
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise ConversationError(f"{where}: not UTF-8 (byte 0x{raw[e.start]:02x})") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ConversationError(f"{where}: not JSON: {e.msg} (column {e.colno})") from None
            except (RecursionError, ValueError):
                raise ConversationError(f"{where}: not readable JSON (nested too deeply, or a number too "
                                        "long)") from None
            if not isinstance(row, dict):
                raise ConversationError(f"{where}: a line must be a JSON object, not {type(row).__name__}")
            task_id = row.get(task_id_field)
            if isinstance(task_id, bool) or not isinstance(task_id, (str, int)) or not str(task_id).strip():
                raise ConversationError(f"{where}: {task_id_field}: every conversation needs its task's id (text or a "
                                 "whole number)")
            task_id = str(task_id)
            g = seen.get(task_id, 0)
            seen[task_id] = g + 1
            if messages_field not in row:
                raise ConversationError(f"{where}: {messages_field}: every line needs its conversation's messages")
            traj = from_openai_messages(row[messages_field], task_id, group_index=g, stop=stop, source=where)
            traj.meta.update(task_id=task_id, trial=g)
            out.append(traj)
    if trials == "episodes":
        ids = {t.task_id for t in out}
        for traj in out:
            if seen[traj.task_id] > 1:
                traj.task_id, traj.group_index = f"{traj.task_id}#{traj.meta['trial']}", 0
                if traj.task_id in ids:
                    raise ConversationError(f"{path}: {task_id_field}: trial {traj.meta['trial']} of task "
                                            f"{traj.meta['task_id']!r} would be named {traj.task_id!r}, which is "
                                            "another task's id (use trials='groups')")
    return out


def replayed_user(trajectory: Trajectory, stop: str = STOP_MARKER) -> UserSpec:
    """A task's user that replays the recorded user turns of `trajectory` (with their stop marker)."""
    turns = [t.user for t in trajectory.turns if t.user is not None]
    if not turns:
        raise ValueError(f"the conversation of task {trajectory.task_id} has no user replies to replay")
    return UserSpec(kind="replayed", turns=turns, stop=stop)
