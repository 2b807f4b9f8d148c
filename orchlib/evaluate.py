"""Evaluation: run a policy over tasks and report what it got right, what it spent, where its calls went.

A policy is anything that produces trajectories through `orchlib.rollout.rollout`: a trained
orchestrator (an Engine) or a fixed-routing baseline (`make_baselines`: always-strongest,
always-cheapest, random and the per-task oracle, from `orchlib.baselines`; also Engines), so both go
through the same loop and the same accounting of money (USD) and time (s).

Reported per task set, per category and per preference profile: accuracy (mean outcome), mean cost,
mean latency, calls per tool (mean per task and share of all calls), errors (by kind and by tool) and,
given a reward file, the mean reward. `preference_adherence` reruns the same tasks with only P changed.
The cost–accuracy summaries follow the routing literature:

- `frontier`: the Pareto-optimal (cost, accuracy) points.
- `pgr` / `apgr`: performance gap recovered, RouteLLM (Ong et al. 2024, arXiv 2406.18665, §4):
  PGR = (acc − acc_weak) / (acc_strong − acc_weak); APGR = the area under PGR against the share of calls
  sent to the strong model, computed as RouteLLM's `routellm/evals/evaluate.py` does (trapezoids over
  the operating points, normalised by the width of the call-share range they span).
- `aiq`: RouterBench (Hu et al. 2024, arXiv 2403.12031, §3): the area under the non-decreasing convex
  hull of accuracy against cost, divided by the cost range.

PGR and APGR measure a gap that exists only when the strong reference beats the weak one; where it
does not (the cheapest model is also the most accurate), they return `Undefined`: a NaN that says why
(`value.reason`), never ±inf. `evaluate` warns when episodes end on the token budget, or at
`max_new_tokens`, before any tool call: they are scored 0 at $0, which is the configuration's doing,
not the policy's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from orchlib.atomic import write_text_atomic
from orchlib.baselines import BASELINES, EVAL_ROLLOUT, collector_paused, make_baselines, try_routes
from orchlib.baselines import run_routes
from orchlib.chat import CALL_OPENING
from orchlib.env import Environment, RewardFunction, as_reward, bind_older
from orchlib.rollout import RolloutConfig, render_prompt, rollout, shown_preference, tool_schemas
from orchlib.tasks import Preference, Task, under_profiles
from orchlib.trajectory import Trajectory, to_json_line, write_jsonl

__all__ = ["EVAL_ROLLOUT", "EvalReport", "TrajectoryFigures", "evaluate", "summarize", "compute_metrics", "compare",
           "reward_across", "preference_adherence", "frontier", "pgr", "apgr", "aiq", "Undefined", "format_table",
           "BASELINES", "make_baselines", "try_routes", "choice_gap", "reference_runs", "anchored_reward",
           "under_profiles"]



# ---------------------------------------------------------------------------------------------- metrics
def summarize(trajectories: Sequence[Trajectory | TrajectoryFigures], rewards: Sequence[float] | None = None
              ) -> dict[str, Any]:
    """The numbers of one set of trajectories, or of their TrajectoryFigures (means are per trajectory)."""
    n = len(trajectories)
    if n == 0:
        return {"n": 0}
    calls: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    by_tool: Counter[str] = Counter()
    finish: Counter[str] = Counter()
    for t in trajectories:
        calls.update(t.calls)
        kinds.update(t.errors)
        finish[t.finish_reason or "unfinished"] += 1
        by_tool.update(_error_tools(t))
    total_calls = sum(calls.values())
    n_err = sum(kinds.values())
    out: dict[str, Any] = {
        "n": n,
        "accuracy": float(np.mean([t.outcome for t in trajectories])),
        "cost_usd": float(np.mean([t.cost_usd for t in trajectories])),
        "latency_s": float(np.mean([t.latency_s for t in trajectories])),
        "turns": float(np.mean([t.num_turns for t in trajectories])),
        "calls_per_task": total_calls / n,
        "calls": {tool: {"count": c, "mean": c / n, "share": c / total_calls} for tool, c in sorted(calls.items())},
        "errors": {"total": n_err, "per_task": n_err / n,
                   "tasks_with_errors": sum(1 for t in trajectories if t.errors) / n,
                   "by_kind": dict(sorted(kinds.items())), "by_tool": dict(sorted(by_tool.items()))},
        "finish": dict(sorted(finish.items())),
        "reward": None,
    }
    if rewards is not None:
        if len(rewards) != n:
            raise ValueError(f"{len(rewards)} rewards for {n} trajectories")
        out["reward"] = float(np.mean(rewards))
    return out


def _error_tools(t: Trajectory | TrajectoryFigures) -> tuple[str, ...]:
    """The tool of each error observation, in order ("(policy)": rejected before a tool was found)."""
    if isinstance(t, TrajectoryFigures):
        return t.error_tools
    return tuple(obs.tool or "(policy)" for turn in t.turns for obs in turn.observations if obs.error_kind)


def _profile(t: Trajectory | TrajectoryFigures) -> str:
    return str(t.preference.get("name") or "default")


@dataclass(frozen=True)
class TrajectoryFigures:
    """What the metrics read of one trajectory: all `evaluate` keeps of it when the trajectories are
    written to a file as they come (`trajectories_to`). `summarize` and `compute_metrics` take these
    or trajectories alike."""

    task_id: str
    category: str
    preference: dict[str, Any]
    outcome: float
    cost_usd: float
    latency_s: float
    num_turns: int
    calls: dict[str, int]
    errors: dict[str, int]
    finish_reason: str
    error_tools: tuple[str, ...]

    @classmethod
    def of(cls, t: Trajectory) -> TrajectoryFigures:
        return cls(t.task_id, t.category, t.preference, t.outcome, t.cost_usd, t.latency_s, t.num_turns,
                   t.calls, t.errors, t.finish_reason, _error_tools(t))


def compute_metrics(trajectories: Sequence[Trajectory | TrajectoryFigures], rewards: Sequence[float] | None = None
                    ) -> dict[str, Any]:
    """`summarize` overall, per category and per preference profile."""
    groups: dict[str, dict[str, list[int]]] = {"by_category": defaultdict(list), "by_profile": defaultdict(list)}
    for i, t in enumerate(trajectories):
        groups["by_category"][t.category or "general"].append(i)
        groups["by_profile"][_profile(t)].append(i)

    def part(idx: list[int]) -> dict[str, Any]:
        return summarize([trajectories[i] for i in idx], None if rewards is None else [rewards[i] for i in idx])

    out: dict[str, Any] = {"overall": summarize(trajectories, rewards)}
    for key, by in groups.items():
        out[key] = {name: part(idx) for name, idx in sorted(by.items())}
    return out


def _group_rewards(trajectories: Sequence[Trajectory], tasks: Sequence[Task], group_size: int, reward) -> list[float]:
    """The reward of every trajectory, computed per group (the G rollouts of one task) under its task's P."""
    out: list[float] = []
    for i, task in enumerate(tasks):
        group = list(trajectories[i * group_size:(i + 1) * group_size])
        values = np.asarray(reward(group, P=shown_preference(task)), dtype=float)
        if values.shape != (len(group),):
            raise ValueError(f"reward gave shape {values.shape} for a group of {len(group)} (task {task.id})")
        out += values.tolist()
    return out


