"""`llm` tools: another model as a tool.

Two clients (`backend.client`):
- `openai`: any OpenAI-compatible chat-completions endpoint over HTTP (OpenAI, vLLM, SGLang, llama.cpp,
  Ollama...). The API key is read at call time from the environment variable the card names, never
  from the card. 429 and 5xx answers and dropped connections are retried with exponential backoff
  (honouring Retry-After); a request that takes longer than `timeout_s` in all (a server trickling
  bytes included) is a "timeout" observation and is not retried. Tokens come from the response's
  `usage`, per class (reasoning tokens and cached prompt tokens from its `*_tokens_details`), and are
  priced by the card, whose price may come from the price table (`price: {table: gpt-5}`).
- `transformers`: a local causal LM (hub id or folder, loaded once per process), greedy unless a
  temperature is set. Generation runs in a worker thread, which cannot be interrupted: after a timeout
  the result is dropped but generation runs to `max_tokens`.

With `input: task` the model receives the task and the context gathered so far (ToolOrchestra's
`answer` / `enhance_reasoning` tools); with `input: arguments` it receives the argument named by
`backend.argument`, text the orchestrator wrote.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import json
import os
import threading
import time
import urllib.parse
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from orchlib.tools.base import Tool, ToolContext, ToolError, approx_tokens, task_text
from orchlib.trajectory import Observation

__all__ = ["LLMSettings", "LLMTool", "RETRY_STATUSES", "MAX_RESPONSE_BYTES", "MAX_TOKENS_PER_RESPONSE", "http_url",
           "Usage", "usage_counts", "chat_openai", "chat_body", "post_chat",
           "chat_transformers"]

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})

# A chat completion is text: 128k output tokens are about 0.5 MB of JSON, so a body past 10 MiB is a
# misbehaving server, and reading it whole would hold it all in memory (decoded size: a gzip bomb too).
MAX_RESPONSE_BYTES = 10 * 2**20
# No model reads or writes more than this in one request (the longest context windows are ~10M tokens);
# a larger `usage` count is garbage, and priced as sent it would put a bill of millions in the report.
MAX_TOKENS_PER_RESPONSE = 100_000_000


class LLMSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    client: Literal["openai", "transformers"] = Field("openai", description="how the model is reached")
    model: str = Field(description="model name at the endpoint, or a hub id / folder for transformers")
    base_url: str | None = Field(None, description="openai: e.g. https://api.openai.com/v1")
    api_key_env: str | None = Field(None, description="openai: environment variable holding the API key")
    system: str | None = Field(None, description="system message sent before the user's")
    max_tokens: int | None = Field(None, gt=0, description="output cap; openai: sent as max_tokens "
                                   "(reasoning models want extra_body.max_completion_tokens instead)")
    temperature: float | None = Field(None, ge=0, description="None: the server's default (openai), "
                                      "greedy (transformers)")
    timeout_s: float = Field(60.0, gt=0, description="openai: per request, the whole of it (not per read)")
    max_retries: int = Field(3, ge=0, description="openai: retries after a 429/5xx or dropped connection")
    backoff_s: float = Field(1.0, ge=0, description="openai: first retry waits this, then doubling")
    max_backoff_s: float = Field(30.0, ge=0, description="openai: cap on one wait, Retry-After included")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="openai: more request fields")
    argument: str = Field("prompt", description="input: arguments — which argument holds the prompt")
    device: str | None = Field(None, description="transformers: e.g. 'cpu', 'cuda'")

    @field_validator("base_url")
    @classmethod
    def _http_only(cls, v: str | None) -> str | None:
        return v if v is None else http_url(v)

    @model_validator(mode="after")
    def _openai_needs_url(self) -> LLMSettings:
        if self.client == "openai" and not self.base_url:
            raise ValueError("client openai needs base_url (e.g. https://api.openai.com/v1)")
        return self


def http_url(url: str) -> str:
    """`url` when it is an http(s) URL with a host; else ValueError. Any other scheme (ftp://, file://)
    would fail on every request, after every retry, minutes into a run."""
    try:
        parts = urllib.parse.urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # e.g. an unclosed [IPv6 bracket
        ok = False
    if not ok:
        raise ValueError(f"{url!r} is not an http:// or https:// URL")
    return url


class LLMTool(Tool):
    kind = "llm"
    Settings = LLMSettings

    def messages(self, arguments: dict[str, Any], context: ToolContext) -> list[dict[str, str]]:
        """The chat the model is sent."""
        if self.card.input == "task":
            text = task_text(context)
        else:
            text = arguments.get(self.settings.argument)
            if not isinstance(text, str):
                raise ToolError(f"argument {self.settings.argument!r} must hold the prompt as a string")
        system = [{"role": "system", "content": self.settings.system}] if self.settings.system else []
        return system + [{"role": "user", "content": text}]

    async def _run(self, arguments: dict[str, Any], context: ToolContext) -> Observation:
        messages = self.messages(arguments, context)
        if self.settings.client == "openai":
            text, usage = await chat_openai(self.settings, messages)
            return Observation(content=text, tokens_in=usage.tokens_in, tokens_out=usage.tokens_out,
                               tokens_reasoning=usage.tokens_reasoning, tokens_cached=usage.tokens_cached)
        text, tokens_in, tokens_out = await asyncio.to_thread(chat_transformers, self.settings, messages)
        return Observation(content=text, tokens_in=tokens_in, tokens_out=tokens_out)


@dataclasses.dataclass(frozen=True)
class Usage:
    """Token counts of one completion as OpenAI's `usage` gives them: `tokens_reasoning` are part of
    `tokens_out` (completion_tokens_details.reasoning_tokens) and `tokens_cached` part of `tokens_in`
    (prompt_tokens_details.cached_tokens); the card's Price bills each class at its own price."""

    tokens_in: int
    tokens_out: int
    tokens_reasoning: int = 0
    tokens_cached: int = 0


def usage_counts(usage: Any, estimate_in: int, estimate_out: int) -> Usage:
    """The counts of a response's `usage` object; a count it lacks is the estimate given (some local
    servers send no usage). A count that is not a whole number ≥ 0 raises ToolError: a bill is never
    guessed from a malformed one."""
    if usage is None:
        usage = {}
    if not isinstance(usage, dict):
        raise ToolError(f"the response's usage is {type(usage).__name__} {str(usage)[:40]!r}, not an object")

    def count(value: Any, default: int, what: str) -> int:
        if value is None:
            return default
        # NaN fails `0 <= value`; infinity and 1e30 fail the bound: a bill is never computed from them
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not 0 <= value <= MAX_TOKENS_PER_RESPONSE or value != int(value)):
            raise ToolError(f"the response's usage has {what} = {repr(value)[:40]}, not a token count "
                            f"(a whole number from 0 to {MAX_TOKENS_PER_RESPONSE:,})")
        return int(value)

    details_out = usage.get("completion_tokens_details") or {}
    details_in = usage.get("prompt_tokens_details") or {}
    tokens_in = count(usage.get("prompt_tokens"), estimate_in, "prompt_tokens")
    tokens_out = count(usage.get("completion_tokens"), estimate_out, "completion_tokens")
    reasoning = count(details_out.get("reasoning_tokens") if isinstance(details_out, dict) else None, 0,
                      "completion_tokens_details.reasoning_tokens")
    cached = count(details_in.get("cached_tokens") if isinstance(details_in, dict) else None, 0,
                   "prompt_tokens_details.cached_tokens")
    # Parts of a total, so never more than it (a server that counts them apart would bill them twice).
    return Usage(tokens_in, tokens_out, min(reasoning, tokens_out), min(cached, tokens_in))


