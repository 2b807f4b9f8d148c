"""Routes of a task (its golden call sequences and the final model tools it offers), and RouteEngine,
which writes a planned route then answers as a perfect reader (see `orchlib.baselines`)."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Iterable, Mapping, Sequence

from orchlib.chat import IM_END, IM_START, TOOL_RESPONSE, TOOL_RESPONSE_END, render_call
from orchlib.engines.scripted import ScriptedEngine
from orchlib.prompting import KIND_OPENING, PRICE_ORDER_OPENING, preference_line
from orchlib.rollout import RolloutConfig
from orchlib.tasks import Task, answer_in_text
from orchlib.trajectory import ToolCall, new_tool_call

__all__ = ["EVAL_ROLLOUT", "route_label", "routes", "RouteEngine"]

# Evaluation gives more room than the training default (48 new ids, 4 turns): a shop write call is
# ~55 ids of the default tokenizer, and a two-step shop task needs three turns before its answer. The
# tool timeout is the toolbox's 60 s: the simulated generalist declares 30 s ± 30 %, so a 30 s limit
# would turn about half of its answers into timeouts.
EVAL_ROLLOUT = RolloutConfig(max_turns=5, max_new_tokens=128, max_total_tokens=4096, tool_timeout_s=60.0)


def route_label(calls: Sequence[ToolCall]) -> str:
    return "+".join(dict.fromkeys(c.name for c in calls))


def routes(task: Task, cards: Iterable[Any]) -> dict[str, list[ToolCall]]:
    """label → call sequence of every route of `task` (see `orchlib.baselines`), sorted by label.
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


# ---------------------------------------------------------------------------------------------- engine
_USER = f"{IM_START}user\n"
_PREF = re.compile(r"Preference \([^)]*\):[^\n<]*")
_RESPONSE = re.compile(re.escape(TOOL_RESPONSE) + r"\n(.*?)\n" + re.escape(TOOL_RESPONSE_END), re.S)


def _prompt_key(prompt_text: str) -> tuple[str, str]:
    """(task prompt, preference line) of a rendered conversation: the first user turn and the P line."""
    start = prompt_text.index(_USER) + len(_USER)
    user = prompt_text[start:prompt_text.index(IM_END, start)]
    order = user.rfind("\n" + PRICE_ORDER_OPENING)
    if order >= 0 and "\n" not in user[order + 1:]:  # price_order_at="user": the line closes the user turn
        user = user[:order]
    pref = _PREF.search(prompt_text)  # in the system turn, the user turn or the assistant's prefix
    if pref is not None and start <= pref.start() < start + len(user):  # preference_at="user": P follows the task
        user = user[:pref.start() - start].removesuffix("\n\n")
    kind = user.rfind("\n" + KIND_OPENING)
    if kind >= 0 and "\n" not in user[kind + 1:]:  # show_kind: the kind's line follows the task
        user = user[:kind]
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
