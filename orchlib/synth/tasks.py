"""Stage 4: user tasks with golden actions, kept only when the environment checks them.

Each task the LLM writes is replayed through the kept tools on a fresh copy of the seed database and
refused, counted by reason, when:

- `malformed`: a missing or mistyped field, or a golden call to a tool that is not kept;
- `golden_fails`: a golden call raises (an unknown id, bad arguments, the tool's own check);
- `breaks_schema`: the database after the golden calls no longer satisfies the schema;
- `no_state_change`: a path the task says its golden calls change (`changes`, e.g. "books.B1.copies")
  is the same after them;  `undeclared_change`: a task that declares no change changes the database;
- `unsupported_output`: a required output is found neither in the final database nor in what the golden
  calls returned (which read that database) — `mentions`, whole tokens, as the checker will look;
- `duplicate_text`: its prompt and instructions have token Jaccard ≥ `jaccard` with a kept task;
- `duplicate_actions`: the same golden calls (names and arguments) as a kept task.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from tqdm.auto import tqdm

from orchlib.envs.db import DBDomain, canonical_json
from orchlib.synth.config import SynthConfig
from orchlib.synth.dedup import action_key, jaccard, tokens
from orchlib.synth.domain import SYSTEM, schema_errors
from orchlib.synth.llm import StageLLM, SynthError
from orchlib.synth.report import StageCount, SynthReport
from orchlib.synth.tools import Tools
from orchlib.tasks import Golden, Task, UserSpec, mentions
from orchlib.tools import ToolContext, run_sync
from orchlib.trajectory import ToolCall

__all__ = ["tasks_stage", "Refused", "DIFFICULTIES"]

DIFFICULTIES = ("easy", "medium", "hard")

PROMPT = """STAGE: tasks
Domain outline: {outline}
Seed database: {records}
Tools: {cards}
Write {n} tasks as JSON: {{"tasks": [{{"instructions": who the user is and what they want (for a simulated \
user), "prompt": the user's first message, holding every id and detail the agent needs, "golden": the \
calls that solve it, in order, [{{"name": tool, "arguments": {{...}}}}], "changes": the dotted paths into \
the database the golden calls change (e.g. "books.B1.copies"; [] for a look-up), "required": the facts \
the agent must tell the user, as they appear in the database or the tools' results, "answer": the \
agent's final reply, "difficulty": "easy", "medium" or "hard"}}]}}. Vary the tasks: no two alike."""


class Refused(Exception):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def _lookup(state: Any, path: str) -> Any:
    """The value at a dotted path, or a sentinel when the path is not there."""
    for part in path.split("."):
        if isinstance(state, dict) and part in state:
            state = state[part]
        elif isinstance(state, list) and part.isdigit() and int(part) < len(state):
            state = state[int(part)]
        else:
            return _MISSING
    return state


_MISSING = object()


def _leaves(state: Any) -> list[str]:
    if isinstance(state, dict):
        return [s for k, v in state.items() for s in [str(k), *_leaves(v)]]
    if isinstance(state, list):
        return [s for v in state for s in _leaves(v)]
    return [str(state)]


def _parse(entry: Any, i: int, tool_names: set[str]) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise Refused("malformed", f"task {i}: not an object")
    for field, kind in (("prompt", str), ("instructions", str), ("golden", list), ("changes", list),
                        ("required", list), ("answer", str), ("difficulty", str)):
        if not isinstance(entry.get(field), kind):
            raise Refused("malformed", f"task {i}: {field}: expected a {kind.__name__}")
    if entry["difficulty"] not in DIFFICULTIES:
        raise Refused("malformed", f"task {i}: difficulty: {entry['difficulty']!r} is not one of {DIFFICULTIES}")
    try:
        calls = [ToolCall(name=c["name"], arguments=c.get("arguments", {})) for c in entry["golden"]]
    except (TypeError, KeyError, ValueError) as e:
        raise Refused("malformed", f"task {i}: golden: each call needs a name and arguments "
                                   f"({type(e).__name__})") from None
    unknown = [c.name for c in calls if c.name not in tool_names]
    if unknown:
        raise Refused("malformed", f"task {i}: golden: {unknown[0]!r} is not a kept tool")
    if not calls:
        raise Refused("malformed", f"task {i}: golden: no calls")
    return {**entry, "calls": calls}


def _replay(domain: DBDomain, task: Task) -> tuple[Any, list[str]]:
    """The database after the golden calls and what each returned; Refused('golden_fails') on an error."""
    env = domain.make_state(task)
    ctx = ToolContext(task_id=task.id, prompt=task.prompt, category=task.category, state=env)
    results: list[str] = []

    async def in_order() -> None:
        for i, call in enumerate(task.golden.calls):
            obs = await domain.toolbox.call(call, ctx, timeout_s=10.0)
            if obs.error:
                raise Refused("golden_fails", f"task {task.id}: call {i} {call.name} failed: {obs.content}")
            results.append(str(obs.content))

    run_sync(in_order())
    return env, results


def _check(domain: DBDomain, task: Task, spec: dict[str, Any], schema: dict[str, Any], initial: Any) -> None:
    final, results = _replay(domain, task)
    errors = schema_errors(schema, final)
    if errors:
        raise Refused("breaks_schema", f"task {task.id}: after the golden calls {errors[0]}")
    if spec["changes"]:
        same = [p for p in spec["changes"] if _lookup(final, str(p)) == _lookup(initial, str(p))]
        if same:
            raise Refused("no_state_change", f"task {task.id}: the golden calls leave {same[0]} as it was")
    elif canonical_json(final) != canonical_json(initial):
        raise Refused("undeclared_change",
                      f"task {task.id}: declares no change but its golden calls change the database")
    support = "\n".join(_leaves(final) + results)
    missing = [str(f) for f in spec["required"] if not mentions(support, str(f))]
    if missing:
        raise Refused("unsupported_output", f"task {task.id}: required {missing[0]!r} is in neither the final "
                                            "database nor the golden results")


def _task(spec: dict[str, Any], name: str, package: str, tool_names: list[str], config: SynthConfig) -> Task:
    digest = hashlib.sha256((spec["prompt"] + "\n" + spec["instructions"]).encode()).hexdigest()[:8]
    user = (UserSpec(kind="simulated", instructions=spec["instructions"], base_url=config.llm.base_url,
                     model=config.llm.model) if config.simulated_user else None)
    return Task(id=f"{name}-{digest}", prompt=spec["prompt"], category=name, tools=tool_names,
                checker=f"{package}.domain:DOMAIN.check", state=f"{package}.domain:DOMAIN.make_state", user=user,
                answer=spec["answer"], golden=Golden(calls=spec["calls"], answer=spec["answer"]),
                meta={"required": [str(f) for f in spec["required"]], "changes": [str(p) for p in spec["changes"]],
                      "difficulty": spec["difficulty"], "user_instructions": spec["instructions"]})


def tasks_stage(llm: StageLLM, config: SynthConfig, outline: dict[str, Any], schema: dict[str, Any],
                records: dict[str, Any], tools: Tools, package: str, report: SynthReport,
                progress: bool = True) -> list[Task]:
    name = str(outline["name"])
    domain = DBDomain(name, lambda task: records, tools.functions, write_tools=tools.writes)
    cards = [c.model_dump(mode="json", include={"name", "description", "parameters"}) for c in domain.cards()]
    reply = llm.ask("tasks", SYSTEM, PROMPT.format(outline=json.dumps(outline, sort_keys=True), n=config.n_tasks,
                                                   records=json.dumps(records, sort_keys=True),
                                                   cards=json.dumps(cards, sort_keys=True)))
    entries = reply.get("tasks") if isinstance(reply, dict) else None
    if not isinstance(entries, list):
        raise SynthError('stage tasks: the reply must be an object with a "tasks" list')
    count: StageCount = report.stage("tasks")
    initial = copy.deepcopy(records)
    kept: list[Task] = []
    texts: list[frozenset[str]] = []
    actions: set[str] = set()
    for i, entry in enumerate(tqdm(entries, desc="tasks", unit="task", disable=not progress)):
        try:
            spec = _parse(entry, i, set(tools.names))
            task = _task(spec, name, package, tools.names, config)
            _check(domain, task, spec, schema, initial)
            words, key = tokens(spec["prompt"] + " " + spec["instructions"]), action_key(spec["calls"])
            close = next((kept[j].id for j, t in enumerate(texts) if jaccard(words, t) >= config.jaccard), None)
            if close:
                raise Refused("duplicate_text", f"task {task.id}: near-duplicate text of {close}")
            if key in actions:
                raise Refused("duplicate_actions", f"task {task.id}: the same golden calls as a kept task")
            if any(t.id == task.id for t in kept):
                raise Refused("duplicate_text", f"task {task.id}: the same prompt and instructions as a kept task")
        except Refused as e:
            count.refuse(e.reason, str(e))
            continue
        kept.append(task)
        texts.append(words)
        actions.add(key)
    count.kept = len(kept)
    return kept
