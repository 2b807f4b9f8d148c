"""Evaluation: run a policy over tasks and report what it got right, what it spent, where its calls went.

A policy is anything `orchlib.rollout.rollout` drives: a trained orchestrator (an Engine) or a fixed-routing
baseline (`make_baselines`, from `orchlib.baselines`), so both go through one loop and one accounting of
money (USD) and time (s). `run` runs them (`evaluate`), `metrics` counts, `report` shows and saves,
`profiles` reruns under each preference profile, `heldout` reads where calls went on held-out tool
configurations (by backend, by list position, by shown price), `rotations` counterbalances a held-out
test's list order (each task once per rotation of its list), `pareto` summarises cost against accuracy,
`gradients` measures how much of an update to a local policy's choice moves it under every P alike.
"""

from orchlib.baselines import BASELINES, EVAL_ROLLOUT, make_baselines, try_routes
from orchlib.evaluate.heldout import HeldoutNumbers, format_heldout, heldout_summary
from orchlib.evaluate.metrics import TrajectoryFigures, compute_metrics, summarize
from orchlib.evaluate.pareto import Undefined, UndefinedMetricError, aiq, apgr, frontier, pgr
from orchlib.evaluate.profiles import preference_adherence
from orchlib.evaluate.report import EvalReport, compare, format_table, reward_across
from orchlib.evaluate.run import evaluate
from orchlib.tasks import under_profiles

__all__ = ["EVAL_ROLLOUT", "EvalReport", "TrajectoryFigures", "evaluate", "summarize", "compute_metrics", "compare",
           "reward_across", "preference_adherence", "frontier", "pgr", "apgr", "aiq", "Undefined",
           "UndefinedMetricError", "format_table", "BASELINES", "make_baselines", "try_routes", "under_profiles",
           "HeldoutNumbers", "heldout_summary", "format_heldout"]