async def chat_openai(s: LLMSettings, messages: list[dict[str, str]]) -> tuple[str, Usage]:
    """(text, token counts) from `POST {base_url}/chat/completions`."""
    response = await post_chat(s, chat_body(s, messages))
    return _parse_completion(response, s.model, messages)


def chat_body(s: LLMSettings, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The request body: model, messages, the card's output cap and temperature, then `extra_body`."""
    body: dict[str, Any] = {"model": s.model, "messages": messages}
    if s.max_tokens is not None:
        body["max_tokens"] = s.max_tokens
    if s.temperature is not None:
        body["temperature"] = s.temperature
    body.update(s.extra_body)
    return body


async def post_chat(s: LLMSettings, body: dict[str, Any], client: httpx.AsyncClient | None = None) -> httpx.Response:
    """The 200 response to `POST {base_url}/chat/completions` with `body`, after the retries above;
    any other outcome raises ToolError ("timeout" or "tool_failure"). Shared by the `llm` tool and the
    API policy engine (orchlib.engines.openai), which passes its own pooled `client`."""
    headers = {"Content-Type": "application/json"}
    if s.api_key_env:
        key = os.environ.get(s.api_key_env)
        if not key:
            raise ToolError(f"environment variable {s.api_key_env} (the API key) is not set")
        headers["Authorization"] = f"Bearer {key}"
    if client is None:
        # A client per call: calls may come from different event loops (call_many_sync in Jupyter).
        async with httpx.AsyncClient(timeout=httpx.Timeout(s.timeout_s)) as own:
            return await _post_retrying(s, own, headers, body)
    return await _post_retrying(s, client, headers, body)


async def _post_retrying(s: LLMSettings, client: httpx.AsyncClient, headers: dict[str, str],
                         body: dict[str, Any]) -> httpx.Response:
    url = s.base_url.rstrip("/") + "/chat/completions"
    last = ""
    for attempt in range(s.max_retries + 1):
        try:
            # httpx's timeout bounds each read, so a server trickling a byte a second never trips it:
            # the deadline covers the whole request, headers and body.
            async with asyncio.timeout(s.timeout_s):
                response = await _post_capped(client, url, headers, body, s)
        except (httpx.TimeoutException, TimeoutError):
            raise ToolError(f"{s.model}: no answer from {url} within {s.timeout_s:g} s", kind="timeout") from None
        except httpx.TransportError as e:  # refused or dropped connection: worth another try
            last, wait = f"{type(e).__name__}: {e}", _backoff(s, attempt, None)
        else:
            if response.status_code == 200:
                return response
            last = f"HTTP {response.status_code}: {response.text[:300]}"
            if response.status_code not in RETRY_STATUSES:
                raise ToolError(f"{s.model}: {last}")
            wait = _backoff(s, attempt, response.headers.get("retry-after"))
        if attempt < s.max_retries:
            await asyncio.sleep(wait)
    raise ToolError(f"{s.model}: gave up after {s.max_retries + 1} attempts; last: {last}")


async def _post_capped(client: httpx.AsyncClient, url: str, headers: dict[str, str], body: dict[str, Any],
                       s: LLMSettings) -> httpx.Response:
    """`client.post`, with the body read up to MAX_RESPONSE_BYTES (decoded); past it, ToolError."""
    request = client.build_request("POST", url, headers=headers, json=body, timeout=s.timeout_s)
    response = await client.send(request, stream=True)
    try:
        chunks, size = [], 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > MAX_RESPONSE_BYTES:
                raise ToolError(f"{s.model}: the response from {url} is over {MAX_RESPONSE_BYTES // 2**20} MiB; "
                                "refused unread")
            chunks.append(chunk)
    finally:
        await response.aclose()
    # The decoded body in a plain response (no content-encoding left to undo), for .json() and .text
    kept = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in ("content-encoding",
                                                                                    "content-length")]
    return httpx.Response(response.status_code, headers=kept, content=b"".join(chunks), request=request)