# ---------------------------------------------------------------------------------------------- report
def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table: first column left-aligned, the others right-aligned."""
    cells = [[str(h) for h in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = []
    for j, row in enumerate(cells):
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _mix(calls: Mapping[str, Mapping[str, float]], top: int = 4) -> str:
    ranked = sorted(calls.items(), key=lambda kv: (-kv[1]["share"], kv[0]))
    text = " ".join(f"{name}:{v['share']:.0%}" for name, v in ranked[:top])
    return text + (" …" if len(ranked) > top else "") if text else "-"


def _row(label: str, s: Mapping[str, Any]) -> list[Any]:
    reward = "-" if s.get("reward") is None else f"{s['reward']:.3f}"
    return [label, s["n"], f"{s['accuracy']:.3f}", f"{s['cost_usd']:.5f}", f"{s['latency_s']:.2f}",
            f"{s['calls_per_task']:.2f}", s["errors"]["total"], reward, _mix(s["calls"])]


_HEADER = ["", "n", "accuracy", "cost $", "latency s", "calls/task", "errors", "reward", "tool mix (share of calls)"]


@dataclass
class EvalReport:
    """What `evaluate` returns: the metrics, the trajectories and (with a reward file) their rewards."""

    name: str
    metrics: dict[str, Any]
    trajectories: list[Trajectory] = field(repr=False)
    rewards: list[float] | None = field(default=None, repr=False)
    # Where the trajectories were written as they came (`evaluate(trajectories_to=...)`); `trajectories`
    # is then empty and `read_jsonl(trajectories_path)` reads them back.
    trajectories_path: Path | None = None

    def table(self) -> str:
        """Overall, per category and per profile, one row each."""
        m = self.metrics
        rows = [_row("overall", m["overall"])]
        rows += [_row(f"category {k}", v) for k, v in m["by_category"].items()]
        rows += [_row(f"profile {k}", v) for k, v in m["by_profile"].items()]
        return f"policy: {self.name}\n" + format_table(_HEADER, rows)

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "metrics": self.metrics}, indent=2, sort_keys=True)

    def save(self, folder: str | os.PathLike) -> Path:
        """metrics.json, table.txt and trajectories.jsonl in `folder`, each written atomically."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        write_text_atomic(folder / "metrics.json", self.to_json() + "\n")
        write_text_atomic(folder / "table.txt", self.table() + "\n")
        target = folder / "trajectories.jsonl"
        if self.trajectories_path is None:
            write_jsonl(self.trajectories, target)
        elif not (target.exists() and target.samefile(self.trajectories_path)):
            _copy_atomic(self.trajectories_path, target)
        return folder


