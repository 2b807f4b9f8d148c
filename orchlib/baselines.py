"""Fixed-routing baselines, as Engines: they write the calls a route prescribes, then an answer, so they
run through the same rollout and the same accounting as a trained orchestrator.

A *route* of a task is one way to solve it: its golden call sequence, each golden alternative, and one
call to every offered tool whose card is `final` with `input: task` (a model that answers the task
itself). Routes are labelled by their tool (or tools, joined by "+").

- `strongest`: the route with the highest accuracy in the task's category (ties: cheaper), measured on
  calibration tasks (`try_routes`).
- `cheapest`: the route with the lowest mean cost in the task's category (ties: more accurate), measured
  the same way — the money a route really costs, policy tokens included, rather than list prices.
- `random`: uniform over the task's routes, seeded per task.
- `oracle`: per task, the cheapest route that is right on *that* task, found by running every route;
  when none is right, the cheapest route. Its accuracy is the share of tasks some route solves.

After a non-final tool the baseline answers as a *perfect reader*: it writes the reference answer when
the tool output it was shown contains it (every required fact, for shop tasks; the number, for numeric
checkers), else the first line of the last output. Baselines therefore measure routing, not reading.
"""

from __future__ import annotations

import gc
import json
import math
import random
import re
from collections import OrderedDict
from contextlib import contextmanager
from functools import lru_cache
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sequence, TypeVar

import numpy as np

from orchlib.chat import CHAT_TEMPLATE, IM_END, IM_START, TOOL_RESPONSE, TOOL_RESPONSE_END, render_call, system_text
from orchlib.engines.scripted import ScriptedEngine
from orchlib.rollout import RolloutConfig, preference_line, render_prompt, rollout
from orchlib.tasks import Task, answer_in_text
from orchlib.trajectory import ToolCall, Trajectory, new_tool_call

__all__ = ["BASELINES", "EVAL_ROLLOUT", "ROUTE_BATCH", "RouteResult", "Trials", "routes", "route_label", "RouteEngine",
           "PromptMemo", "run_routes", "try_routes", "route_stats", "choose", "make_baselines", "collector_paused"]

T = TypeVar("T")

BASELINES: tuple[str, ...] = ("strongest", "cheapest", "random", "oracle")

# Tasks per rollout when routes are tried: few enough that a batch's trajectories (each holds its
# prompt's ids three times over) stay small for the garbage collector, many enough to batch the engine.
ROUTE_BATCH = 128

# Evaluation gives more room than the training default (48 new ids, 4 turns): a shop write call is
# ~55 ids of the default tokenizer, and a two-step shop task needs three turns before its answer. The
# tool timeout is the toolbox's 60 s: the simulated generalist declares 30 s ± 30 %, so a 30 s limit
# would turn about half of its answers into timeouts.
EVAL_ROLLOUT = RolloutConfig(max_turns=5, max_new_tokens=128, max_total_tokens=4096, tool_timeout_s=60.0)


def route_label(calls: Sequence[ToolCall]) -> str:
    return "+".join(dict.fromkeys(c.name for c in calls))


def routes(task: Task, cards: Iterable[Any]) -> dict[str, list[ToolCall]]:
    """label → call sequence of every route of `task` (see the module docstring), sorted by label.
    Only sequences whose tools the task offers count."""
    cards = list(cards)
    offered = set(task.tools) if task.tools is not None else {c.name for c in cards}
    golden = task.golden
    seqs = ([golden.calls] if golden and golden.calls else []) + (list(golden.alternatives) if golden else [])
    out: dict[str, list[ToolCall]] = {}
    for seq in seqs:
        if seq and all(c.name in offered for c in seq):
            out.setdefault(route_label(seq), list(seq))
    for card in cards:
        if card.name in offered and card.final and card.input == "task":
            out.setdefault(card.name, [new_tool_call(card.name, {})])  # a name and no arguments: no validation
    return dict(sorted(out.items()))


