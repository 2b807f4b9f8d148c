"""A training run's evaluation: the policy before and after RL against the baselines, on held-out tasks.

    reports = {"before RL": evaluate(...), "after RL": evaluate(...), **baseline_reports(...)}
    summary = run_summary(reports, reward, tool="generalist")

`choice_cosine` is how much of an update to the choice between two tools moves it under both profiles
alike (1 − cos is the part that can make the choice follow P), measured before and after RL.

`run_summary` gives, per policy, accuracy, $, s and the tool mix per category and per profile; the
reward of each policy per profile when a task's group is every policy's run of it (`reward_across`:
a group-normalised reward needs a group); for a policy run on tool configurations, where its calls went
by backend, by list position and by shown price (`orchlib.evaluate.heldout_summary`), over all episodes
and per set of offered backends (`held_out_by_offer`); and the controllability per
category — how far P moves the choice: 100 × (share of calls to `tool` under "accuracy" − under "thrifty").
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping, Sequence

from pydantic import ConfigDict, Field

from orchlib.baselines import BASELINES
from orchlib.settings import Settings

__all__ = ["RunEvaluation", "choice_cosine", "numbers", "well_formed", "tool_share", "controllability",
           "controllability_by_category", "baseline_reports", "run_summary"]


class RunEvaluation(Settings):
    """How `orchlib train` evaluates a run (before RL, after it, and the baselines) on the test split."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    baselines: tuple[str, ...] = Field(BASELINES, description="orchlib.baselines names; strongest and cheapest "
                                       "are ranked on the train split, as a router would be")
    samples: int = Field(1, ge=1, description="sampled runs of the policy per test task")
    tool: str | None = Field(None, description="the dear tool whose share per profile is the controllability "
                                               "(None: no controllability)")
    high: str = Field("accuracy", description="the profile that should call `tool` more")
    low: str = Field("thrifty", description="the profile that should call it less")
    cosine: tuple[str, str] | None = Field(None, description="two backends: the profile gradient cosine of the "
                                           "choice between them (`orchlib.evaluate.gradients`), under `high` and "
                                           "`low`, after the warm start and after RL (None: not measured)")
    cosine_tasks: int = Field(8, ge=1, description="test questions the cosine is averaged over (the first that "
                                                   "offer both backends)")
    rotations: bool = Field(False, description="run every test task once under each rotation of its drawn tool "
                            "list (`orchlib.evaluate.rotations`), the policies and the baselines alike: each offered "
                            "tool is listed first equally often, so the first-listed share measures the order's "
                            "pull and not where the draw put the tools a policy prefers (k runs a task for k tools)")


def well_formed(trajs: Sequence[Any]) -> float:
    """Share of episodes whose first turn makes a call, and every call of it parses, names an offered
    tool and fits its schema."""
    bad = ("malformed_call", "unknown_tool", "schema_violation")
    ok = [bool(t.turns) and bool(t.turns[0].calls) and not any(o.error_kind in bad for o in t.turns[0].observations)
          for t in trajs]
    return sum(ok) / max(len(ok), 1)


def tool_share(trajs: Sequence[Any], tool: str) -> float:
    """Share of all tool calls that went to `tool` (0 when there are none)."""
    total = sum(sum(t.calls.values()) for t in trajs)
    return sum(t.calls.get(tool, 0) for t in trajs) / total if total else 0.0


def _profile(t: Any) -> str:
    return str((t.preference or {}).get("name", ""))


def controllability(trajs: Sequence[Any], tool: str, high: str = "accuracy", low: str = "thrifty") -> float:
    """100 × (share of calls to `tool` under profile `high` − under `low`), in points."""
    return 100 * (tool_share([t for t in trajs if _profile(t) == high], tool)
                  - tool_share([t for t in trajs if _profile(t) == low], tool))


def controllability_by_category(trajs: Sequence[Any], tool: str, high: str = "accuracy",
                                low: str = "thrifty") -> dict[str, float]:
    """`controllability` per task category (the gap can sit in one category alone)."""
    return {c: controllability([t for t in trajs if t.category == c], tool, high, low)
            for c in sorted({t.category for t in trajs})}