def compare(reports: Mapping[str, EvalReport] | Sequence[EvalReport],
            extra: Mapping[str, Mapping[str, float]] | None = None) -> str:
    """One row per policy: the overall numbers, accuracy per category, then `extra` columns
    (column name → policy → value, e.g. `{"reward across": reward_across(...)}`)."""
    items = list(reports.items()) if isinstance(reports, Mapping) else [(r.name, r) for r in reports]
    cats = sorted({c for _, r in items for c in r.metrics["by_category"]})
    extra = dict(extra or {})
    keep = [i for i, h in enumerate(_HEADER)  # no reward column when no policy was given a reward
            if h != "reward" or any(r.metrics["overall"]["reward"] is not None for _, r in items)]
    header = ["policy", *[_HEADER[i] for i in keep[1:-1]], *[f"acc {c}" for c in cats], *extra, _HEADER[-1]]
    rows = []
    for name, r in items:
        full = _row(name, r.metrics["overall"])
        base = [full[i] for i in keep]
        per = [f"{r.metrics['by_category'][c]['accuracy']:.2f}" if c in r.metrics["by_category"] else "-"
               for c in cats]
        more = [f"{col[name]:.3f}" if name in col else "-" for col in extra.values()]
        rows.append(base[:-1] + per + more + base[-1:])
    return format_table(header, rows)


