"""An orchestrator behind any OpenAI-compatible chat-completions endpoint: the paper's prompted
baselines (GPT-5, Claude Opus 4.1, Qwen3-235B given the same tools) or a model served by vLLM,
SGLang, llama.cpp or Ollama, over the same tasks, tools, preferences and reward as a trained one.

    policy = OpenAIPolicy(base_url="http://127.0.0.1:8000/v1", model="Qwen/Qwen3-8B")
    trajectories = rollout(env, policy, config=config, group_size=8)

Message in, message out — not token in, token out: the server samples, so there are no token ids and
no log-probs. Its trajectories have the same type as a local policy's, with empty `ids`/`mask` and
`meta["trainable"] = False`; evaluation, viz and the widgets read them as they are.

- Tools are the cards' OpenAI export, sent as `tools` (`tool_calling="native"`); calls are read from
  the reply's `tool_calls`, and from `<tool_call>` text when a server writes them as text. Results go
  back as `tool` messages (or, for calls written as text, as `<tool_response>` blocks in a user
  message, the Qwen convention). `tool_calling="text"` lists the tools in the system message instead,
  for servers without function calling.
- Accounting: the policy's tokens come from each response's `usage` and are priced by its `price`
  (from its card when built from one); a turn's generation time is the request's measured wall time,
  retries included.
- Failures: the request goes through the `llm` tool's client (`orchlib.tools.llm.post_chat`: retries
  on 429/5xx and dropped connections with backoff, a timeout per request). A request that still fails
  is a counted error of the turn (`tool_failure` or `timeout`, on tool "" — "(policy)" in reports); the
  turn is spent and the episode goes on. A call whose arguments are not a JSON object is a counted
  `malformed_call`; the model reads why.

What the rollout uses (`orchlib.rollout` runs any object with these): `name`, `max_in_flight`,
`start(system, user, tools) -> messages`, `session()` (an async context holding the HTTP clients of
one rollout) and `async chat(messages, tools, session) -> ChatReply`.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from orchlib import safejson
from orchlib.cards import Price, ToolCard, load_card
from orchlib.chat import (TOOL_RESPONSE, TOOL_RESPONSE_END, TOOLS_HEADER, ToolCallParseError, parse_tool_calls,
                          render_assistant)
from orchlib.toolnames import ToolNames
from orchlib.tools.base import ToolError, approx_tokens
from orchlib.tools.llm import LLMSettings, chat_body, http_url, post_chat, usage_counts
from orchlib.trajectory import Observation, ToolCall

__all__ = ["APIPolicyConfig", "OpenAIPolicy", "ChatReply", "PolicyCall", "Lanes"]

# Request settings an APIPolicyConfig may set; they override a card's backend when both are given.
_REQUEST_FIELDS = ("api_key_env", "temperature", "max_tokens", "timeout_s", "max_retries", "backoff_s",
                   "max_backoff_s", "extra_body")


class APIPolicyConfig(BaseModel):
    """Where the policy is served and how it is priced: a card, or `base_url` + `model`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str | None = Field(None, description="label in tables and reports; default: the model name")
    card: str | None = Field(None, description="an `llm` card (client openai) whose backend and price describe "
                                               "the endpoint; the request fields below override its backend")
    base_url: str | None = Field(None, description="e.g. https://api.openai.com/v1 or http://127.0.0.1:8000/v1")
    model: str | None = Field(None, description="model name at the endpoint")
    price: Price | None = Field(None, description="USD per million input/output tokens, applied to each "
                                                  "response's `usage`; default free (a local server)")
    tool_calling: Literal["native", "text"] = Field(
        "native", description="native: `tools` in the request, `tool_calls` in the reply (OpenAI, vLLM with a "
                              "tool parser, SGLang, Ollama); text: tools listed in the system message and calls "
                              "written as <tool_call> text, for servers without function calling")
    max_in_flight: int = Field(64, ge=1, description="episodes running at once; a server's batch is what bounds "
                                                     "throughput, so this is usually the server's concurrency")
    api_key_env: str | None = Field(None, description="environment variable holding the API key (never the key)")
    temperature: float | None = Field(None, ge=0, description="None: the server's default")
    max_tokens: int | None = Field(None, gt=0, description="output cap per turn; None: the server's default")
    timeout_s: float | None = Field(None, gt=0, description="per request; default the llm tool's 60 s")
    max_retries: int | None = Field(None, ge=0, description="after a 429/5xx or dropped connection; default 3")
    backoff_s: float | None = Field(None, ge=0, description="first retry waits this, then doubling; default 1 s")
    max_backoff_s: float | None = Field(None, ge=0, description="cap on one wait; default 30 s")
    extra_body: dict[str, Any] | None = Field(None, description="more request fields (e.g. reasoning_effort)")

    @field_validator("base_url")
    @classmethod
    def _http_only(cls, v: str | None) -> str | None:
        return v if v is None else http_url(v)  # before a run, not after minutes of failed requests

    @model_validator(mode="after")
    def _card_or_endpoint(self) -> APIPolicyConfig:
        if self.card is not None:
            if self.base_url is not None or self.model is not None or self.price is not None:
                raise ValueError("give either card or base_url/model/price, not both (the card holds them)")
        elif not self.base_url or not self.model:
            raise ValueError("an API policy needs base_url and model (or a card)")
        return self


