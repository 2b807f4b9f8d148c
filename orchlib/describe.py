"""Tool descriptions written from evidence, as ToolOrchestra does (arXiv 2511.21689): sample tasks, run
the tool on them, record how it did, and write the description the orchestrator reads from that.

    from orchlib.describe import describe, describe_file
    result = describe(load_card("toolcards/specialist.yaml"), suite.train, n=40)
    result.stats.categories["arithmetic"].success_rate, result.card.description
    describe_file("toolcards/specialist.yaml", "tasks/train.jsonl")      # writes the card back

Which tasks: those whose `tools` list names the card (a task without a list offers every tool),
`n` of them, stratified by category (an even share each; a small category gives its leftover to the
others), drawn with `seed`. What the tool receives: a model tool with `input: task` gets the task
itself; any other tool gets the arguments `policy(task, card)` returns, or else those of the first
golden call naming it (`task.golden.calls`, then the alternatives; on a task with an environment, only
a route's last call); a model tool that takes its prompt as an argument gets the task's prompt there.
A task with none of these is skipped and counted.

What counts as right: the task's checker accepts the tool's output as the answer (a stateful task is
checked on a fresh environment after this one call). A tool that is not `final` only gathers facts, so
it is also right when its output contains the answer (the perfect reader of `orchlib.baselines`), on
tasks without an environment. An error observation is wrong and counts toward the error rate.

The text: with `describer` (an `llm` card or tool) its answer to `describer_prompt`; without, the
tool's own text followed by `template_text` of the statistics. The text the card had before any
generated description is kept in `auto_description.base`, so describing again does not stack numbers;
every replaced text goes to `auto_description.history`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import hashlib
import json
import os
import random
from pathlib import Path
from typing import Any, Callable, Sequence

from orchlib.cards import MODEL_KINDS, ToolCard, load_card, save_card
from orchlib.describe_stats import Trial, ToolStats, block, describer_prompt, summarise, template_text
from orchlib.tasks import Task, answer_in_text, load_tasks
from orchlib.tools import DEFAULT_TIMEOUT_S, Tool, ToolContext, build_tool, run_sync
from orchlib.trajectory import Observation, ToolCall

__all__ = ["DescribeError", "DescriberError", "DescribeResult", "Policy", "MAX_DESCRIPTION_CHARS", "describe",
           "describe_file", "arguments_for", "pick_tasks", "run_trials", "ask_describer"]

# A policy's tool list sits in its prompt: a description is a paragraph, not a report.
MAX_DESCRIPTION_CHARS = 1200
# Calls in flight at once: enough to hide an API's latency, few enough for a python sandbox on 2 cores.
MAX_PARALLEL = 8

Policy = Callable[[Task, ToolCard], "dict[str, Any] | None"]


class DescribeError(ValueError):
    """Bad input to describe (no task to try the tool on, a describer that is not a model, ...)."""


class DescriberError(DescribeError):
    """The describer model failed (e.g. its server kept answering 500); nothing was written."""


@dataclasses.dataclass(frozen=True)
class DescribeResult:
    card: ToolCard                # the described card (keeps the original's file, comments, key order)
    stats: ToolStats
    description: str              # the new text
    previous: str                 # the text it replaced
    prompt: str | None = None     # what the describer read; None for the offline template
    path: Path | None = None      # where describe_file wrote the card


# ---------------------------------------------------------------------------------------------- which tasks
def _golden_call(task: Task, name: str) -> ToolCall | None:
    if task.golden is None:
        return None
    for seq in [task.golden.calls, *task.golden.alternatives]:
        # A stateful task is judged on its final state, which one call on a fresh copy reaches only when
        # it is the route's last step: an earlier one (the look-up before an order) would always look wrong.
        for call in (seq[-1:] if task.state is not None else seq):
            if call.name == name:
                return call
    return None


def arguments_for(task: Task, tool: Tool, policy: Policy | None = None) -> dict[str, Any] | None:
    """The arguments `tool` is called with on `task`, or None when there are none (the task is skipped)."""
    card = tool.card
    if card.input == "task":
        return {}
    if policy is not None:
        args = policy(task, card)
        if args is not None and not isinstance(args, dict):
            raise DescribeError(f"policy returned {type(args).__name__} for task {task.id}; expected a dict or None")
        return args
    call = _golden_call(task, card.name)
    if call is not None:
        return dict(call.arguments)
    argument = getattr(tool.settings, "argument", None)  # llm / replay: which argument holds the prompt
    if card.kind in MODEL_KINDS and isinstance(argument, str):
        return {argument: task.prompt}
    return None


def pick_tasks(tool: Tool, tasks: Sequence[Task], n: int, seed: int = 0,
               policy: Policy | None = None) -> tuple[list[tuple[Task, dict[str, Any]]], int]:
    """(task, arguments) pairs to try `tool` on, stratified by category, and how many tasks offering the
    tool were skipped for want of arguments."""
    if n < 1:
        raise DescribeError(f"n must be at least 1, got {n}")
    offered = [t for t in tasks if t.tools is None or tool.name in t.tools]
    if not offered:
        raise DescribeError(f"none of the {len(tasks)} tasks offers tool {tool.name!r}")
    usable: dict[str, list[tuple[Task, dict[str, Any]]]] = {}
    for t in offered:
        args = arguments_for(t, tool, policy)
        if args is not None:
            usable.setdefault(t.category, []).append((t, args))
    skipped = len(offered) - sum(map(len, usable.values()))
    if not usable:
        how = "the policy gave none" if policy else "no golden call names it; pass a policy"
        raise DescribeError(f"{len(offered)} task(s) offer tool {tool.name!r} but none has arguments for it ({how})")
    # Smallest categories first: one that has fewer tasks than its share gives the rest to the others.
    cats = sorted(usable, key=lambda c: (len(usable[c]), c))
    quota, left = {}, n
    for i, cat in enumerate(cats):
        quota[cat] = min(len(usable[cat]), left // (len(cats) - i))
        left -= quota[cat]
    picked = []
    for cat in sorted(usable):
        pool = usable[cat]
        picked += random.Random(f"describe:{seed}:{cat}").sample(pool, quota[cat])
    return picked, skipped


# ---------------------------------------------------------------------------------------------- trials
def _is_right(task: Task, card: ToolCard, obs: Observation, env: Any) -> bool:
    if obs.error is not None:
        return False
    try:
        if task.score(obs.content, env) >= 1.0:
            return True
    except Exception as e:  # a broken checker is bad input, not a wrong answer
        raise DescribeError(f"task {task.id}: checker {task.checker!r} failed: {type(e).__name__}: {e}") from e
    if card.final or task.state is not None:
        return False
    return answer_in_text(task, obs.content)


def run_trials(tool: Tool, picked: Sequence[tuple[Task, dict[str, Any]]], seed: int = 0,
               timeout_s: float = DEFAULT_TIMEOUT_S, max_parallel: int = MAX_PARALLEL) -> list[Trial]:
    """Call `tool` once per (task, arguments), concurrently, and score each answer."""

    async def one(gate: asyncio.Semaphore, task: Task, args: dict[str, Any]) -> Trial:
        try:
            env = task.make_state()
        except Exception as e:
            raise DescribeError(f"task {task.id}: cannot make its episode state {task.state!r}: "
                                f"{type(e).__name__}: {e}") from e
        ctx = ToolContext(task_id=task.id, prompt=task.prompt, category=task.category, answer=task.answer,
                          state=env, seed=seed)
        async with gate:
            obs = await tool(args, ctx, timeout_s=timeout_s)
        shown = task.prompt if tool.card.input == "task" else json.dumps(args, ensure_ascii=False)
        return Trial(task_id=task.id, category=task.category, right=_is_right(task, tool.card, obs, env),
                     cost_usd=obs.cost_usd, latency_s=obs.latency_s, error=obs.error, input=shown,
                     output=obs.content)

    async def all_() -> list[Trial]:
        gate = asyncio.Semaphore(max_parallel)
        return list(await asyncio.gather(*(one(gate, t, a) for t, a in picked)))

    return run_sync(all_())


# ---------------------------------------------------------------------------------------------- text
def _describer_tool(describer: ToolCard | Tool | str | os.PathLike) -> Tool:
    if isinstance(describer, (str, os.PathLike)):
        describer = load_card(describer)
    if isinstance(describer, ToolCard):
        if describer.kind != "llm":
            raise DescribeError(f"describer {describer.name!r} is a {describer.kind} card; it must be an llm card")
        return build_tool(describer)
    if isinstance(describer, Tool) and describer.card.kind == "llm":
        return describer
    raise DescribeError(f"describer must be an llm ToolCard or its built Tool, got {describer!r}")


def ask_describer(tool: Tool, prompt: str) -> str:
    """The describer's answer to `prompt`, stripped and cut to MAX_DESCRIPTION_CHARS at a word boundary."""
    args = {} if tool.card.input == "task" else {tool.settings.argument: prompt}
    obs = tool.call_sync(args, ToolContext(task_id="describe", prompt=prompt), timeout_s=None)
    if obs.error is not None:
        raise DescriberError(f"describer {tool.name!r} failed: {obs.error}")
    text = obs.content.strip()
    if not text:
        raise DescriberError(f"describer {tool.name!r} answered with empty text")
    if len(text) > MAX_DESCRIPTION_CHARS:
        text = text[:MAX_DESCRIPTION_CHARS - 1].rsplit(None, 1)[0].rstrip() + "…"
    return text


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _base(card: ToolCard) -> str:
    """The tool's own text: what the card said before any generated description, unless the generated
    description was edited by hand since (then the edit is the tool's own text)."""
    prior = card.auto_description or {}
    if prior.get("base") and prior.get("digest") == _digest(card.description):
        return str(prior["base"])
    return card.description.strip()