# ---------------------------------------------------------------------------------------------- evaluate
def evaluate(policy, env: Environment | Sequence[Task], *older, config: RolloutConfig | None = None,
             group_size: int = 1, name: str | None = None, seed: int | None = 0, tasks: Sequence[Task] | None = None,
             reward: RewardFunction | None = None, batch_size: int | None = None,
             trajectories_to: str | os.PathLike | None = None) -> EvalReport:
    """Run `policy` (an Engine: a trained orchestrator or a baseline) on every task of `env`'s test split
    (or `tasks`), `group_size` times, with the environment's toolbox, reward and prompt settings
    (`config`: EVAL_ROLLOUT unless given; `reward` replaces the environment's).

    The reward is any `RewardFunction` (an `orchlib.reward.Reward`, or any `fn(group, P=...) -> array`);
    rewards are computed per task group under the task's own P, so with `group_size=1` group-normalised
    terms are degenerate. Without a reward the report has no reward column.

    At scale: `batch_size` runs the tasks `batch_size` at a time (one rollout each; None: all at once),
    with automatic garbage collection paused while a batch runs (`orchlib.baselines.collector_paused`).
    A written policy (a baseline) gives the same trajectories either way; a sampling one draws per batch,
    so its samples depend on the batch size. `trajectories_to` writes the trajectories to that JSONL file
    batch by batch (it appears whole, or not at all) and keeps only what the metrics need of each
    (`TrajectoryFigures`): the report's `trajectories` is then empty and `trajectories_path` says where
    they are.

    `config`, `group_size`, `name` and `seed` may also follow `env` positionally. The older form
    `evaluate(policy, tasks, toolbox, reward, config, group_size, name, seed)` still works.
    """
    defaults = {"reward": None, "config": None, "group_size": 1, "name": None, "seed": 0}
    given = {"reward": reward, "config": config, "group_size": group_size, "name": name, "seed": seed}
    if isinstance(env, Environment):
        args = bind_older("evaluate(policy, env, ...)", ("config", "group_size", "name", "seed"), older, given,
                          defaults)
        if tasks is None and not env.test:
            raise ValueError(f"environment {env.name!r} has no test tasks: pass tasks= (e.g. env.train)")
        tasks = env.test if tasks is None else tasks
        toolbox, reward = env.tools, env.reward if args["reward"] is None else as_reward(args["reward"])
        config = env.rollout_config(args["config"] or EVAL_ROLLOUT)
    else:
        if tasks is not None:
            raise TypeError("tasks= goes with an Environment: evaluate(policy, env, tasks=...); the older form "
                            "takes the tasks second: evaluate(policy, tasks, toolbox, ...)")
        if not older:
            raise TypeError("evaluate takes a policy and an Environment, evaluate(policy, env, ...), or the older "
                            "evaluate(policy, tasks, toolbox, ...)")
        args = bind_older("evaluate(policy, tasks, toolbox, ...)",
                          ("toolbox", "reward", "config", "group_size", "name", "seed"), older, given, defaults)
        tasks, toolbox, reward, config = env, args["toolbox"], args["reward"], args["config"]
    group_size, name, seed = args["group_size"], args["name"], args["seed"]
    tasks = list(tasks)
    config = config or EVAL_ROLLOUT
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    label = name or getattr(policy, "name", None) or type(policy).__name__
    step = batch_size or max(len(tasks), 1)
    kept: list[Trajectory | TrajectoryFigures] = []
    rewards: list[float] | None = [] if reward is not None else None
    paused = collector_paused if batch_size is not None else contextlib.nullcontext
    cut_short: Counter[str] = Counter()
    with _JsonlSink(trajectories_to) as sink:
        for start in range(0, len(tasks), step):
            batch = tasks[start:start + step]
            with paused():
                trajectories = rollout(batch, toolbox, policy, config, group_size=group_size, seed=seed)
                if rewards is not None:
                    rewards += _group_rewards(trajectories, batch, group_size, reward)
                cut_short.update(_cut_before_any_call(trajectories))
                if sink is None:
                    kept += trajectories
                else:
                    sink.write(trajectories)
                    kept += [TrajectoryFigures.of(t) for t in trajectories]
                del trajectories
    _warn_cut_short(cut_short, len(kept), label, config)
    metrics = compute_metrics(kept, rewards)
    if trajectories_to is None:
        return EvalReport(label, metrics, kept, rewards)  # type: ignore[arg-type]  (trajectories, all)
    return EvalReport(label, metrics, [], rewards, trajectories_path=Path(trajectories_to))


