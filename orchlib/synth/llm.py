"""One LLM request per stage, cached on disk: a stage whose prompt is unchanged is read back, not paid again.

The cache file `<cache>/<stage>.json` holds the prompt's SHA-256, the reply and its token usage, written
atomically. A changed earlier stage changes the later prompts, so their cache no longer matches and
they are asked again. A reply that is not JSON is not cached (a rerun asks again) but is still counted.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from orchlib.atomic import write_text_atomic
from orchlib.synth.config import SynthConfig
from orchlib.tools import run_sync
from orchlib.tools.base import ToolError
from orchlib.tools.llm import MAX_TOKENS_PER_RESPONSE, chat_body, post_chat, usage_counts

__all__ = ["SynthError", "SynthCacheError", "Usage", "StageLLM", "parse_json_reply"]


class SynthError(ValueError):
    """A stage that cannot go on (the endpoint failed, a reply the next stage cannot use); one line."""


class SynthCacheError(SynthError):
    """A stage cache file that cannot be read back (bad input, not a failed request); names the file and field."""


class Usage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    requests: int = 0          # HTTP requests sent by this run
    cached: int = 0            # stages read back from the cache
    tokens_in: int = 0         # over every stage reply, cached ones included: what the domain cost
    tokens_out: int = 0
    cost_usd: float = 0.0
    cost_usd_this_run: float = 0.0


_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*?)\n\s*```\s*$", re.S)


def parse_json_reply(text: str, stage: str) -> Any:
    """The JSON value of a reply (a ```json fence around it is allowed); SynthError naming the stage."""
    m = _FENCE.match(text)
    try:
        return json.loads(m.group(1) if m else text)
    except json.JSONDecodeError as e:
        raise SynthError(f"stage {stage}: the reply is not JSON ({e.msg} at line {e.lineno} "
                         f"column {e.colno})") from None


class StageLLM:
    def __init__(self, config: SynthConfig, cache: Path):
        self.config, self.cache, self.usage = config, cache, Usage()

    def ask(self, stage: str, system: str, user: str) -> Any:
        """The parsed JSON reply to one stage's prompt, from the cache when the prompt is unchanged."""
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        sha = hashlib.sha256(json.dumps([self.config.llm.model, messages]).encode()).hexdigest()
        path = self.cache / f"{stage}.json"
        if path.exists():
            saved = _read_cached(path)
            if saved["prompt_sha256"] == sha:
                self.usage.cached += 1
                self._count(saved["tokens_in"], saved["tokens_out"], this_run=False)
                return parse_json_reply(saved["reply"], stage)
        try:
            response = run_sync(post_chat(self.config.llm, chat_body(self.config.llm, messages)))
            data = response.json()
            text = data["choices"][0]["message"].get("content") or ""
            if not isinstance(text, str):
                raise TypeError(f"choices[0].message.content is {type(text).__name__}, not text")
        except ToolError as e:
            raise SynthError(f"stage {stage}: {e}") from None
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise SynthError(f"stage {stage}: unexpected response ({type(e).__name__}): "
                            f"{response.text[:200]}") from None
        try:  # a malformed usage (negative, NaN, 1e30, a string) is refused, never put in the report
            counts = usage_counts(data.get("usage"), 0, 0)
        except ToolError as e:
            raise SynthError(f"stage {stage}: {self.config.llm.model}: {e}") from None
        tokens_in, tokens_out = counts.tokens_in, counts.tokens_out
        self.usage.requests += 1
        self._count(tokens_in, tokens_out, this_run=True)
        value = parse_json_reply(text, stage)  # raises before caching: a rerun asks again
        write_text_atomic(path, json.dumps({"stage": stage, "prompt_sha256": sha, "reply": text,
                                            "tokens_in": tokens_in, "tokens_out": tokens_out}, indent=1))
        return value

    def _count(self, tokens_in: int, tokens_out: int, *, this_run: bool) -> None:
        cost = self.config.price.cost(tokens_in=tokens_in, tokens_out=tokens_out)
        self.usage.tokens_in += tokens_in
        self.usage.tokens_out += tokens_out
        self.usage.cost_usd += cost
        if this_run:
            self.usage.cost_usd_this_run += cost


def _read_cached(path: Path) -> dict[str, Any]:
    """A stage cache file with its fields checked; SynthCacheError naming the file and field."""
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise SynthCacheError(f"{path}:{e.lineno}: not a stage cache file ({e.msg}); delete it to ask again") from None
    except (OSError, UnicodeDecodeError, RecursionError) as e:
        raise SynthCacheError(f"{path}: not a stage cache file ({type(e).__name__}); delete it to ask again") from None
    if not isinstance(saved, dict):
        raise SynthCacheError(f"{path}:1: expected an object (stage, prompt_sha256, reply, tokens_in, tokens_out)")
    for key, kind in (("prompt_sha256", str), ("reply", str), ("tokens_in", int), ("tokens_out", int)):
        value = saved.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise SynthCacheError(f"{path}: {key}: expected {'text' if kind is str else 'a whole number'}, "
                                  f"got {str(value)[:40]!r}")
        if kind is int and not 0 <= value <= MAX_TOKENS_PER_RESPONSE:
            raise SynthCacheError(f"{path}: {key}: {value} is not a token count (0 to {MAX_TOKENS_PER_RESPONSE:,})")
    return saved