@dataclass
class PolicyCall:
    """One call the policy asked for; `call` is None when it could not be read (`error` says why)."""

    call: ToolCall | None
    error: str | None = None
    id: str | None = None  # the server's tool_call id, for native calls


@dataclass
class ChatReply:
    """One assistant turn of an API policy, with its accounting."""

    text: str                            # the turn as a reader sees it (calls rendered as a local policy writes them)
    content: str = ""                    # text outside calls: the answer when there are no calls
    calls: list[PolicyCall] = field(default_factory=list)
    native: bool = False                 # calls came in `tool_calls` (results go back as `tool` messages)
    message: dict[str, Any] = field(default_factory=dict)  # the assistant message sent back next turn
    finish_reason: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0
    error: Observation | None = None     # the request itself failed after its retries

    def followup(self, shown: list[str]) -> list[dict[str, Any]]:
        """The messages that continue the conversation: this turn, then what each call returned
        (`shown`, one text per entry of `calls`, in order)."""
        if len(shown) != len(self.calls):
            raise ValueError(f"{len(shown)} results for {len(self.calls)} calls")
        if self.native:
            return [self.message] + [{"role": "tool", "tool_call_id": c.id, "content": s}
                                     for c, s in zip(self.calls, shown)]
        body = "".join(f"\n{TOOL_RESPONSE}\n{s}\n{TOOL_RESPONSE_END}" for s in shown)
        return [self.message, {"role": "user", "content": body.lstrip("\n")}]