# ---------------------------------------------------------------------------------------------- memo
class PromptMemo:
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
    def of(cls, tokenizer) -> PromptMemo:
        """`tokenizer` itself when it is a memo already (its prompts are kept), else a new memo over it."""
        return tokenizer if isinstance(tokenizer, PromptMemo) else cls(tokenizer)

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
    does not encode the text between its added tokens independently (see PromptMemo)."""
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


# ---------------------------------------------------------------------------------------------- engine
_USER = f"{IM_START}user\n"
_PREF = re.compile(r"Preference \([^)]*\):[^\n<]*")
_RESPONSE = re.compile(re.escape(TOOL_RESPONSE) + r"\n(.*?)\n" + re.escape(TOOL_RESPONSE_END), re.S)


def _prompt_key(prompt_text: str) -> tuple[str, str]:
    """(task prompt, preference line) of a rendered conversation: the first user turn and the P line."""
    start = prompt_text.index(_USER) + len(_USER)
    user = prompt_text[start:prompt_text.index(IM_END, start)]
    pref = _PREF.search(prompt_text)  # in the system turn, the user turn or the assistant's prefix
    if pref is not None and start <= pref.start() < start + len(user):  # preference_at="user": P follows the task
        user = user[:pref.start() - start].removesuffix("\n\n")
    return user, pref.group(0).strip() if pref else ""


@lru_cache(maxsize=1024)
def _bare_call(name: str) -> str:
    """A call without arguments (a model tool given the task: every route of that tool), rendered once."""
    return render_call(ToolCall(name=name))


class RouteEngine(ScriptedEngine):
    """Writes each task's planned route, one call per turn (a later call may depend on an earlier
    write), then the perfect reader's answer. `plan` maps task id → route label."""

    def __init__(self, tokenizer, tasks: Sequence[Task], plan: Mapping[str, str],
                 task_routes: Mapping[str, Mapping[str, list[ToolCall]]], name: str = "route",
                 config: RolloutConfig | None = None):
        self.plan = dict(plan)
        by_key: dict[tuple[str, str], tuple[Task, list[ToolCall]]] = {}
        shown = config or EVAL_ROLLOUT
        for t in tasks:
            if t.id not in self.plan:
                continue
            # P's line as the rollout renders it (`config`: the rollout's, which sets its style)
            by_key[(t.prompt, preference_line(t, shown))] = (t, list(task_routes[t.id][self.plan[t.id]]))
        # The script is an object of its own, not a bound method: an engine that held its own method
        # would be a cycle, kept (with every episode it followed) until the garbage collector ran.
        super().__init__(tokenizer, _RouteScript(name, by_key, getattr(tokenizer, "prompt_keys", None)))
        self.name = name


class _RouteScript:
    """The turn a RouteEngine writes, from the conversation so far."""

    def __init__(self, name: str, by_key: dict[tuple[str, str], tuple[Task, list[ToolCall]]],
                 first: dict[str, tuple[str, str]] | None = None):
        self.name, self.by_key = name, by_key
        # first prompt → its (task prompt, P line): a function of the text alone, so a memo's engines
        # (one per batch of routes, one per baseline) share it
        self.first: dict[str, tuple[str, str]] = {} if first is None else first

    def __call__(self, prompt_text: str, turn: int) -> str:
        # A first prompt is the same text on every route of its task: its key is found once.
        key = self.first.get(prompt_text) if turn == 0 else None
        if key is None:
            key = _prompt_key(prompt_text)
            if turn == 0:
                self.first[prompt_text] = key
        if key not in self.by_key:  # P not shown in the prompt (show_preference=False): the prompt alone
            same = [k for k in self.by_key if k[0] == key[0]]
            if len(same) != 1:  # built for other tasks, or ambiguous: a bug, not a wrong answer
                raise KeyError(f"{self.name}: no single planned route for task prompt {key[0][:60]!r} ({key[1]})")
            key = same[0]
        task, calls = self.by_key[key]
        if turn < len(calls):
            call = calls[turn]
            return _bare_call(call.name) if not call.arguments else render_call(call)
        shown = _RESPONSE.findall(prompt_text[prompt_text.index(_USER):])
        gold = task.golden.answer if task.golden and task.golden.answer is not None else task.answer
        if gold is not None and answer_in_text(task, "\n".join(shown)):
            return gold
        last = shown[-1].strip().splitlines() if shown else []
        return last[0][:200] if last else "I do not know."


# ---------------------------------------------------------------------------------------------- trials
@dataclass(frozen=True)
class RouteResult:
    outcome: float
    cost_usd: float
    latency_s: float


