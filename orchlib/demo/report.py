"""The demo's numbers and its printed table, from the runs it compared."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Callable, Collection, Mapping

import numpy as np

from orchlib.demo.config import DEMO_PROFILES, DEMO_TOOL_NAMES, EXPENSIVE, DemoConfig
from orchlib.evaluate import format_table
from orchlib.experiments.variants import VariantConfig
from orchlib.tasks import Preference
from orchlib.train.accel import cpu_description
from orchlib.train.evaluation import controllability as run_controllability
from orchlib.train.evaluation import controllability_by_category as run_controllability_by_category
from orchlib.train.evaluation import numbers, tool_share

__all__ = ["summarize_demo", "objective_line", "table_text", "table_rows", "table_notes", "checks_line",
           "check_caveats", "SHARED",
           "rewards_across_policies", "generalist_share", "controllability", "controllability_by_category",
           "backend_of", "backend_shares", "backend_shares_by_profile", "UNKNOWN"]

SHARED = 0o644  # the demo's outputs are reports to share, not private files
UNKNOWN = "unknown"  # where calls to a name outside the known backends are counted (a malformed call names anything)


def _by_profile(trajs) -> dict[str, list]:
    out: dict[str, list] = defaultdict(list)
    for t in trajs:
        out[str(t.preference.get("name", ""))].append(t)
    return dict(out)


def generalist_share(trajs, tool: str = EXPENSIVE) -> float:
    """Share of all tool calls that went to `tool`."""
    return tool_share(trajs, tool)


def backend_of(traj, name: str) -> str:
    """The backend a call to tool `name` reached: what the trajectory's `configuration` (alias -> backend),
    where it records one, maps `name` to; otherwise `name` itself. Read with getattr, so trajectories
    without the field count by tool name."""
    configuration = getattr(traj, "configuration", None)
    if isinstance(configuration, Mapping):
        backend = configuration.get(name)
        if isinstance(backend, str) and backend:
            return backend
    return name


def backend_shares(trajs, known: Collection[str] | None = None,
                   backend: Callable[[Any, str], str] = backend_of) -> dict[str, float]:
    """Share of all calls in `trajs` that reached each backend (`backend(traj, tool name)`), summing to 1
    (empty when nothing was called). With `known`, every known backend is listed (0 if never reached),
    sorted, and any other name is counted as UNKNOWN, listed last."""
    counts: Counter[str] = Counter()
    for t in trajs:
        for name, n in t.calls.items():
            b = backend(t, name)
            counts[b if known is None or b in known else UNKNOWN] += n
    total = sum(counts.values())
    if not total:
        return {}
    names = sorted(set(known or ()) | (set(counts) - {UNKNOWN})) + ([UNKNOWN] if counts[UNKNOWN] else [])
    return {b: counts[b] / total for b in names}


def backend_shares_by_profile(trajs, profiles=DEMO_PROFILES, known: Collection[str] | None = DEMO_TOOL_NAMES,
                              backend: Callable[[Any, str], str] = backend_of) -> dict[str, dict[str, float]]:
    """`backend_shares` of the trajectories run under each of `profiles` (by the preference's name)."""
    by = _by_profile(trajs)
    return {p: backend_shares(by.get(p, []), known, backend) for p in profiles}


def controllability(trajs, tool: str = EXPENSIVE) -> float:
    """100 x (share of calls to `tool` under "accuracy" - under "thrifty"): the demo's
    `controllability_points`."""
    return run_controllability(trajs, tool)


def controllability_by_category(trajs, tool: str = EXPENSIVE) -> dict[str, float]:
    """`controllability` per task category. The gap can sit in one category alone (with the reading
    drills it sat on arithmetic), which the overall number hides."""
    return run_controllability_by_category(trajs, tool)


def _numbers(trajs) -> dict[str, Any]:
    return {**numbers(trajs), "generalist_share": generalist_share(trajs),
            "errors_per_task": sum(t.num_errors for t in trajs) / max(len(trajs), 1)}


def rewards_across_policies(runs: dict[str, list], reward) -> dict[str, dict[str, float]]:
    """Mean reward per policy and profile when each task's group is every policy's runs of that task
    (the group-normalised reward needs a group; here it is the policies compared)."""
    by_task: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for name, trajs in runs.items():
        for t in trajs:
            by_task[t.task_id][name].append(t)
    sums: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for per_policy in by_task.values():
        names = [n for n in runs if n in per_policy]
        group = [t for n in names for t in per_policy[n]]
        P = Preference.model_validate(group[0].preference)
        values = np.asarray(reward(group, P=P), dtype=float)
        i = 0
        for n in names:
            k = len(per_policy[n])
            sums[n][P.name] += values[i:i + k].tolist()
            i += k
    return {n: {p: float(np.mean(v)) for p, v in sorted(ps.items())} for n, ps in sums.items()}


def summarize_demo(config, before, after, baselines, checks, history, sft, wall, reward) -> dict[str, Any]:
    runs = {"before RL": before.trajectories, "orchestrator": after.trajectories,
            **{n: r.trajectories for n, r in baselines.items()}}
    policies: dict[str, dict[str, Any]] = {}
    for name, trajs in runs.items():
        policies[name] = {"all": _numbers(trajs), **{p: _numbers(ts) for p, ts in sorted(_by_profile(trajs).items())}}
    across = rewards_across_policies({k: v for k, v in runs.items() if k != "before RL"}, reward)
    # The learning curve is the reward against fixed reference runs (evaluate.anchored_reward): in its own group
    # a rollout's reward is relative to the others', so it falls as they come to agree even when they
    # improve. The in-group reward the update uses is kept beside it.
    first10, last10 = _ends([h["reward_anchored"] for h in history if "reward_anchored" in h])
    in_group = _ends([h["reward"] for h in history])
    m: dict[str, Any] = {
        "config": config.model_dump(), "seed": config.seed, "cpu": cpu_description(), "policies": policies,
        "reward_across": across,
        # what was learned, first in the report: where the calls went under each profile, before and after RL
        "backend_share": {"before RL": backend_shares_by_profile(before.trajectories),
                          "after RL": backend_shares_by_profile(after.trajectories)},
        "controllability_points": controllability(after.trajectories),
        "controllability_points_before_rl": controllability(before.trajectories),
        "controllability_by_category": {"orchestrator": controllability_by_category(after.trajectories),
                                        "before RL": controllability_by_category(before.trajectories)},
        "reward_first10": first10, "reward_last10": last10,
        "reward_in_group_first10": in_group[0], "reward_in_group_last10": in_group[1], "format": checks,
        "sft_loss_first": sft.losses[0] if sft.losses else None,
        "sft_loss_last": sft.losses[-1] if sft.losses else None,
        "wall_s": {k: round(v, 2) for k, v in wall.items()}, "wall_total_s": round(sum(wall.values()), 2),
        # mean groups per step whose rewards differed, per profile: only those carry a learning signal
        "groups_kept_per_step": {p: _step_mean(history, f"profile/{p}/groups_kept") for p in DEMO_PROFILES},
        # where the updates pushed: per profile, the mean over steps of the mean advantage of the rollouts
        # that called the generalist (positive: toward it). Profiles that differ here while their tool
        # shares do not mean the reward carries P's signal and the policy does not read P.
        "generalist_advantage_per_step": {p: _step_mean(history, f"profile/{p}/advantage/{EXPENSIVE}")
                                          for p in DEMO_PROFILES},
        "entropy_last": history[-1].get("entropy") if history else None,
        "kl_last": history[-1].get("kl") if history else None,
        "history": history,  # every GRPO step's metrics, as the trainer logged them
    }
    thrifty_r = {n: across[n].get("thrifty", float("nan")) for n in across}
    m["checks"] = {
        "well_formed_turns>=0.95": checks["well_formed_turns"] >= 0.95,
        "arithmetic_copy>=0.90": checks["arithmetic_copy_exact"] >= 0.90,
        "thrifty_reward>strongest": thrifty_r["orchestrator"] > thrifty_r.get("strongest", float("inf")),
        "accuracy>cheapest": policies["orchestrator"]["all"]["accuracy"] > policies["cheapest"]["all"]["accuracy"],
        # on GSM8K the profiles' best tools differ (Mixtral's 64 % for a fraction of the price, or the dear
        # generalist); on arithmetic both tools are right, and "accuracy" picking either is indifference
        "gsm8k_controllability>=30": m["controllability_by_category"]["orchestrator"].get("gsm8k", 0.0) >= 30,
        "reward_last10>first10": last10 > first10,
    }
    return m


def _step_mean(history: list[dict], key: str) -> float:
    """Mean of `key` over the steps that logged it (NaN for none)."""
    values = [h[key] for h in history if key in h]
    return float(np.mean(values)) if values else float("nan")


def _ends(values: list[float]) -> tuple[float, float]:
    """Mean of the first 10 and of the last 10 values (NaN for none)."""
    if not values:
        return float("nan"), float("nan")
    return float(np.mean(values[:10])), float(np.mean(values[-10:]))


def _listed(values: dict[str, float], spec: str) -> str:
    """`{"a": 1.0, "b": 2.5}` -> "a 1.0, b 2.5" (each value formatted with `spec`)."""
    return ", ".join(f"{k} {v:{spec}}" for k, v in values.items())


def table_rows(m: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The demo's table, header and rows (each cell a string), per policy and profile, from its metrics."""
    tools = DEMO_TOOL_NAMES
    # a malformed call can name anything ("{", "calculat"): such names share one column, not one each
    header = ["policy", "profile", "accuracy", "cost $", "latency s", "reward*", *[f"calls {t}" for t in tools],
              "calls unknown"]
    rows = []
    for name, per in m["policies"].items():
        for prof in ("accuracy", "thrifty"):
            if prof not in per:
                continue
            x = per[prof]
            r = m["reward_across"].get(name, {}).get(prof)
            rows.append([name, prof, f"{x['accuracy']:.2f}", f"{x['cost_usd']:.5f}", f"{x['latency_s']:.2f}",
                         "-" if r is None else f"{r:.3f}", *[f"{x['calls'].get(t, 0):.2f}" for t in tools],
                         f"{sum(v for t, v in x['calls'].items() if t not in tools):.2f}"])
    return header, rows


def table_notes(m: dict[str, Any]) -> list[str]:
    """The lines under the table: the reward's footnote, controllability, the format before RL, the GRPO
    reward, wall time."""
    by_cat = m["controllability_by_category"]
    return ["* ToolOrchestra reward, each task's group = the compared policies' runs of it",
            f"controllability (generalist share, accuracy - thrifty): {m['controllability_points']:.1f} points "
            f"(before RL: {m['controllability_points_before_rl']:.1f}); exact choice gap "
            f"p(generalist | accuracy) - p(generalist | thrifty): {m.get('choice_gap_points', float('nan')):.2f} "
            f"points (before RL: {m['format'].get('choice_gap_points', float('nan')):.2f}); by category: "
            f"{_listed(by_cat['orchestrator'], '.1f')} (before RL: {_listed(by_cat['before RL'], '.1f')})",
            f"before RL: well-formed turns {100 * m['format']['well_formed_turns']:.1f}%, arithmetic copied exactly "
            f"{100 * m['format']['arithmetic_copy_exact']:.1f}% (warm start phase 1: "
            f"{m['format'].get('copy_drill_steps', 0):.0f} steps of copy drills, then "
            f"{100 * m['format'].get('copy_heldout_accuracy', 0):.0f}% of held-out drills copied)"
            + (f"; P read at the choice on the reading drills' pair: {m['format']['reading_gap_points']:.1f} points"
               if "reading_gap_points" in m["format"] else ""),
            f"GRPO reward against fixed reference runs: first 10 steps {m['reward_first10']:.3f}, last 10 steps "
            f"{m['reward_last10']:.3f} (within each step's own groups, as the update sees it: "
            f"{m['reward_in_group_first10']:.3f} -> {m['reward_in_group_last10']:.3f}); groups per step with a "
            f"learning signal (rewards not all "
            f"equal), of {m['config']['grpo']['tasks_per_step']} per profile: "
            + _listed(m["groups_kept_per_step"], ".2f") + "; mean advantage of the rollouts calling the "
            f"generalist: {_listed(m['generalist_advantage_per_step'], '+.3f')}",
            "wall time: " + ", ".join(f"{k} {v:.1f}s" for k, v in m["wall_s"].items())
            + f"; total {m['wall_total_s']:.1f}s"]


def objective_line(m: dict[str, Any]) -> str:
    """The report's first line: which objective GRPO trained with, read off the run's own settings. The
    paper's, or a variant named field by field (`orchlib.experiments.variants`, SFT replay), so nobody
    reads a variant's result as the paper's."""
    config = m["config"]
    objective = _objective(config)
    paper, ran = VariantConfig().model_dump(), objective[0].model_dump()
    changed = {k: v for k, v in ran.items() if v != paper[k]}
    parts = [f"{k}={v}" for k, v in sorted(changed.items())]
    if parts:
        parts[-1] += " (orchlib.experiments.variants)"
    if config.get("replay_coef"):
        parts.append(f"SFT replay x{config['replay_coef']:g} (replay_coef)")
    grpo = config["grpo"]
    if grpo["advantage_scale"] != "std":  # the paper divides by the group's std; Dr. GRPO does not
        parts.append(f"advantage_scale={grpo['advantage_scale']} (mean-only advantages, Dr. GRPO)")
    knobs = (f"lr {grpo['learning_rate']:g}, KL {grpo['kl_coef']:g}, {grpo['tasks_per_step']} tasks x "
             f"{grpo['group_size']} rollouts a step, {config['steps']} steps")
    if not parts:
        return f"trained with the paper's GRPO, no variant ({knobs})"
    line = f"trained with a variant of the paper's GRPO, set in this run's DemoConfig: {'; '.join(parts)} ({knobs})"
    if objective == _objective(DemoConfig().model_dump()):
        line += (". Why: the demo's default, since with the paper's GRPO the tiny policy's checks did not hold on "
                 "every seed (docs/results.md)")
    return line


def _objective(config: dict[str, Any]) -> tuple:
    """What sets the objective of a run's GRPO: its variant hooks, its SFT replay, its advantage scaling."""
    return (VariantConfig.model_validate(config["variants"]), config.get("replay_coef"),
            config["grpo"]["advantage_scale"])


def checks_line(m: dict[str, Any]) -> str:
    """"checks: name PASS, name FAIL, ..." """
    return "checks: " + ", ".join(f"{k} {'PASS' if v else 'FAIL'}" for k, v in m["checks"].items())


def check_caveats(m: dict[str, Any]) -> list[str]:
    """What the checks mean: this machine's result, and why it varies between CPU kinds."""
    return [f"these checks are what this run showed on this machine ({m.get('cpu', 'unknown CPU')}): what training "
            "learns turns on float rounding, which differs between CPU kinds (AVX2, AVX-512, AMX), so a check can "
            "pass on one and fail on another; benchmarks/bench_demo.py measures the bars over seeds",
            "why it varies: after the warm start, 1 - cos between the GSM8K choice's gradients under the two "
            f"profiles was {1 - m['format'].get('profile_cosine', float('nan')):.1e} (after RL: "
            f"{1 - m.get('profile_cosine', float('nan')):.2f}; the demo aims for >= 1e-2 before RL): RL builds the "
            "choice's dependence on P from that part of each update, the smaller it is the more rounding can move "
            "it (orchlib.evaluate.gradients.profile_gradient_cosine)"]


def table_text(m: dict[str, Any]) -> str:
    """The demo's printed table and summary lines, from its metrics."""
    return "\n".join([objective_line(m), format_table(*table_rows(m)), *table_notes(m), checks_line(m),
                      *check_caveats(m)])