class OpenAIPolicy:
    """A policy served over HTTP. Keyword arguments are APIPolicyConfig's fields."""

    trainable = False

    def __init__(self, config: APIPolicyConfig | None = None, **fields: Any):
        if config is not None and fields:
            raise TypeError("pass an APIPolicyConfig or its fields, not both")
        self.config = config or APIPolicyConfig(**fields)
        c = self.config
        request = {k: getattr(c, k) for k in _REQUEST_FIELDS if getattr(c, k) is not None}
        if c.card is not None:
            card = load_card(c.card)
            self.settings, self.price = _card_settings(card, request), card.price
        else:
            self.settings = LLMSettings(client="openai", model=c.model, base_url=c.base_url, **request)
            self.price = c.price or Price()
        self.name = c.name or self.settings.model
        key = self.settings.api_key_env
        if key and not os.environ.get(key):  # every request would fail; say so before the first one
            raise ValueError(f"{self.name}: environment variable {key} (the API key) is not set")
        self.max_in_flight = c.max_in_flight

    @classmethod
    def from_card(cls, card: str | Path, **fields: Any) -> OpenAIPolicy:
        return cls(APIPolicyConfig(card=str(card), **fields))

    def __repr__(self) -> str:
        return f"OpenAIPolicy({self.name!r}, {self.settings.base_url}, {self.config.tool_calling})"

    # ------------------------------------------------------------------------------ conversation
    def start(self, system: str, user: str, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The first messages. In text mode the tools are listed in the system message, as the local
        chat template lists them."""
        if self.config.tool_calling == "text" and tools:
            system += TOOLS_HEADER + "".join("\n" + json.dumps(t, ensure_ascii=False) for t in tools) + "\n</tools>"
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def session(self) -> Lanes:
        """The HTTP clients of one rollout: `async with policy.session() as session`, then
        `chat(..., session)`."""
        return Lanes(self.max_in_flight, self.settings.timeout_s)

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                   session: Lanes | None = None) -> ChatReply:
        """One turn. Never raises for the server's failures: they come back as `ChatReply.error`.
        Without a `session` the request opens its own connection."""
        body = chat_body(self.settings, messages)
        names = None
        if self.config.tool_calling == "native" and tools:
            # OpenAI's function names allow no dot (`math.factorial`): send each under its export
            # name and read the calls back under the card's (orchlib.toolnames, one-to-one).
            names = ToolNames([t["function"]["name"] for t in tools], "openai")
            body["tools"] = [t if not names.changed.get(t["function"]["name"]) else
                             {**t, "function": {**t["function"], "name": names.exported(t["function"]["name"])}}
                             for t in tools]
        t0 = time.perf_counter()
        try:
            if session is None:
                response = await post_chat(self.settings, body)
            else:
                async with session.lane() as client:
                    response = await post_chat(self.settings, body, client)
            data = _json(response, self.settings.model)
            reply = self._read(data, messages, names)  # a malformed reply raises ToolError too
        except ToolError as e:
            seconds = time.perf_counter() - t0
            # The time spent is the turn's generation time; the observation adds none of its own.
            return ChatReply(text="", seconds=seconds, error=Observation(
                content=f"error: {e}", error=str(e), error_kind=e.kind))  # type: ignore[arg-type]
        reply.seconds = time.perf_counter() - t0
        reply.cost_usd = self.price.cost(reply.tokens_in, reply.tokens_out)
        return reply

    def _read(self, data: dict[str, Any], messages: list[dict[str, Any]], names: ToolNames | None = None) -> ChatReply:
        model = self.settings.model
        choice = data["choices"][0]
        msg = choice.get("message") or {}
        content = _text(msg.get("content"), model)
        raw_calls = msg.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            raise ToolError(f"{model}: unexpected response: choices[0].message.tool_calls is "
                            f"{type(raw_calls).__name__} {str(raw_calls)[:40]!r}, not a list")
        if raw_calls:
            calls = [_native_call(tc) for tc in raw_calls]
            for c in calls:
                if names is not None and c.call is not None:
                    c.call = c.call.model_copy(update={"name": names.internal(c.call.name)})
            sent = [dict(tc, id=c.id) if isinstance(tc, dict) else  # each `tool` result names its call's id
                    {"id": c.id, "type": "function", "function": {"name": "unreadable", "arguments": "{}"}}
                    for tc, c in zip(raw_calls, calls)]
            message = {"role": "assistant", "content": content or None, "tool_calls": sent}
            text = render_assistant(content, [c.call for c in calls if c.call is not None])
            reply = ChatReply(text=text, content=content, calls=calls, native=True, message=message)
        else:
            try:
                outside, parsed = parse_tool_calls(content)
                calls = [PolicyCall(c) for c in parsed]
            except ToolCallParseError as e:
                outside, calls = content, [PolicyCall(None, str(e))]
            reply = ChatReply(text=content, content=outside, calls=calls,
                              message={"role": "assistant", "content": content})
        reply.finish_reason = str(choice.get("finish_reason") or "")[:40]
        # Without `usage` (some local servers) the counts are estimated, so the turn is still priced; a
        # malformed one (negative, NaN, 1e30, a string) is the turn's error, never a bill.
        try:
            counts = usage_counts(data.get("usage"), approx_tokens(json.dumps(messages)),
                                  approx_tokens(content + json.dumps(raw_calls, default=str)))
        except ToolError as e:
            raise ToolError(f"{model}: {e}") from None
        reply.tokens_in, reply.tokens_out = counts.tokens_in, counts.tokens_out
        return reply


class Lanes:
    """One HTTP client per episode in flight, each keeping one connection alive. A single shared
    client would do, but httpcore's pool scans all its connections for every request it assigns, so
    64 in flight spent 13x the server's own time on bookkeeping (benchmarks/bench_api_policy.py); a
    lane per episode keeps each lookup trivial. The clients share one TLS context (building one
    costs about 0.1 s)."""

    def __init__(self, n: int, timeout_s: float):
        self.n, self.timeout_s = n, timeout_s
        self._clients: list[httpx.AsyncClient] = []
        self._free: list[httpx.AsyncClient] = []
        self._tls: Any = None

    async def __aenter__(self) -> Lanes:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        for client in self._clients:
            await client.aclose()
        self._clients.clear()
        self._free.clear()

    @contextlib.asynccontextmanager
    async def lane(self) -> AsyncIterator[httpx.AsyncClient]:
        if self._free:
            client = self._free.pop()
        else:  # the rollout keeps at most n episodes in flight, so at most n lanes are ever made
            if self._tls is None:
                self._tls = httpx.create_ssl_context()
            client = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout_s), verify=self._tls,
                                       limits=httpx.Limits(max_connections=1, max_keepalive_connections=1))
            self._clients.append(client)
        try:
            yield client
        finally:
            self._free.append(client)


def _card_settings(card: ToolCard, request: dict[str, Any]) -> LLMSettings:
    where = card.source or f"<card {card.name}>"
    if card.kind != "llm":
        raise ValueError(f"{where}: an API policy needs an `llm` card, not kind {card.kind!r}")
    settings = LLMSettings.model_validate(card.backend)
    if settings.client != "openai":
        raise ValueError(f"{where}: backend.client: an API policy needs client openai, not {settings.client!r}")
    return settings.model_copy(update=request)


def _json(response: httpx.Response, model: str) -> dict[str, Any]:
    try:
        data = response.json()
        if not isinstance(data, dict) or not isinstance(data["choices"], list):
            raise TypeError("not an object with a list of choices")
        if not isinstance(data["choices"][0], dict):
            raise TypeError("choices[0] is not an object")
        if not isinstance(data["choices"][0].get("message") or {}, dict):
            raise TypeError("choices[0].message is not an object")
        return data
    except (ValueError, RecursionError, KeyError, IndexError, TypeError, AttributeError) as e:
        # ValueError: not JSON, or not UTF-8 (json.JSONDecodeError and UnicodeDecodeError are ValueErrors)
        raise ToolError(f"{model}: unexpected response ({type(e).__name__}: {str(e)[:100]}): "
                        f"{response.text[:300]}") from None


def _text(content: Any, model: str) -> str:
    """A message's content: a string, or a list of parts whose text parts are joined (some servers)."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        return "".join(p["text"] for p in content
                       if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str))
    raise ToolError(f"{model}: unexpected response: choices[0].message.content is {type(content).__name__} "
                    f"{str(content)[:40]!r}, not text")


