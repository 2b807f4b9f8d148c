"""The user in the loop: who answers when the orchestrator replies without calling a tool.

τ²-bench (Barres et al. 2025, arXiv 2506.07982) scores an agent that serves a user over several
turns. A task's `user` (`orchlib.tasks.UserSpec`, or a factory `fn(task) -> User`) is built fresh
for every episode by `make_user`; the rollout asks it for a reply after each turn without calls and
appends the reply as a user turn (loss mask 0) until the user is done.

- `ScriptedUser`: replies in order (or a function of the conversation); free, labelled "scripted".
- `ReplayedUser`: the user turns of a recorded conversation, their cost and latency as recorded;
  labelled "replay". `ReplayedUser.from_trajectory(t)` replays a trajectory's user.
- `SimulatedUser`: a model playing the user from its instructions, over an `llm` card (its client
  and price) or any OpenAI-compatible endpoint, through `orchlib.tools.llm`'s client (retries,
  timeouts). It sees the conversation from its side: the orchestrator's messages as the other
  party's, tool calls and results hidden (as τ²'s user simulator does).

A user ends the conversation by writing its stop marker (`###STOP###`, τ²'s), by calling its
`end_conversation` tool (a simulated user given one), or at its own `max_turns`; scripted and replayed
users end when their turns run out. Their cost and latency are counted apart from the orchestrator's
(`Trajectory.user_cost_usd`, `user_latency_s`).
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from orchlib.cards import Price, load_card
from orchlib.tasks import STOP_MARKER, Task, UserSpec, resolve
from orchlib.tools.base import ToolError, approx_tokens
from orchlib.tools.llm import LLMSettings, chat_body, post_chat, usage_counts
from orchlib.trajectory import Trajectory, UserTurn

__all__ = ["User", "ScriptedUser", "ReplayedUser", "SimulatedUser", "make_user", "user_view", "END_TOOL"]


@runtime_checkable
class User(Protocol):
    """What the rollout needs from a user: one reply to the conversation so far (chat messages as the
    orchestrator sees them, its last turn last)."""

    async def reply(self, messages: list[dict[str, Any]]) -> UserTurn: ...


def _stopped(text: str, stop: str) -> tuple[str, bool]:
    """The reply without the stop marker, and whether it held one."""
    if stop in text:
        return text.replace(stop, "").strip(), True
    return text, False


class ScriptedUser:
    """Replies in order, or `fn(messages) -> str` per reply. A reply holding `stop` ends the
    conversation; so does being asked once more after the last scripted reply (it says `stop`)."""

    def __init__(self, turns: Sequence[str] | Callable[[list[dict[str, Any]]], str], stop: str = STOP_MARKER,
                 max_turns: int | None = None):
        self.turns, self.stop, self.max_turns = turns, stop, max_turns
        self.asked = 0

    async def reply(self, messages: list[dict[str, Any]]) -> UserTurn:
        i, self.asked = self.asked, self.asked + 1
        if callable(self.turns):
            raw = self.turns(messages)
        elif i < len(self.turns):
            raw = self.turns[i]
        else:  # nothing more to say: the user ends the conversation, as τ²'s user does when satisfied
            return UserTurn(text=self.stop, done=True, label="scripted")
        text, done = _stopped(raw, self.stop)
        return UserTurn(text=text, done=done or (self.max_turns is not None and i + 1 >= self.max_turns),
                        label="scripted")


class ReplayedUser:
    """The user turns of a recorded conversation, in order, with the cost, latency and tokens they
    were recorded with (a simulated user's bill is reproduced without calling it). A recorded reply
    holding the stop marker ends the conversation, and is replayed without the marker (as a simulated
    user's reply is read); so does a turn recorded `done`. Asked past the end of the recording, the
    user ends the conversation."""

    def __init__(self, turns: Sequence[UserTurn | str], stop: str = STOP_MARKER):
        if not stop:
            raise ValueError("a replayed user needs a stop marker (an empty one would be in every reply)")
        self.turns = [t if isinstance(t, UserTurn) else UserTurn(text=t) for t in turns]
        self.stop, self.asked = stop, 0

    @classmethod
    def from_trajectory(cls, trajectory: Trajectory, stop: str = STOP_MARKER) -> ReplayedUser:
        turns = [t.user for t in trajectory.turns if t.user is not None]
        if not turns:
            raise ValueError(f"trajectory of task {trajectory.task_id} has no user turns to replay")
        return cls(turns, stop)

    async def reply(self, messages: list[dict[str, Any]]) -> UserTurn:
        i, self.asked = self.asked, self.asked + 1
        if i >= len(self.turns):
            return UserTurn(text=self.stop, done=True, label="replay")
        turn = self.turns[i]
        text, stopped = _stopped(turn.text, self.stop)
        return turn.model_copy(update={"label": "replay", "text": text, "done": turn.done or stopped})


# The tool a simulated user may call to end the conversation (besides writing the stop marker).
END_TOOL: dict[str, Any] = {"type": "function", "function": {
    "name": "end_conversation", "description": "Call this when your request is resolved or cannot be.",
    "parameters": {"type": "object", "properties": {}}}}

_SIM_RULES = ("You are a user talking to a customer-service agent. Follow your instructions; say only what a "
              "user would, one message at a time, and never invent facts the instructions do not give. "
              "When your request is done (or cannot be), write {stop}{tool}.")


def user_view(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The conversation from the user's side: the orchestrator's words as the other party's
    ("user"), the user's own as "assistant"; tool calls, tool results and empty turns left out."""
    out: list[dict[str, str]] = []
    for m in messages:
        content = m.get("content") or ""
        if m.get("role") == "assistant" and content.strip():
            out.append({"role": "user", "content": _without_calls(content)})
        elif m.get("role") == "user" and content.strip() and not content.lstrip().startswith("<tool_response>"):
            out.append({"role": "assistant", "content": content})
    return [m for m in out if m["content"]]


def _without_calls(text: str) -> str:
    from orchlib.chat import ToolCallParseError, parse_tool_calls

    try:
        return parse_tool_calls(text)[0]
    except ToolCallParseError:
        return text


class SimulatedUser:
    """A model playing the user. `settings`: the `llm` backend settings (client openai) of a card or
    endpoint; `price`: what its tokens cost. Latency is the request's measured wall time."""

    def __init__(self, instructions: str, settings: LLMSettings, price: Price | None = None, *,
                 stop: str = STOP_MARKER, max_turns: int = 10, end_tool: bool = True, label: str | None = None):
        if settings.client != "openai":
            raise ValueError(f"a simulated user needs an OpenAI-compatible endpoint (client openai), "
                             f"not {settings.client!r}")
        self.instructions, self.settings, self.price = instructions, settings, price or Price()
        self.stop, self.max_turns, self.end_tool = stop, max_turns, end_tool
        self.label = label or f"user:{settings.model}"
        self.asked = 0

    @classmethod
    def from_card(cls, card_path: str, instructions: str, **kw: Any) -> SimulatedUser:
        card = load_card(card_path)
        if card.kind != "llm":
            raise ValueError(f"{card.source or card.name}: a simulated user needs an `llm` card, not {card.kind!r}")
        return cls(instructions, LLMSettings.model_validate(card.backend), card.price, **kw)

    def messages(self, conversation: list[dict[str, Any]]) -> list[dict[str, str]]:
        tool = " or call end_conversation" if self.end_tool else ""
        system = _SIM_RULES.format(stop=self.stop, tool=tool) + "\n\nInstructions:\n" + self.instructions
        view = user_view(conversation)
        if not view or view[0]["role"] != "user":  # chat APIs want the other party to speak first
            view = [{"role": "user", "content": "(The agent is waiting for your request.)"}] + view
        return [{"role": "system", "content": system}] + view

    async def reply(self, messages: list[dict[str, Any]]) -> UserTurn:
        self.asked += 1
        sent = self.messages(messages)
        body = chat_body(self.settings, sent)
        if self.end_tool:
            body["tools"] = [END_TOOL]
        t0 = time.perf_counter()
        response = await post_chat(self.settings, body)  # a failure after its retries raises ToolError
        seconds = time.perf_counter() - t0
        model = self.settings.model
        try:
            data = response.json()
            msg = data["choices"][0]["message"]
            raw = msg.get("content") or ""
            calls = msg.get("tool_calls") or []
        except (ValueError, RecursionError, KeyError, IndexError, TypeError, AttributeError) as e:
            raise ToolError(f"{model}: unexpected response ({type(e).__name__}): {response.text[:300]}") from None
        # What the rollout appends as the user's words must be text; anything else is the user's failure
        # (counted as errors["user_failure"]), never a crash of the rollout.
        if not isinstance(raw, str):
            raise ToolError(f"{model}: unexpected response: choices[0].message.content is {type(raw).__name__} "
                            f"{str(raw)[:40]!r}, not text")
        if not isinstance(calls, list):
            raise ToolError(f"{model}: unexpected response: choices[0].message.tool_calls is "
                            f"{type(calls).__name__} {str(calls)[:40]!r}, not a list")
        try:  # a malformed usage (negative, NaN, 1e30, a string) is refused, never billed
            usage = usage_counts(data.get("usage"), approx_tokens(json.dumps(sent)),
                                 approx_tokens(raw + json.dumps(calls, default=str)))
        except ToolError as e:
            raise ToolError(f"{model}: {e}") from None
        tokens_in, tokens_out = usage.tokens_in, usage.tokens_out
        text, done = _stopped(raw, self.stop)
        done = done or any(isinstance(c, dict) and isinstance(c.get("function"), dict)
                           and c["function"].get("name") == "end_conversation"
                           for c in calls) or self.asked >= self.max_turns
        return UserTurn(text=text, done=done, cost_usd=self.price.cost(tokens_in, tokens_out), latency_s=seconds,
                        tokens_in=tokens_in, tokens_out=tokens_out, label=self.label)


def make_user(task: Task) -> User | None:
    """A fresh user for one episode of `task`, or None when the task has none."""
    spec = task.user
    if spec is None:
        return None
    if not isinstance(spec, UserSpec):
        user = resolve(spec)(task)
        if not isinstance(user, User):
            raise TypeError(f"task {task.id}: user factory returned {type(user).__name__}, which has no "
                            "`async reply(messages)`")
        return user
    if spec.kind == "scripted":
        return ScriptedUser([t if isinstance(t, str) else t.text for t in spec.turns], spec.stop, spec.max_turns)
    if spec.kind == "replayed":
        return ReplayedUser(spec.turns, spec.stop)
    if spec.card is not None:
        return SimulatedUser.from_card(spec.card, spec.instructions, stop=spec.stop, max_turns=spec.max_turns)
    settings = LLMSettings(client="openai", base_url=spec.base_url, model=spec.model)
    return SimulatedUser(spec.instructions, settings, stop=spec.stop, max_turns=spec.max_turns)
