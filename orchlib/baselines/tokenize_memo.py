"""TokenizeMemo: a tokenizer wrapper that renders and tokenises each distinct prompt once, exactly as
the tokenizer it wraps would, for the many routes and baselines that share a task's prompt."""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from typing import Any

from orchlib.chat import CHAT_TEMPLATE, IM_END, IM_START, system_text
from orchlib.prompting import render_prompt
from orchlib.rollout import RolloutConfig
from orchlib.tasks import Task

__all__ = ["TokenizeMemo"]


class TokenizeMemo:
    """A tokenizer that renders and tokenises each distinct prompt once: every route of a task, and
    every baseline, starts from the same prompt, which is long (the system turn lists every tool).
    Everything else goes to the tokenizer it wraps; the ids and text are the tokenizer's own.

    Rendered prompts (`apply_chat_template(..., tokenize=False)`), their ids and the text of those ids
    are kept for the life of the memo (one `try_routes` and the baselines built on it); other short
    texts (the calls a route writes) in a small LRU. Two more savings, each exact:

    - with orchlib's own template (`orchlib.chat.CHAT_TEMPLATE`) a system-and-user prompt is put
      together from `chat.system_text`, byte-identical to the template, and the system turn (the tool
      list) is rendered once for all tasks;
    - a fast tokenizer cuts text at its added tokens (`<|im_end|>`, ...) before anything else and
      encodes the pieces apart, so a prompt's ids are its pieces' ids in order: the system piece, the
      same for every task, is encoded once. Only for tokenizers where that cut is exact (no added token
      strips spaces or matches on normalised text, no Metaspace pre-tokenizer); the first prompts are
      checked against a whole encoding, and any difference turns it off.
    """

    SHORT = 1024  # LRU entries for other texts: a route's call is the same text on every task
    CHECKED = 2   # prompts encoded both ways before the piece-wise encoding is trusted

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._rendered: dict[tuple, str] = {}        # (messages, tools, options) → prompt text
        self._systems: dict[tuple, str] = {}         # (system text, tools) → rendered system turn
        # prompt text → ids (a tuple: ints only, so the garbage collector stops walking it)
        self._prompt_ids: dict[str, tuple[int, ...] | None] = {}
        # prompt ids → text (filled on first decode), found by length and last ids, then compared whole
        self._decoded: dict[tuple, list[list]] = {}
        self._short: OrderedDict[tuple[str, bool], list[int]] = OrderedDict()
        self._tools_json: OrderedDict[tuple[int, ...], tuple[list, str]] = OrderedDict()
        self._short_text: OrderedDict[tuple[int, ...], str] = OrderedDict()
        self._pieces: dict[str, tuple[int, ...]] = {}  # a piece between added tokens → its ids
        self._split, self._added = _added_token_split(tokenizer)
        self._checked = 0
        self._by_task: dict[tuple, tuple[Task, RolloutConfig, tuple[int, ...]]] = {}  # see prompt_ids
        self._canon: dict[int, int] = {}  # id → the one int object that stands for it (see _ints)
        self._piece_text: dict[str, str] = {}  # a piece → the text its ids decode to
        self._decode_by_pieces = self._split is not None
        self._own_template = getattr(tokenizer, "chat_template", None) == CHAT_TEMPLATE
        # first prompt → its (task prompt, P line), for every RouteEngine over this memo (see _RouteScript)
        self.prompt_keys: dict[str, tuple[str, str]] = {}

    @classmethod
    def of(cls, tokenizer) -> TokenizeMemo:
        """`tokenizer` itself when it is a memo already (its prompts are kept), else a new memo over it."""
        return tokenizer if isinstance(tokenizer, TokenizeMemo) else cls(tokenizer)

    def __getattr__(self, name: str) -> Any:
        if name == "tokenizer":  # not set yet (copying): no recursion
            raise AttributeError(name)
        return getattr(self.tokenizer, name)

    def apply_chat_template(self, conversation, tools=None, **kw):
        if kw.get("tokenize", True):
            return self.tokenizer.apply_chat_template(conversation, tools=tools, **kw)
        plain = all(type(m) is dict and len(m) == 2 and type(m.get("role")) is str and type(m.get("content")) is str
                    for m in conversation)  # the rollout's system and user turns: no JSON needed for a key
        turns = tuple((m["role"], m["content"]) for m in conversation) if plain else json.dumps(
            conversation, sort_keys=True, default=str)
        tools_key = self._tools_key(tools)
        key = (turns, tools_key, tuple(sorted((k, repr(v)) for k, v in kw.items())))
        text = self._rendered.get(key)
        if text is None:
            text = self._own_render(turns, tools, tools_key, kw) if plain else None
            if text is None:
                text = self.tokenizer.apply_chat_template(conversation, tools=tools, **kw)
            self._rendered[key] = text
            self._prompt_ids.setdefault(text, None)
        return text

    def prompt_ids(self, task: Task, schemas: list[dict], config: RolloutConfig) -> tuple[int, ...]:
        """The ids of `render_prompt(task, schemas, self, config)`, found once per task, tool list and
        config (the rollout asks a tokenizer that has this method instead of rendering each time).
        Tasks and configs are frozen; each entry holds both, so their ids are never reused meanwhile."""
        key = (id(task), task.prompt, self._tools_key(schemas), id(config))
        found = self._by_task.get(key)
        if found is None or found[0] is not task or found[1] is not config:
            ids = tuple(self.encode(render_prompt(task, schemas, self, config), add_special_tokens=False))
            found = self._by_task[key] = (task, config, ids)
        return found[2]

    def _own_render(self, turns: tuple, tools, tools_key, kw: dict) -> str | None:
        """CHAT_TEMPLATE's text for a system turn (optional) and one user turn, or None for anything else."""
        if not self._own_template or set(kw) - {"tokenize", "add_generation_prompt"}:
            return None
        roles = [r for r, _ in turns]
        if roles not in (["system", "user"], ["user"]):
            return None
        system = turns[0][1] if roles[0] == "system" else None
        head = ""
        if tools or system is not None:  # the template opens a system turn for either
            found = self._systems.get((system, tools_key))
            if found is None:
                found = self._systems[(system, tools_key)] = system_text(system or "", tools or None)
            head = found
        tail = f"{IM_START}assistant\n" if kw.get("add_generation_prompt") else ""
        return f"{head}{IM_START}user\n{turns[-1][1]}{IM_END}\n{tail}"

    def _tools_key(self, tools) -> str | None:
        """The tool list as JSON, found by the identity of its dicts when a toolbox hands out the same
        ones every episode (Toolbox.schemas does); the list is held, so an id is never reused meanwhile."""
        if tools is None:
            return None
        ids = tuple(map(id, tools))
        found = self._tools_json.get(ids)
        if found is None:
            found = self._tools_json[ids] = (list(tools), json.dumps(tools, sort_keys=True, default=str))
            if len(self._tools_json) > 64:
                self._tools_json.popitem(last=False)
        return found[1]

    def encode(self, text: str, add_special_tokens: bool = True, **kw) -> list[int]:
        if kw:
            return self.tokenizer.encode(text, add_special_tokens=add_special_tokens, **kw)
        if add_special_tokens is False and text in self._prompt_ids:  # a rendered prompt: a fresh list of its ids
            ids = self._prompt_ids[text]
            if ids is None:
                ids = self._prompt_ids[text] = self._encode_prompt(text)
                self._decoded.setdefault(self._tail(ids), []).append([ids, None, text])
            return list(ids)
        key = (text, add_special_tokens)
        ids = self._short.get(key)
        if ids is None:
            ids = list(self._ints(self.tokenizer.encode(text, add_special_tokens=add_special_tokens)))
            if len(text) <= 4096:
                self._short[key] = ids
                if len(self._short) > self.SHORT:
                    self._short.popitem(last=False)
        else:
            self._short.move_to_end(key)
        return list(ids)

    def _ints(self, ids) -> tuple[int, ...]:
        """`ids` as one shared int object per id value: every trajectory's ids list then points into a
        vocabulary-sized set of ints rather than millions of copies (memory, and the garbage collector's
        walks over those lists, which touch every element)."""
        return tuple(map(self._canon.setdefault, ids, ids))

    def _encode_prompt(self, text: str) -> tuple[int, ...]:
        if self._split is None:
            return self._ints(self.tokenizer.encode(text, add_special_tokens=False))
        out: list[int] = []
        for piece in self._split.split(text):
            if not piece:
                continue
            if piece in self._added:
                out.append(self._added[piece])
                continue
            ids = self._pieces.get(piece)
            if ids is None:
                ids = self._ints(self.tokenizer.encode(piece, add_special_tokens=False))
                if len(self._pieces) < 100_000:
                    self._pieces[piece] = ids
            out += ids
        if self._checked < self.CHECKED:  # trust, but check the first prompts against a whole encoding
            self._checked += 1
            whole = tuple(self.tokenizer.encode(text, add_special_tokens=False))
            if whole != tuple(out):
                self._split, self._pieces = None, {}
                return self._ints(whole)
            # and their text against a whole decoding, piece by piece (see _decode_prompt)
            if self._decode_by_pieces and self._decode_prompt(text) != self.tokenizer.decode(
                    list(whole), skip_special_tokens=False):
                self._decode_by_pieces = False
        return tuple(out)

    def _decode_prompt(self, text: str) -> str:
        """The decoded ids of a rendered prompt, piece by piece: each piece between added tokens is
        decoded once (the system turn, once for all tasks), an added token is its own text."""
        parts = []
        for piece in self._split.split(text):
            if not piece or piece in self._added:
                parts.append(piece)
                continue
            found = self._piece_text.get(piece)
            if found is None:
                ids = self._pieces.get(piece) or self.tokenizer.encode(piece, add_special_tokens=False)
                found = self._piece_text[piece] = self.tokenizer.decode(list(ids), skip_special_tokens=False)
            parts.append(found)
        return "".join(parts)

    @staticmethod
    def _tail(ids) -> tuple:
        return len(ids), tuple(ids[-32:])

    def decode(self, ids, skip_special_tokens: bool = False, **kw) -> str:
        if kw or skip_special_tokens:
            return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens, **kw)
        if len(ids) > 256:  # a prompt (kept), or a longer conversation (not kept)
            entries = self._decoded.get(self._tail(ids), ())
            whole = (ids if type(ids) is tuple else tuple(ids)) if entries else ()
            for entry in entries:
                if entry[0] == whole:
                    if entry[1] is None:
                        entry[1] = (self._decode_prompt(entry[2]) if self._decode_by_pieces and self._split
                                    else self.tokenizer.decode(list(whole), skip_special_tokens=False))
                    return entry[1]
            return self.tokenizer.decode(ids, skip_special_tokens=False)
        key = tuple(ids)
        text = self._short_text.get(key)  # a turn a route writes is the same on every task
        if text is None:
            text = self._short_text[key] = self.tokenizer.decode(list(key), skip_special_tokens=False)
            if len(self._short_text) > self.SHORT:
                self._short_text.popitem(last=False)
        else:
            self._short_text.move_to_end(key)
        return text


def _added_token_split(tokenizer) -> tuple[re.Pattern | None, dict[str, int]]:
    """(a pattern cutting text at the added tokens, added token → id), or (None, {}) when a tokenizer
    does not encode the text between its added tokens independently (see TokenizeMemo)."""
    added = getattr(tokenizer, "added_tokens_decoder", None)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if not added or backend is None or "Metaspace" in repr(backend.pre_tokenizer):
        return None, {}
    tokens = list(added.values())
    if any(getattr(t, a, True) for t in tokens for a in ("lstrip", "rstrip", "single_word")):
        return None, {}
    if backend.normalizer is not None and any(getattr(t, "normalized", True) for t in tokens):
        return None, {}
    by_text = {t.content: i for i, t in added.items()}
    # Longest first: where one added token starts another, the longer one is matched (leftmost-longest).
    pattern = re.compile("(" + "|".join(re.escape(c) for c in sorted(by_text, key=len, reverse=True)) + ")")
    return pattern, by_text