def choice_cosine(model, tokenizer, env, config, settings: RunEvaluation) -> dict[str, float]:
    """The profile gradient cosine of the choice between `settings.cosine`'s two backends, on the first
    `settings.cosine_tasks` questions of `env.test` (one copy each: the probe shows it under `high` and
    `low` itself) that offer both, each under its first episode's configuration: mean, min, 1 − mean and
    the number of questions."""
    from orchlib.evaluate.gradients import configured_profile_cosine

    assert settings.cosine is not None
    seen: set[str] = set()
    firsts = []
    for t in env.test:  # a test split holds a question once per profile: its first copy stands for it
        key = t.id.rsplit("@", 1)[0]
        if key not in seen and (t.tools is None or set(settings.cosine) <= set(t.tools)):
            seen.add(key)
            firsts.append(t)
    firsts = firsts[:settings.cosine_tasks]
    cos = configured_profile_cosine(model, tokenizer, env, firsts, config, settings.cosine,
                                    (settings.high, settings.low))
    cos = [c for c in cos if c == c]  # NaN: a question where the choice has no gradient
    if not cos:
        return {"n": 0.0, "mean": float("nan"), "min": float("nan"), "one_minus_mean": float("nan")}
    mean = sum(cos) / len(cos)
    return {"n": float(len(cos)), "mean": mean, "min": min(cos), "one_minus_mean": 1 - mean}


def baseline_reports(tasks, toolbox, tokenizer, reward, config, names: Sequence[str] = BASELINES,
                     calibration=None, seed: int = 0) -> dict[str, Any]:
    """`evaluate` of each baseline on `tasks` (strongest and cheapest ranked on `calibration`)."""
    from orchlib.baselines import make_baselines
    from orchlib.env import Environment
    from orchlib.evaluate import evaluate

    engines = make_baselines(tasks, toolbox, tokenizer, names, calibration=calibration, config=config, seed=seed)
    env = Environment(name="baselines", test=tasks, tools=toolbox, reward=reward)
    return {n: evaluate(e, env, config=config, name=n, seed=seed) for n, e in engines.items()}


def numbers(trajs: Sequence[Any]) -> dict[str, Any]:
    """n, mean accuracy, $, s and calls per episode of each tool, over `trajs`."""
    n = max(len(trajs), 1)
    calls: dict[str, float] = defaultdict(float)
    for t in trajs:
        for k, v in t.calls.items():
            calls[k] += v / n
    return {"n": len(trajs), "accuracy": sum(t.outcome for t in trajs) / n,
            "cost_usd": sum(t.cost_usd for t in trajs) / n, "latency_s": sum(t.latency_s for t in trajs) / n,
            "calls": dict(sorted(calls.items()))}


def run_summary(reports: Mapping[str, Any], reward, settings: RunEvaluation = RunEvaluation()) -> dict[str, Any]:
    """Per policy: overall, per category and per profile numbers, the reward across policies per
    profile, and (with `settings.tool`) the controllability per category. The reports must hold one run
    per task of the same tasks (use the first sample of a sampled policy)."""
    from orchlib.evaluate import heldout_summary, reward_across
    from orchlib.evaluate.heldout import offer_key

    runs = {name: list(r.trajectories) for name, r in reports.items()}
    first = {name: _first_runs(trajs) for name, trajs in runs.items()}
    out: dict[str, Any] = {"policies": {}, "reward_across": {},
                           "well_formed": {name: well_formed(trajs) for name, trajs in runs.items()}}
    for name, trajs in runs.items():
        cats = sorted({t.category for t in trajs})
        profiles = sorted({_profile(t) for t in trajs})
        out["policies"][name] = {
            "all": numbers(trajs),
            "by_category": {c: numbers([t for t in trajs if t.category == c]) for c in cats},
            "by_profile": {p: numbers([t for t in trajs if _profile(t) == p]) for p in profiles},
        }
        if settings.tool:
            out["policies"][name]["controllability"] = controllability_by_category(
                trajs, settings.tool, settings.high, settings.low)
    for name, trajs in runs.items():  # on tool configurations: where the calls went by backend and list position
        if trajs and all(getattr(t, "configuration", None) is not None for t in trajs):
            out.setdefault("held_out", {})[name] = {p: r.model_dump() for p, r in heldout_summary(trajs).items()}
            by_offer: dict[str, list[Any]] = defaultdict(list)
            for t in trajs:  # one pass: each episode's key once
                by_offer[offer_key(t)].append(t)
            out.setdefault("held_out_by_offer", {})[name] = {
                k: {p: r.model_dump() for p, r in heldout_summary(ts).items()} for k, ts in sorted(by_offer.items())}
    for profile in sorted({_profile(t) for trajs in first.values() for t in trajs}):
        per = {n: _Runs([t for t in trajs if _profile(t) == profile]) for n, trajs in first.items()}
        for n, v in reward_across(per, reward).items():
            out["reward_across"].setdefault(n, {})[profile] = v
    return out


def _first_runs(trajs: Sequence[Any]) -> list[Any]:
    """One run per task (the first sample), in task order."""
    seen: set[str] = set()
    out = []
    for t in trajs:
        if t.task_id not in seen:
            seen.add(t.task_id)
            out.append(t)
    return out


class _Runs:
    """The part of an EvalReport that `reward_across` reads."""

    def __init__(self, trajectories: list[Any]):
        self.trajectories, self.trajectories_path = trajectories, None