def _backoff(s: LLMSettings, attempt: int, retry_after: str | None) -> float:
    wait = s.backoff_s * 2**attempt
    if retry_after:
        try:
            wait = max(wait, float(retry_after))
        except ValueError:
            try:  # the other form RFC 9110 allows: an HTTP date
                wait = max(wait, email.utils.parsedate_to_datetime(retry_after).timestamp() - time.time())
            except (TypeError, ValueError):
                pass  # an unreadable header: keep the exponential wait
    return min(wait, s.max_backoff_s)


def _parse_completion(response: httpx.Response, model: str, messages: list[dict[str, str]]) -> tuple[str, Usage]:
    try:
        data = response.json()
        text = data["choices"][0]["message"].get("content") or ""
    except (json.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError) as e:
        raise ToolError(f"{model}: unexpected response ({type(e).__name__}): {response.text[:300]}") from None
    # Without `usage` (some local servers) the counts are estimated, so the call is still priced.
    try:
        return text, usage_counts(data.get("usage"), approx_tokens(" ".join(m["content"] for m in messages)),
                                  approx_tokens(text))
    except ToolError as e:
        raise ToolError(f"{model}: {e}") from None


_MODELS: dict[tuple[str, str | None], tuple[Any, Any, threading.Lock]] = {}
_MODELS_LOCK = threading.Lock()


def _local_model(s: LLMSettings) -> tuple[Any, Any, threading.Lock]:
    from orchlib.models import PolicyLoadError, load_policy

    key = (s.model, s.device)
    with _MODELS_LOCK:
        if key not in _MODELS:
            try:
                model, tok = load_policy(s.model, device=s.device)
            except PolicyLoadError as e:
                raise ToolError(str(e)) from None
            model.eval()
            _MODELS[key] = (model, tok, threading.Lock())
        return _MODELS[key]


def chat_transformers(s: LLMSettings, messages: list[dict[str, str]]) -> tuple[str, int, int]:
    """(text, prompt tokens, generated tokens) from a local model; the lock keeps one generation per
    model at a time (generate is not documented as thread-safe)."""
    import torch

    model, tok, lock = _local_model(s)
    if tok.chat_template:
        enc = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    else:  # a base model: plain text turns
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
        enc = tok(text, return_tensors="pt")
    enc = {k: v.to(model.device) for k, v in enc.items()}
    kwargs: dict[str, Any] = {"max_new_tokens": s.max_tokens or 256, "pad_token_id": tok.pad_token_id}
    if s.temperature:
        kwargs.update(do_sample=True, temperature=s.temperature)
    else:
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    with lock, torch.no_grad():
        out = model.generate(**enc, **kwargs)
    prompt_len = enc["input_ids"].shape[1]
    new = out[0, prompt_len:].tolist()
    eos = model.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
    # Count up to and including the first end-of-sequence id: what was generated, not padding.
    end = next((i + 1 for i, t in enumerate(new) if t in eos_ids), len(new))
    return tok.decode(new[:end], skip_special_tokens=True), int(prompt_len), end
