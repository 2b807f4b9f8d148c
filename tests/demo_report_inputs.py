"""Hand-made inputs of the demo's report: trajectories, evaluations, history and checks written here, put
through the demo's own `summarize_demo` (no training, no model), with the shares they must give.

Before RL, four runs per profile; after RL, four per profile, one of them calling a name no tool has (a
malformed call can name anything, markup included). Every share is a multiple of 1/4: exact in floats.
"""

from __future__ import annotations

from types import SimpleNamespace

from orchlib.demo.config import DemoConfig
from orchlib.tasks import PROFILES
from orchlib.trajectory import Trajectory

HOSTILE = "<img src=x onerror=alert(1)>"  # a model-written tool name
ODD_POLICY = "r&d <i>"  # a policy name that is not plain text once in HTML
TITLE = "Share of calls per backend, per profile, before and after RL"


def run(task: str, profile: str, calls: dict[str, int], outcome: float = 1.0, category: str = "gsm8k",
        cost: float = 0.001) -> Trajectory:
    return Trajectory(task_id=f"{task}@{profile}", preference=PROFILES[profile].model_dump(), category=category,
                      calls=calls, outcome=outcome, cost_usd=cost, latency_s=1.0)


def _runs(per_profile: dict[str, list[dict[str, int]]]) -> list[Trajectory]:
    """Task q<i> under each profile, its category arithmetic for the last one and GSM8K otherwise."""
    return [run(f"q{i}", prof, calls, category="arithmetic" if i == len(calls_list) - 1 else "gsm8k")
            for prof, calls_list in per_profile.items() for i, calls in enumerate(calls_list)]


BEFORE = {"accuracy": [{"generalist": 1}, {"mixtral": 1}, {"mixtral": 1}, {"calculator": 1}],
          "thrifty": [{"generalist": 1}, {"mixtral": 1}, {"generalist": 1}, {"calculator": 1}]}
AFTER = {"accuracy": [{"generalist": 1}, {"generalist": 1}, {"generalist": 1}, {"calculator": 1}],
         "thrifty": [{"mixtral": 1}, {"mixtral": 1}, {HOSTILE: 1}, {"calculator": 1}]}
# what the runs above must give, counted by hand: calls per backend over all calls, per profile
WANT_SHARES = {
    "before RL": {"accuracy": {"calculator": 0.25, "generalist": 0.25, "mixtral": 0.5},
                  "thrifty": {"calculator": 0.25, "generalist": 0.5, "mixtral": 0.25}},
    "after RL": {"accuracy": {"calculator": 0.25, "generalist": 0.75, "mixtral": 0.0},
                 "thrifty": {"calculator": 0.25, "generalist": 0.0, "mixtral": 0.5, "unknown": 0.25}},
}

HISTORY = [
    {"step": s, "reward": r, "reward_anchored": r + 0.25, "share/calculator": 0.25, "share/generalist": g,
     "share/mixtral": 0.75 - g, "profile/accuracy/share/generalist": g + 0.25, "profile/thrifty/share/generalist": g,
     "profile/accuracy/advantage/generalist": 0.5, "profile/thrifty/advantage/generalist": -0.5,
     "profile/accuracy/groups_kept": 1.0, "profile/thrifty/groups_kept": 2.0, "groups_kept": 3.0}
    for s, r, g in ((1, 0.25, 0.5), (2, 0.5, 0.25), (3, 0.75, 0.5))]


def mean_outcome(group, P) -> list[float]:
    """A reward by hand: each run's outcome (the report's numbers need one, not the paper's)."""
    return [t.outcome for t in group]


def hand_made():
    """(metrics, after, baselines, history) as `run_demo` hands them to `write_outputs`."""
    from orchlib.demo.report import summarize_demo

    before = SimpleNamespace(trajectories=_runs(BEFORE))
    after = SimpleNamespace(trajectories=_runs(AFTER))
    every = {p: [{"generalist": 1}] * 4 for p in ("accuracy", "thrifty")}
    cheap = {p: [{"mixtral": 1}] * 4 for p in ("accuracy", "thrifty")}
    baselines = {"strongest": SimpleNamespace(trajectories=_runs(every)),
                 "cheapest": SimpleNamespace(trajectories=[t.model_copy(update={"outcome": 0.5})
                                                           for t in _runs(cheap)]),
                 ODD_POLICY: SimpleNamespace(trajectories=_runs(cheap))}
    checks = {"well_formed_turns": 1.0, "arithmetic_copy_exact": 0.75, "n_turns": 8.0, "n_arithmetic": 2.0,
              "copy_drill_steps": 30.0, "copy_heldout_accuracy": 0.5, "choice_gap_points": 1.5, "profile_cosine": 0.5}
    sft, wall = SimpleNamespace(losses=[2.0, 1.0]), {"warm_start": 1.0, "grpo": 2.0}
    metrics = summarize_demo(DemoConfig(), before, after, baselines, checks, HISTORY, sft, wall, mean_outcome)
    metrics["choice_gap_points"], metrics["profile_cosine"] = 25.0, 0.25
    return metrics, after, baselines, HISTORY