@dataclass
class Trials:
    """Every route of every task, run once: `results[task_id][label]`. `tokenizer` is the PromptMemo
    the routes ran with; baselines built on these trials reuse its rendered prompts."""

    tasks: list[Task]
    routes: dict[str, dict[str, list[ToolCall]]]
    results: dict[str, dict[str, RouteResult]]
    tokenizer: Any = field(default=None, repr=False)


def _route_batches(tasks: list[Task], toolbox, tokenizer, config: RolloutConfig | None, seed: int | None,
                   task_routes: Mapping[str, Mapping[str, list[ToolCall]]],
                   ) -> Iterator[tuple[list[Task], dict[str, str], list[Trajectory]]]:
    """(tasks, task id → label, trajectories) of the r-th route of every task, in batches of at most
    ROUTE_BATCH tasks, so a caller can keep what it needs of a batch and let its trajectories go (a route
    is written, not sampled: how tasks are batched changes nothing in a trajectory)."""
    tokenizer = PromptMemo.of(tokenizer)  # the prompt of a task is the same on every route
    depth = max((len(r) for r in task_routes.values()), default=0)
    for r in range(depth):
        tasks_r = [t for t in tasks if len(task_routes[t.id]) > r]
        for start in range(0, len(tasks_r), ROUTE_BATCH):
            # Nothing of a batch stays in this frame: its trajectories go as soon as the caller drops them.
            yield _route_batch(tasks_r[start:start + ROUTE_BATCH], r, toolbox, tokenizer, config, seed, task_routes)


def _route_batch(batch: list[Task], r: int, toolbox, tokenizer, config: RolloutConfig | None, seed: int | None,
                 task_routes: Mapping[str, Mapping[str, list[ToolCall]]],
                 ) -> tuple[list[Task], dict[str, str], list[Trajectory]]:
    plan = {t.id: list(task_routes[t.id])[r] for t in batch}
    engine = RouteEngine(tokenizer, batch, plan, task_routes, name=f"route#{r}", config=config)
    return batch, plan, rollout(batch, toolbox, engine, config or EVAL_ROLLOUT, seed=seed)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Automatic garbage collection off for one batch of episodes, then back as it was.

    Every trajectory holds its prompt's ids three times over (ids, mask, log-probs), and the collector
    walks every element of every list it finds among young objects: on replayed routes that walk cost
    more than the episodes themselves (benchmarks/bench_replay.py). Reference counting still frees
    everything that is not a cycle; the cycles a batch leaves are collected once it is done. Only
    automatic collection is paused (process-wide, for the batch); a collector someone turned off
    stays off."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def run_routes(tasks: Sequence[Task], toolbox, tokenizer, config: RolloutConfig | None = None,
               seed: int | None = 0, task_routes: Mapping[str, Mapping[str, list[ToolCall]]] | None = None,
               ) -> dict[str, dict[str, Trajectory]]:
    """task id → route label → its trajectory: every route of every task (`task_routes`, default
    `routes(task, toolbox.cards)`) run once through the rollout, the r-th route of all tasks in one batch.
    Every trajectory is kept: for many tasks and routes, `try_routes` keeps only their results."""
    tasks = list(tasks)
    if task_routes is None:
        task_routes = {t.id: routes(t, toolbox.cards) for t in tasks}
    runs: dict[str, dict[str, Trajectory]] = {t.id: {} for t in tasks}
    for batch, plan, trajectories in _route_batches(tasks, toolbox, tokenizer, config, seed, task_routes):
        for t, traj in zip(batch, trajectories):
            runs[t.id][plan[t.id]] = traj
    return runs


def _paused_batches(batches: Iterator[T]) -> Iterator[T]:
    """Each item of `batches` produced, and then used by the caller, with the collector paused; it
    runs between items (see collector_paused)."""
    while True:
        with collector_paused():
            item = next(batches, None)
            if item is None:
                return
            yield item
            del item