def _native_call(tc: Any) -> PolicyCall:
    """One `tool_calls` entry; its `arguments` is a JSON string (OpenAI) or already an object (Ollama)."""
    if not isinstance(tc, dict) or not isinstance(tc.get("function"), dict):
        return PolicyCall(None, f"malformed tool call: expected {{'function': {{...}}}}, got {str(tc)[:80]!r}",
                          _call_id(tc))
    fn, call_id = tc["function"], _call_id(tc)
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        return PolicyCall(None, "malformed tool call: 'name' must be a non-empty string", call_id)
    args = fn.get("arguments")
    if args is None or args == "":
        args = {}
    elif isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError as e:
            return PolicyCall(None, f"malformed tool call: arguments of {name!r} are not valid JSON "
                                    f"({e.msg}, column {e.colno}) in {args[:80]!r}", call_id)
        except (RecursionError, ValueError) as e:  # absurd nesting, a 5,000-digit integer
            return PolicyCall(None, f"malformed tool call: arguments of {name!r} are unusable JSON "
                                    f"({type(e).__name__})", call_id)
    if not isinstance(args, dict):
        return PolicyCall(None, f"malformed tool call: arguments of {name!r} must be a JSON object, "
                                f"got {type(args).__name__}", call_id)
    why = safejson.problem(args)  # NaN, a lone surrogate, absurd nesting: nothing a tool may be given
    if why:
        return PolicyCall(None, f"malformed tool call: arguments of {name!r}: {why}", call_id)
    return PolicyCall(ToolCall(name=name, arguments=args), None, call_id)


def _call_id(tc: Any) -> str:
    # A `tool` message must name the call it answers; a server that sent no id gets one made up here.
    got = tc.get("id") if isinstance(tc, dict) else None
    return got if isinstance(got, str) and got else f"call_{uuid.uuid4().hex[:12]}"