def _cut_before_any_call(trajectories: Sequence[Trajectory]) -> Counter[str]:
    """Episodes that ended on a limit (the token budget, or max_new_tokens mid-turn) without one tool call."""
    return Counter(t.finish_reason for t in trajectories
                   if t.finish_reason in ("token_budget", "length") and not any(t.calls.values()))


def _warn_cut_short(counts: Counter[str], total: int, label: str, config: RolloutConfig) -> None:
    """Say so when episodes were scored 0 at $0 because the rollout's limits left no room to call a tool."""
    if counts["token_budget"]:
        warnings.warn(f"{label}: {counts['token_budget']} of {total} episodes ended on the token budget before any "
                      f"tool call (scored 0 at $0): the prompt leaves no room within max_total_tokens="
                      f"{config.max_total_tokens}; raise it, or shorten the prompt (fewer or shorter tool "
                      "schemas)", stacklevel=3)
    if counts["length"]:
        warnings.warn(f"{label}: {counts['length']} of {total} episodes were cut at max_new_tokens="
                      f"{config.max_new_tokens} before any tool call (scored 0 at $0): a call with several "
                      "arguments may need more tokens than that", stacklevel=3)


def _copy_atomic(source: Path, target: Path) -> None:
    """Copy `source` to a temporary file beside `target`, then rename it over `target`."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        shutil.copyfile(source, tmp)
        os.replace(tmp, target)
    except BaseException:  # remove the partial copy; the error reaches the caller unchanged
        Path(tmp).unlink(missing_ok=True)
        raise


class _JsonlSink:
    """Trajectories appended to a temporary file beside `path`, renamed over it on success and removed
    on failure, so a reader never sees half a run. `None`: no file (the context gives None)."""

    def __init__(self, path: str | os.PathLike | None):
        self.path = None if path is None else Path(path)

    def __enter__(self) -> _JsonlSink | None:
        if self.path is None:
            return None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        self.tmp = Path(tmp)
        self.file = os.fdopen(fd, "w", encoding="utf-8")
        return self

    def write(self, trajectories: Sequence[Trajectory]) -> None:
        self.file.write("".join(to_json_line(t) + "\n" for t in trajectories))

    def __exit__(self, kind, error, tb) -> None:
        if self.path is None:
            return
        self.file.close()
        if kind is None:
            os.replace(self.tmp, self.path)
        else:  # remove the partial file; the error reaches the caller unchanged
            self.tmp.unlink(missing_ok=True)


def reward_across(reports: Mapping[str, EvalReport], reward) -> dict[str, float]:
    """Mean reward of each policy when every task's group is *the policies' trajectories of that task*.

    A group-normalised reward (ToolOrchestra's min-max over rollouts) is 0 for a group of one, so a
    single deterministic run per task cannot be scored alone; grouped across policies, a policy earns
    more where it was right more cheaply, faster, or with the tools P favours, than the others.
    The reports must cover the same tasks in the same order, one trajectory per task."""
    names = list(reports)
    streamed = [n for n in names if reports[n].trajectories_path is not None and not reports[n].trajectories]
    if streamed:
        raise ValueError(f"reward_across needs the trajectories in memory; {streamed[0]!r} wrote them to "
                         f"{reports[streamed[0]].trajectories_path} (read them back with read_jsonl)")
    runs = [reports[n].trajectories for n in names]
    ids = [t.task_id for t in runs[0]]
    if any([t.task_id for t in r] != ids for r in runs[1:]):
        raise ValueError("reward_across needs reports over the same tasks in the same order, one run each")
    totals = np.zeros(len(names))
    for i in range(len(ids)):
        group = [r[i] for r in runs]
        P = Preference.model_validate(group[0].preference) if group[0].preference else None
        totals += np.asarray(reward(group, P=P), dtype=float)
    return {n: float(v / max(len(ids), 1)) for n, v in zip(names, totals)}


def preference_adherence(engine, tasks: Sequence[Task], toolbox, profiles: Sequence[str | Preference] =
                         ("accuracy", "thrifty"), config: RolloutConfig | None = None, reward=None,
                         group_size: int = 1, seed: int | None = 0) -> dict[str, Any]:
    """The same tasks under each preference profile, nothing else changed: accuracy, cost, latency and
    tool mix per profile, and their differences from the first profile. `tool_mix_tv` is the total
    variation distance between call shares (0: the policy ignores P; 1: disjoint tool choices).
    A profile name is filled per task by `orchlib.envs.mini.preference_for` ("local-only" puts −1 on
    the task's paid model tools)."""
    from orchlib.envs.mini import preference_for

    cards = _cards(toolbox)
    out: dict[str, Any] = {"profiles": {}, "delta": {}, "reports": {}}
    for prof in profiles:
        pname = prof if isinstance(prof, str) else prof.name
        varied = [t.model_copy(update={"preference": preference_for(prof, t.tools or [c.name for c in cards], cards)
                                       if isinstance(prof, str) else prof}) for t in tasks]
        rep = evaluate(engine, varied, toolbox, reward=reward, config=config, group_size=group_size,
                       name=f"{getattr(engine, 'name', 'policy')}@{pname}", seed=seed)
        s = rep.metrics["overall"]
        out["reports"][pname] = rep
        out["profiles"][pname] = {"accuracy": s["accuracy"], "cost_usd": s["cost_usd"], "latency_s": s["latency_s"],
                                  "reward": s["reward"], "tool_share": {k: v["share"] for k, v in s["calls"].items()}}
    names = list(out["profiles"])
    base = out["profiles"][names[0]]
    for other in names[1:]:
        o = out["profiles"][other]
        tools = sorted(set(base["tool_share"]) | set(o["tool_share"]))
        shift = {k: o["tool_share"].get(k, 0.0) - base["tool_share"].get(k, 0.0) for k in tools}
        out["delta"][f"{other}-{names[0]}"] = {
            "accuracy": o["accuracy"] - base["accuracy"], "cost_usd": o["cost_usd"] - base["cost_usd"],
            "latency_s": o["latency_s"] - base["latency_s"], "tool_share": shift,
            "tool_mix_tv": 0.5 * sum(abs(v) for v in shift.values())}
    return out


def _cards(toolbox) -> list:
    cards = getattr(toolbox, "cards", None)
    if cards is None:
        raise TypeError("preference profiles by name need a toolbox with `.cards`")
    return list(cards.values()) if isinstance(cards, Mapping) else list(cards)


# ---------------------------------------------------------------------------------------------- frontier
def _pairs(points: Mapping[Any, Sequence[float]] | Sequence[Sequence[float]]) -> list[tuple[Any, float, float]]:
    items = points.items() if isinstance(points, Mapping) else enumerate(points)
    out = [(k, float(p[0]), float(p[1])) for k, p in items]
    if not out:
        raise ValueError("no points")
    return out


def frontier(points: Mapping[Any, Sequence[float]] | Sequence[Sequence[float]]) -> list[Any]:
    """Keys (names, or indices for a list) of the Pareto-optimal (cost, accuracy) points, by cost: no
    other point is at most as dear and at least as accurate, and strictly better in one of the two."""
    pts = _pairs(points)
    keep = [(c, -a, k) for k, c, a in pts
            if not any(c2 <= c and a2 >= a and (c2 < c or a2 > a) for _, c2, a2 in pts)]
    return [k for _, _, k in sorted(keep, key=lambda x: (x[0], x[1]))]


class Undefined(float):
    """A metric that has no value here: NaN (so sums, tables and plots treat it as missing) that says
    why in `reason` and in its repr."""

    reason: str

    def __new__(cls, reason: str) -> Undefined:
        value = super().__new__(cls, "nan")
        value.reason = reason
        return value

    def __repr__(self) -> str:
        return f"undefined here, because {self.reason}"

    __str__ = __repr__


def _no_gap(acc_weak: float, acc_strong: float) -> Undefined | None:
    if acc_strong > acc_weak:
        return None
    return Undefined(f"the strong reference ({acc_strong:g}) is no more accurate than the weak one ({acc_weak:g}): "
                     "there is no gap to recover (the cheapest model is also the best)")


def pgr(acc: float, acc_weak: float, acc_strong: float) -> float:
    """Performance gap recovered (RouteLLM): (acc − weak) / (strong − weak); 0 = weak, 1 = strong.
    `Undefined` (a NaN that says why) when the strong reference is no more accurate than the weak."""
    undefined = _no_gap(acc_weak, acc_strong)
    if undefined is not None:
        return undefined
    return (acc - acc_weak) / (acc_strong - acc_weak)


def apgr(points: Sequence[Sequence[float]], acc_weak: float, acc_strong: float) -> float:
    """Average performance gap recovered (RouteLLM, arXiv 2406.18665 §4; `routellm/evals/evaluate.py`).

    `points` are a router's operating points (share of calls to the strong model in [0, 1], accuracy),
    e.g. one per cost threshold or per preference P. With x sorted, APGR = (AUC − AUC_weak) /
    (AUC_strong − AUC_weak), each AUC the trapezoid area over the points' x range — the mean PGR over
    that range. Over points from 0 % to 100 % strong calls this is RouteLLM's ∫₀¹ PGR d(strong share).
    A single operating point gives its PGR. `Undefined` (a NaN that says why, never ±inf) when the
    strong reference is no more accurate than the weak."""
    pts = sorted((float(x), float(y)) for x, y in points)
    if not pts:
        raise ValueError("no points")
    if any(not 0.0 <= x <= 1.0 for x, _ in pts):
        raise ValueError("the share of strong-model calls must lie in [0, 1]")
    undefined = _no_gap(acc_weak, acc_strong)
    if undefined is not None:
        return undefined
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    width = xs[-1] - xs[0]
    if width == 0:
        return pgr(sum(ys) / len(ys), acc_weak, acc_strong)
    auc = sum((xs[i + 1] - xs[i]) * (ys[i + 1] + ys[i]) / 2 for i in range(len(xs) - 1))
    return (auc - acc_weak * width) / ((acc_strong - acc_weak) * width)


def _upper_hull(pts: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Upper concave hull of points sorted by x (one point per x: the most accurate)."""
    hull: list[tuple[float, float]] = []
    for p in pts:
        while len(hull) >= 2:
            (ox, oy), (ax, ay) = hull[-2], hull[-1]
            if (ax - ox) * (p[1] - oy) - (ay - oy) * (p[0] - ox) >= 0:  # not a right turn: hull[-1] lies under
                hull.pop()
            else:
                break
        hull.append(p)
    return hull


def aiq(points: Mapping[Any, Sequence[float]] | Sequence[Sequence[float]],
        cost_range: tuple[float, float] | None = None) -> float:
    """Average improvement in quality (RouterBench, arXiv 2403.12031 §3.2).

    Points are (cost, accuracy) operating points of one router (e.g. its runs under several P). Any mix
    of two operating points is reachable (route a share of tasks each way), so the attainable curve is
    the upper convex hull; spending more never has to hurt, so the hull is made non-decreasing (flat
    after its most accurate point). AIQ = ∫ hull(c) dc over [c_min, c_max] / (c_max − c_min), with the
    points' own cost range unless `cost_range` is given (to compare routers on one range; beyond the
    dearest point the curve stays flat). A zero-width range gives the best accuracy at that cost.
    """
    best: dict[float, float] = {}
    for _, c, a in _pairs(points):
        best[c] = max(a, best.get(c, -np.inf))
    pts = sorted(best.items())
    lo, hi = cost_range if cost_range is not None else (pts[0][0], pts[-1][0])
    if lo < pts[0][0] or hi < lo:
        raise ValueError(f"cost range ({lo}, {hi}) must start at or above the cheapest point ({pts[0][0]})")
    hull = _upper_hull(pts)
    peak = int(np.argmax([a for _, a in hull]))
    hull = hull[:peak + 1]  # concave, so rising up to the peak; after it the curve stays flat
    xs = np.array([c for c, _ in hull] + [max(hi, hull[-1][0])])
    ys = np.array([a for _, a in hull] + [hull[-1][1]])
    if hi == lo:
        return float(np.interp(lo, xs, ys))
    grid = np.unique(np.concatenate([[lo, hi], xs[(xs > lo) & (xs < hi)]]))
    vals = np.interp(grid, xs, ys)
    return float(np.sum((grid[1:] - grid[:-1]) * (vals[1:] + vals[:-1]) / 2) / (hi - lo))


# ---------------------------------------------------------------------------------------------- probes


def choice_gap(model, tokenizer, tasks: Sequence[Task], toolbox, config: RolloutConfig, tool: str,
               profiles: tuple[str | Preference, str | Preference]) -> float:
    """How far P moves the choice, exactly: the mean over `tasks` offering `tool` of
    p(first call names `tool` | profiles[0]) - p(same | profiles[1]), in percentage points, each
    probability from one forward pass over the prompt and the call's opening (no sampling noise).
    0 means the policy is blind to P at the moment it chooses. A local (transformers) policy only."""
    import torch  # only this probe needs the weights themselves

    # where the weights are: on a GPU machine, training left the model there
    gaps, device = [], next((p.device for p in model.parameters()), torch.device("cpu"))
    for task in (t for t in tasks if t.tools is None or tool in t.tools):
        p = []
        for shown in under_profiles([task], profiles):
            head = render_prompt(shown, tool_schemas(toolbox, shown, config.tool_schema), tokenizer, config)
            head += CALL_OPENING
            ids = tokenizer.encode(head + tool, add_special_tokens=False)
            n = len(tokenizer.encode(head, add_special_tokens=False))
            with torch.no_grad():
                logp = torch.log_softmax(model(torch.tensor([ids], device=device)).logits[0].float(), -1)
            p.append(float(sum(logp[i - 1, ids[i]] for i in range(n, len(ids))).exp()))
        gaps.append(p[0] - p[1])
    return 100 * sum(gaps) / len(gaps) if gaps else float("nan")


def reference_runs(tasks: Sequence[Task], toolbox, tokenizer, config) -> dict[str, list[Trajectory]]:
    """task id -> one fixed-routing run of each of its routes (`orchlib.baselines.run_routes`, no policy
    involved), under the task's own P: the anchors of `anchored_reward`."""
    return {tid: list(by_label.values()) for tid, by_label in run_routes(tasks, toolbox, tokenizer, config).items()}


def anchored_reward(groups: Sequence[Sequence[Trajectory]], references: Mapping[str, list[Trajectory]],
                    reward, key=lambda t: t.task_id) -> float:
    """A training curve that can rise: the mean reward of the groups' rollouts, each group scored together
    with its task's reference runs (found by `key(first rollout)`) under the P the rollouts were shown.

    A group-normalised reward (ToolOrchestra's min-max within a group) scores a group whose rollouts
    agree 0 whatever they chose, so the in-group reward falls as a policy settles even when it
    improves; the references fix each term's range, so this number moves only with what the policy did."""
    values: list[float] = []
    for group in groups:
        group = list(group)
        P = Preference.model_validate(group[0].preference)
        scored = np.asarray(reward(group + list(references[key(group[0])]), P=P), dtype=float)
        values += scored[:len(group)].tolist()
    return float(np.mean(values)) if values else float("nan")