def try_routes(tasks: Sequence[Task], toolbox, tokenizer, config: RolloutConfig | None = None,
               seed: int | None = 0) -> Trials:
    """Run every route of every task once and keep each run's outcome, cost and latency (the
    trajectories of one route at a time are held, then let go)."""
    tasks = list(tasks)
    task_routes = {t.id: routes(t, toolbox.cards) for t in tasks}
    memo = PromptMemo.of(tokenizer)
    results: dict[str, dict[str, RouteResult]] = {t.id: {} for t in tasks}
    for batch, plan, trajectories in _paused_batches(_route_batches(tasks, toolbox, memo, config, seed,
                                                                    task_routes)):
        for t, tr in zip(batch, trajectories):
            results[t.id][plan[t.id]] = RouteResult(tr.outcome, tr.cost_usd, tr.latency_s)
        tr = trajectories = None  # the batch goes before the collector runs again
    return Trials(tasks, task_routes, results, memo)


def route_stats(trials: Trials) -> dict[str, dict[str, dict[str, float]]]:
    """category → label → mean accuracy, cost and latency over the tasks that offer the route."""
    acc: dict[tuple[str, str], list[RouteResult]] = {}
    for t in trials.tasks:
        for label, res in trials.results[t.id].items():
            acc.setdefault((t.category, label), []).append(res)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for (cat, label), rs in sorted(acc.items()):
        out.setdefault(cat, {})[label] = {"n": len(rs), "accuracy": float(np.mean([r.outcome for r in rs])),
                                          "cost_usd": float(np.mean([r.cost_usd for r in rs])),
                                          "latency_s": float(np.mean([r.latency_s for r in rs]))}
    return out


def choose(name: str, task: Task, labels: Sequence[str], stats: Mapping[str, Mapping[str, Mapping[str, float]]],
           trial: Mapping[str, RouteResult] | None = None, seed: int = 0) -> str:
    """The label baseline `name` picks for `task` among `labels` (see the module docstring)."""
    labels = sorted(labels)
    if not labels:
        raise ValueError(f"task {task.id} has no route (no golden calls and no final model tool offered)")
    cat = stats.get(task.category, {})
    unknown = {"accuracy": -math.inf, "cost_usd": math.inf}

    def s(label: str) -> Mapping[str, float]:
        return cat.get(label, unknown)

    if name == "strongest":
        return min(labels, key=lambda x: (-s(x)["accuracy"], s(x)["cost_usd"], x))
    if name == "cheapest":
        return min(labels, key=lambda x: (s(x)["cost_usd"], -s(x)["accuracy"], x))
    if name == "random":
        return random.Random(f"{seed}:{task.id}").choice(labels)
    if name == "oracle":
        if trial is None:
            raise ValueError("the oracle needs the trial of every route on this task")
        best = max(trial[x].outcome for x in labels)
        return min((x for x in labels if trial[x].outcome == best),
                   key=lambda x: (trial[x].cost_usd, trial[x].latency_s, x))
    raise KeyError(f"unknown baseline {name!r}; known: {BASELINES}")


def make_baselines(tasks: Sequence[Task], toolbox, tokenizer, names: Sequence[str] = BASELINES,
                   calibration: Sequence[Task] | Trials | None = None, trials: Trials | None = None,
                   config: RolloutConfig | None = None, seed: int = 0) -> dict[str, RouteEngine]:
    """Baseline engines for `tasks`. `strongest`/`cheapest` rank routes on `calibration` (tasks, or
    their Trials; default: `tasks` themselves); the oracle runs every route on `tasks` (`trials`)."""
    tasks = list(tasks)
    need_own = "oracle" in names or calibration is None
    own = trials or (try_routes(tasks, toolbox, tokenizer, config) if need_own else None)
    if isinstance(calibration, Trials):
        cal = calibration
    elif calibration is not None:
        cal = try_routes(calibration, toolbox, tokenizer, config)
    else:
        cal = own
    stats = route_stats(cal) if cal is not None else {}
    task_routes = own.routes if own is not None else {t.id: routes(t, toolbox.cards) for t in tasks}
    # The engines share one memo (the trials' when they ran these tasks): every baseline renders the
    # same prompts as the routes did.
    memo = own.tokenizer if own is not None and own.tokenizer is not None and tokenizer in (
        own.tokenizer, own.tokenizer.tokenizer) else PromptMemo.of(tokenizer)
    out = {}
    for name in names:
        plan = {t.id: choose(name, t, list(task_routes[t.id]), stats,
                             own.results[t.id] if own is not None else None, seed) for t in tasks}
        out[name] = RouteEngine(memo, tasks, plan, task_routes, name=name, config=config)
    return out