# ---------------------------------------------------------------------------------------------- API
def _tasks(tasks: Sequence[Task] | str | os.PathLike, task_source: str) -> tuple[list[Task], str]:
    if isinstance(tasks, (str, os.PathLike)):
        return load_tasks(tasks), task_source or str(tasks)
    return list(tasks), task_source


def describe(card: ToolCard, tasks: Sequence[Task] | str | os.PathLike, n: int = 40,
             describer: ToolCard | Tool | str | os.PathLike | None = None, seed: int = 0,
             policy: Policy | None = None, task_source: str = "") -> DescribeResult:
    """Try `card`'s tool on `n` sampled tasks (a list, or a JSONL file as written by `save_tasks`) and
    return the card with a description written from what happened. Nothing is written to disk.
    `describer`: an llm card, its built Tool, or a card file; None for the offline template."""
    if not isinstance(card, ToolCard):
        raise DescribeError(f"card must be a ToolCard, got {type(card).__name__}")
    tasks, task_source = _tasks(tasks, task_source)
    talker = _describer_tool(describer) if describer is not None else None  # fail before running anything
    tool = build_tool(card)
    picked, skipped = pick_tasks(tool, tasks, n, seed, policy)
    trials = run_trials(tool, picked, seed)
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    stats = summarise(card.name, trials, skipped=skipped, date=today, task_source=task_source, seed=seed)
    base = _base(card)
    if talker is None:
        prompt, method = None, "template"
        text = f"{base}\n{template_text(stats)}"
    else:
        prompt, method = describer_prompt(card.name, base, card.describe_costs(), stats), f"describer {talker.name}"
        text = ask_describer(talker, prompt)
    prior = card.auto_description or {}
    history = [dict(h) for h in prior.get("history", [])] + [{"replaced": today, "description": card.description}]
    auto = block(stats, method=method, base=base, digest=_digest(text), history=history)
    # model_copy keeps where the card was read from, so save_card keeps its comments and key order.
    new = card.model_copy(update={"description": text, "auto_description": auto})
    return DescribeResult(card=new, stats=stats, description=text, previous=card.description, prompt=prompt)


def describe_file(card_path: str | os.PathLike, tasks: Sequence[Task] | str | os.PathLike, n: int = 40,
                  describer: ToolCard | Tool | str | os.PathLike | None = None, seed: int = 0,
                  policy: Policy | None = None, task_source: str = "") -> DescribeResult:
    """`describe` the card in `card_path` and write it back, atomically and only once everything has
    succeeded: any failure raises (CardError, DescribeError, TaskFileError) and leaves the file as it was."""
    path = Path(card_path)
    card = load_card(path)
    result = describe(card, tasks, n=n, describer=describer, seed=seed, policy=policy, task_source=task_source)
    save_card(result.card, path)
    return dataclasses.replace(result, path=path)

