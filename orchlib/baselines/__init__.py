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

The package, one module a job: `routing` (routes and the engine that writes one), `trials` (every route
run once), `rules` (the baselines' choices and engines), `tokenize_memo` (each prompt tokenised once) and
`gc_pause` (the garbage collector paused per batch).
"""

from __future__ import annotations

from orchlib.baselines.gc_pause import collector_paused
from orchlib.baselines.routing import EVAL_ROLLOUT, RouteEngine, route_label, routes
from orchlib.baselines.rules import BASELINES, choose, make_baselines
from orchlib.baselines.tokenize_memo import TokenizeMemo
from orchlib.baselines.trials import (CUT_SHORT, ROUTE_BATCH, RouteResult, Trials, route_stats, run_routes, try_routes,
                                     warn_cut_short)

__all__ = ["BASELINES", "EVAL_ROLLOUT", "ROUTE_BATCH", "RouteResult", "Trials", "routes", "route_label", "RouteEngine",
           "TokenizeMemo", "run_routes", "try_routes", "route_stats", "choose", "make_baselines", "collector_paused",
           "CUT_SHORT", "warn_cut_short"]
