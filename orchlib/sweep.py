"""Sweep P: one policy evaluated under many preference vectors, and the front it traces.

ToolOrchestra conditions one policy on the user's preference vector P (arXiv 2511.21689 §3), so one
trained policy is a whole family of operating points: thrifty under a high cost weight, accurate
under a high outcome weight. `sweep` runs a policy (a trained orchestrator, an API policy or a
baseline: any Engine `evaluate` takes) over the same tasks under each P of a grid or a sample, in
one call, and reports per P its accuracy, mean cost (USD), mean latency (s) and tool mix.

    prefs = preference_grid(cost=[0, 0.5, 1, 2])          # or preference_sample(8, seed=0)
    result = sweep(engine, tasks, toolbox, prefs, references={"oracle": oracle_report, ...})
    result.table(); result.front(); result.hypervolumes(); result.figure()

The front is the Pareto-optimal set of the sweep's points: cost and latency lower, accuracy higher
(`orchlib.evaluate.frontier` for cost–accuracy; `pareto_front` here adds latency). The hypervolume
(Zitzler & Thiele 1998) is the area (volume, with latency) that a set of points dominates up to a
reference point — one number for a whole front, larger is better — so the sweep's points, the
baselines' (each a single point: they ignore P) and the oracle's compare on one scale. The default
reference is accuracy 0 and 1.1 × the dearest (slowest) point of everything compared, so that the
dearest point still encloses some area (when every cost, or latency, is 0: 1 USD, or 1 s, so that a
free front still encloses its accuracy); pass `reference=` to fix it across experiments. Costs and
latencies are >= 0: a negative one is refused. The hypervolume takes the non-dominated points first,
then sweeps them in O(n log n) (2-D) or slices along cost over 2-D sweeps (3-D).

A grid holds at most `MAX_GRID` preferences (10,000): the product of the axes' lengths is checked
before anything is built (a sweep evaluates every task under every P, so a larger grid is a mistake
long before it is a memory problem).

`preference_router` is a baseline that reads P: per task category, the route (`orchlib.baselines`)
whose measured accuracy, cost and latency score best under the task's P — what a policy that has
learnt P but nothing finer than categories would do.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from orchlib.baselines import RouteEngine, Trials, route_stats, routes, try_routes
from orchlib.configurations import bind, draw
from orchlib.env import Environment
from orchlib.evaluate import EvalReport, evaluate, format_table, frontier, under_profiles
from orchlib.rollout import RolloutConfig
from orchlib.tasks import Preference, Task

__all__ = ["SweepPoint", "SweepResult", "preference_grid", "preference_sample", "sweep", "pareto_front",
           "hypervolume", "reference_point", "preference_router", "MAX_GRID"]

# Beyond the dearest point, the reference leaves this share of its value: a front's dearest point
# would otherwise enclose no area, and a baseline that is only that point would score 0.
REFERENCE_MARGIN = 0.1
# The most preferences a grid may hold (see the module docstring).
MAX_GRID = 10_000


# ---------------------------------------------------------------------------------------------- preferences
def _num(x: float, sign: str = "") -> str:
    """`x` in 6 digits (`0.5`), or in as many as it takes to read back as `x`: two weights that differ
    past the sixth digit get two labels (the label keys the sweep's points)."""
    short = f"{x:{sign}g}"
    if float(short) == x:
        return short
    return ("+" if sign and x >= 0 else "") + repr(float(x))  # the shortest text that reads back as x


def _label(outcome: float, cost: float, latency: float, tools: Mapping[str, float]) -> str:
    parts = [f"a{_num(outcome)}", f"c{_num(cost)}", f"l{_num(latency)}"]
    return " ".join(parts + [f"{t}{_num(w, '+')}" for t, w in sorted(tools.items()) if w])


def _preference(outcome: float, cost: float, latency: float, tools: Mapping[str, float]) -> Preference:
    for what, w in (("outcome", outcome), ("cost", cost), ("latency", latency), *tools.items()):
        try:
            ok = np.isfinite(float(w))
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"preference weight {what}: {w!r} is not a finite number")
    tools = {t: float(w) for t, w in tools.items() if w}
    return Preference(name=_label(outcome, cost, latency, tools), outcome=float(outcome), cost=float(cost),
                      latency=float(latency), tools=tools)


def preference_grid(outcome: Sequence[float] = (1.0,), cost: Sequence[float] = (0.0, 0.5, 1.0),
                    latency: Sequence[float] = (0.0,), tools: Mapping[str, Sequence[float]] | None = None
                    ) -> list[Preference]:
    """Every combination of the given weights, one Preference each, named by its weights
    (`"a1 c0.5 l0"`, tool weights appended as `"calculator+0.5"`), in the order of the axes."""
    tools = dict(tools or {})
    axes = [list(outcome), list(cost), list(latency), *[list(v) for v in tools.values()]]
    if any(not a for a in axes):
        raise ValueError("every axis of a preference grid needs at least one value")
    size = int(np.prod([len(a) for a in axes], dtype=object))
    if size > MAX_GRID:
        raise ValueError(f"a preference grid of {size} preferences ({' × '.join(str(len(a)) for a in axes)}) is "
                         f"more than MAX_GRID = {MAX_GRID}: sample (preference_sample) or use fewer values")
    out = [_preference(o, c, s, dict(zip(tools, ws))) for o, c, s, *ws in itertools.product(*axes)]
    return _distinct(out)


def preference_sample(n: int, *, seed: int = 0, outcome: tuple[float, float] = (1.0, 1.0),
                      cost: tuple[float, float] = (0.0, 2.0), latency: tuple[float, float] = (0.0, 0.0),
                      tools: Mapping[str, tuple[float, float]] | None = None, decimals: int = 2) -> list[Preference]:
    """`n` preferences drawn uniformly in the given (low, high) ranges with numpy's generator seeded by
    `seed`, each weight rounded to `decimals` (readable names); draws that round to the same P are
    kept once, so fewer than `n` may come back on a narrow range."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    rng = np.random.default_rng(seed)
    ranges = {"outcome": outcome, "cost": cost, "latency": latency,
              **{f"tools/{t}": r for t, r in (tools or {}).items()}}
    for key, (lo, hi) in ranges.items():
        if not (np.isfinite(lo) and np.isfinite(hi)):
            raise ValueError(f"preference weight {key}: the range ({lo}, {hi}) is not finite")
        if hi < lo:
            raise ValueError(f"{key}: the range ({lo}, {hi}) ends below its start")
    draws = {k: np.round(rng.uniform(lo, hi, n), decimals) for k, (lo, hi) in ranges.items()}
    out = [_preference(draws["outcome"][i], draws["cost"][i], draws["latency"][i],
                       {k[6:]: draws[k][i] for k in draws if k.startswith("tools/")}) for i in range(n)]
    return _distinct(out)


def _distinct(prefs: list[Preference]) -> list[Preference]:
    return list({p.name: p for p in prefs}.values())


# ---------------------------------------------------------------------------------------------- fronts
def _as_rows(points: Any, dims: int) -> list[tuple[float, ...]]:
    rows = [tuple(float(x) for x in p[:dims]) for p in points]
    if any(len(r) != dims for r in rows):
        raise ValueError(f"every point needs {dims} coordinates")
    if any(not np.isfinite(x) for r in rows for x in r):
        raise ValueError("points must be finite")
    return rows


def pareto_front(points: Sequence[Sequence[float]], latency: bool = False) -> list[int]:
    """Indices of the Pareto-optimal points, by cost. A point is (cost, accuracy) or, with
    `latency=True`, (cost, accuracy, latency): cost and latency lower is better, accuracy higher. Without
    latency this is `orchlib.evaluate.frontier`."""
    if not latency:
        return list(frontier([p[:2] for p in points]))
    rows = _as_rows(points, 3)
    keys = [(c, -a, s) for c, a, s in rows]  # all three to be minimised
    keep = [i for i, p in enumerate(keys)
            if not any(all(q[j] <= p[j] for j in range(3)) and q != p for q in keys)]
    return sorted(keep, key=lambda i: (keys[i], i))


def _non_negative(rows: list[tuple[float, ...]], what: str) -> None:
    """Cost (and latency) are money and time: >= 0 (a negative one would move the reference point)."""
    for r in rows:
        bad = [(name, x) for name, x in zip(("cost", "accuracy", "latency"), r) if name != "accuracy" and x < 0]
        if bad:
            name, x = bad[0]
            raise ValueError(f"{what}: {name} {x!r} is negative (point {r}): costs and latencies are >= 0")


def reference_point(*point_sets: Sequence[Sequence[float]], latency: bool = False,
                    margin: float = REFERENCE_MARGIN) -> tuple[float, ...]:
    """The default reference of `hypervolume` for these sets together: (1 + margin) × the highest cost
    (and latency), accuracy 0. A highest cost (latency) of 0 gives 1 USD (1 s): with a reference at 0 a
    free front would enclose nothing, and a point at the reference is not counted."""
    if not (np.isfinite(margin) and margin >= 0):  # below 0 the dearest point would fall outside
        raise ValueError(f"margin must be a finite number >= 0, got {margin!r}")
    rows = [r for s in point_sets for r in _as_rows(s, 3 if latency else 2)]
    if not rows:
        raise ValueError("no points")
    _non_negative(rows, "reference_point")

    def edge(values: list[float]) -> float:
        top = max(values)
        return (1 + margin) * top if top > 0 else 1.0

    ref = [edge([r[0] for r in rows]), 0.0]
    if latency:
        ref.append(edge([r[2] for r in rows]))
    return tuple(ref)


def hypervolume(points: Sequence[Sequence[float]], reference: Sequence[float]) -> float:
    """The measure of what `points` dominate up to `reference`: the union over the points of the box
    between the point and the reference, in (cost, accuracy) — an area — or (cost, accuracy, latency) —
    a volume — after the length of `reference`. A point no better than the reference in every
    coordinate adds nothing. Exact: the non-dominated points first, then a sweep along cost (2-D,
    O(n log n)) or slices along cost, each a 2-D sweep (3-D)."""
    dims = len(reference)
    if dims not in (2, 3):
        raise ValueError("the reference is (cost, accuracy) or (cost, accuracy, latency)")
    rows = _as_rows(points, dims)
    ref = _as_rows([reference], dims)[0]
    _non_negative(rows, "hypervolume")
    # every coordinate turned into one to minimise: accuracy is negated
    flip = [(r[0], -r[1], *r[2:]) for r in rows]
    bound = (ref[0], -ref[1], *ref[2:])
    front = _nondominated([p for p in flip if all(x < b for x, b in zip(p, bound))])
    return _area(front, bound) if dims == 2 else _volume(front, bound)


def _nondominated(points: list[tuple[float, ...]]) -> list[tuple[float, ...]]:
    """The points no other point weakly dominates (every coordinate minimised), once each, sorted.
    In sorted order a point can only be dominated by one before it; in 2-D that is the running minimum
    of the second coordinate (O(n log n)), in 3-D the kept points are checked (O(n × front))."""
    kept: list[tuple[float, ...]] = []
    best = float("inf")
    for p in sorted(set(points)):
        if len(p) == 2:
            if p[1] < best:
                kept.append(p)
                best = p[1]
        elif not any(q[1] <= p[1] and q[2] <= p[2] for q in kept):
            kept.append(p)
    return kept


def _area(front: list[tuple[float, ...]], bound: tuple[float, ...]) -> float:
    """Area of the union of the boxes [p, bound] of a 2-D front sorted by its first coordinate (so its
    second decreases): between two consecutive points the union's height is the earlier point's."""
    total = 0.0
    for i, (x, y) in enumerate(front):
        total += ((front[i + 1][0] if i + 1 < len(front) else bound[0]) - x) * (bound[1] - y)
    return total


def _volume(front: list[tuple[float, ...]], bound: tuple[float, ...]) -> float:
    """Volume of the union of the boxes [p, bound] of a 3-D front sorted by its first coordinate: between
    two consecutive first coordinates the slice is the 2-D area of the points at or before it."""
    total = 0.0
    slice_: list[tuple[float, ...]] = []
    for i, p in enumerate(front):
        slice_ = _nondominated(slice_ + [p[1:]])
        width = (front[i + 1][0] if i + 1 < len(front) else bound[0]) - p[0]
        if width > 0:
            total += width * _area(slice_, bound[1:])
    return total


# ---------------------------------------------------------------------------------------------- the sweep
@dataclass(frozen=True)
class SweepPoint:
    """One P of a sweep: what the policy did under it (means per trajectory)."""

    preference: Preference
    n: int
    accuracy: float
    cost_usd: float
    latency_s: float
    tool_share: dict[str, float]       # tool → share of all calls under this P
    reward: float | None = None        # mean reward, when the sweep was given one

    def coordinates(self, latency: bool = False) -> tuple[float, ...]:
        return (self.cost_usd, self.accuracy, self.latency_s) if latency else (self.cost_usd, self.accuracy)

    def mix(self, top: int | None = None) -> str:
        """The tool mix as text, largest share first: `"calculator 75%, generalist 25%"` (the `top` first)."""
        ranked = sorted(self.tool_share.items(), key=lambda kv: (-kv[1], kv[0]))
        text = ", ".join(f"{t} {s:.0%}" for t, s in ranked[:top]) or "no calls"
        return text + (", …" if top is not None and len(ranked) > top else "")


def _reference_numbers(value: Any) -> tuple[float, float, float]:
    """(cost, accuracy, latency) of an EvalReport or of a given (cost, accuracy[, latency]) point."""
    metrics = getattr(value, "metrics", None)
    if metrics is not None:
        s = metrics["overall"]
        return float(s["cost_usd"]), float(s["accuracy"]), float(s["latency_s"])
    nums = [float(x) for x in value]
    if len(nums) not in (2, 3):
        raise ValueError(f"a reference point is (cost, accuracy[, latency]), not {value!r}")
    return (nums[0], nums[1], nums[2] if len(nums) == 3 else 0.0)


@dataclass
class SweepResult:
    """What `sweep` returns: one point per P, the reference points it is compared with (baselines, the
    oracle: name → (cost, accuracy, latency)) and the evaluation report of every trajectory."""

    name: str
    points: list[SweepPoint]
    references: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    report: EvalReport | None = field(default=None, repr=False)

    def front(self, latency: bool = False) -> list[SweepPoint]:
        """The Pareto-optimal points of the sweep, by cost (see `pareto_front`)."""
        return [self.points[i] for i in pareto_front([p.coordinates(latency) for p in self.points], latency)]

    def reference(self, latency: bool = False) -> tuple[float, ...]:
        """The default hypervolume reference over the sweep's points and its references together."""
        refs = [r if latency else r[:2] for r in self.references.values()]
        return reference_point([p.coordinates(latency) for p in self.points], refs, latency=latency)

    def hypervolumes(self, reference: Sequence[float] | None = None, latency: bool = False) -> dict[str, float]:
        """Hypervolume of the sweep (`self.name`), of each reference point alone, and of all references
        but the oracle together (`"baselines"`, when there are any), against one reference point."""
        ref = tuple(reference) if reference is not None else self.reference(latency)
        dims = 3 if latency else 2
        out = {self.name: hypervolume([p.coordinates(latency) for p in self.points], ref)}
        for name, r in self.references.items():
            out[name] = hypervolume([r[:dims]], ref)
        others = [r[:dims] for n, r in self.references.items() if n != "oracle"]
        if others:
            out["baselines"] = hypervolume(others, ref)
        return out

    def table(self) -> str:
        """One row per P, then one per reference point; `*` marks the sweep's cost–accuracy front."""
        on_front = {id(p) for p in self.front()}
        rows = [[p.preference.name, p.n, f"{p.accuracy:.3f}", f"{p.cost_usd:.5f}", f"{p.latency_s:.2f}",
                 "-" if p.reward is None else f"{p.reward:.3f}", "*" if id(p) in on_front else "", p.mix(top=4)]
                for p in self.points]
        rows += [[f"[{name}]", "", f"{a:.3f}", f"{c:.5f}", f"{s:.2f}", "-", "", ""]
                 for name, (c, a, s) in self.references.items()]
        hv = self.hypervolumes()
        tail = " · ".join(f"{k} {v:.4g}" for k, v in hv.items())
        return (f"sweep: {self.name}\n" + format_table(["P", "n", "accuracy", "cost $", "latency s", "reward",
                                                         "front", "tool mix"], rows)
                + f"\nhypervolume (cost–accuracy, reference {tuple(round(x, 6) for x in self.reference())}): {tail}")

    def figure(self, latency_colour: bool = True, title: str | None = None):
        """The sweep as a plotly figure (`orchlib.viz.sweep_figure`)."""
        from orchlib.viz import sweep_figure  # here: plotly loads only when a figure is asked for

        return sweep_figure(self, latency_colour=latency_colour, title=title)


def sweep(policy, tasks: Sequence[Task], toolbox, preferences: Sequence[Preference], *, reward=None,
          config: RolloutConfig | None = None, group_size: int = 1, seed: int | None = 0, name: str | None = None,
          references: Mapping[str, Any] | None = None, batch_size: int | None = None,
          configurations: Any = None) -> SweepResult:
    """Evaluate `policy` on every task under every P of `preferences` (each task copied once per P, its
    id suffixed `@<P's name>`, nothing else changed), in one `orchlib.evaluate.evaluate` call.

    `references`: name → an EvalReport or a (cost, accuracy[, latency]) point, e.g. the baselines and
    the oracle on the same tasks (a fixed router ignores P: one point each); the result compares their
    hypervolumes with the sweep's. P names must differ: they key the points.

    `configurations`: a ConfigurationSpace (orchlib.configurations) drawn once per task (by its own id,
    episode 0) and kept for all of the task's copies, so the points differ in P alone; the space must
    not draw P itself (the sweep sets it)."""
    prefs = list(preferences)
    if not prefs:
        raise ValueError("a sweep needs at least one preference")
    names = [p.name for p in prefs]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"preference names must differ (they key the sweep's points): {twice} used twice")
    copies = under_profiles(list(tasks), prefs)
    drawn = _configured_copies(list(tasks), prefs, toolbox, configurations) if configurations is not None else None
    label = name or getattr(policy, "name", None) or type(policy).__name__
    report = evaluate(policy, Environment(name=label, test=copies, tools=toolbox), reward=reward, config=config,
                      group_size=group_size, name=label, seed=seed, batch_size=batch_size, configurations=drawn)
    by_profile = report.metrics["by_profile"]
    points = []
    for p in prefs:
        s = by_profile[p.name]
        points.append(SweepPoint(p, s["n"], s["accuracy"], s["cost_usd"], s["latency_s"],
                                 {t: v["share"] for t, v in s["calls"].items()}, s["reward"]))
    refs = {str(k): _reference_numbers(v) for k, v in (references or {}).items()}
    return SweepResult(label, points, refs, report)


def _configured_copies(tasks: list[Task], prefs: list[Preference], toolbox, space) -> Any:
    """copy of a task → the configuration its task drew (one per task, whatever P the copy has)."""
    if space.preference is not None:
        raise ValueError("sweep: the configurations space draws P, which the sweep sets; leave its preference unset")
    bound = space if space.catalog else bind(space, toolbox)
    by_copy = {}
    for task in tasks:
        c = draw(bound, bound.seed, task.id, 0)
        by_copy.update({f"{task.id}@{p.name}": c for p in prefs})
    return lambda task: by_copy.get(task.id)


# ---------------------------------------------------------------------------------------------- a baseline that reads P
def preference_router(tasks: Sequence[Task], toolbox, tokenizer, calibration: Sequence[Task] | Trials | None = None,
                      config: RolloutConfig | None = None, name: str = "P-router") -> RouteEngine:
    """A fixed router that reads each task's P: among the task's routes it takes the one with the
    highest P.outcome·accuracy − P.cost·cost − P.latency·latency + Σ P.tools[t]·[route calls t], each
    of accuracy, cost and latency the route's mean over the calibration tasks of the task's category,
    min-max normalised over the category's routes as ToolOrchestra's reward normalises within a group
    (ties: the cheaper route, then the label). `tasks` are the tasks it will be run on, P included
    (for a sweep: `orchlib.evaluate.under_profiles(tasks, preferences)`); `calibration` defaults to the
    tasks themselves."""
    tasks = list(tasks)
    if isinstance(calibration, Trials):
        trials = calibration
    else:
        trials = try_routes(list(calibration) if calibration is not None else tasks, toolbox, tokenizer, config)
    stats = route_stats(trials)
    task_routes = {t.id: routes(t, toolbox.cards) for t in tasks}
    plan = {t.id: _best_route(t, list(task_routes[t.id]), stats.get(t.category, {})) for t in tasks}
    return RouteEngine(tokenizer, tasks, plan, task_routes, name=name, config=config)


def _best_route(task: Task, labels: list[str], stats: Mapping[str, Mapping[str, float]]) -> str:
    if not labels:
        raise ValueError(f"task {task.id} has no route (no golden calls and no final model tool offered)")
    known = [x for x in labels if x in stats] or labels
    P = task.preference or Preference(name="default")

    def norm(key: str) -> dict[str, float]:
        vals = {x: stats[x][key] for x in known if x in stats}
        lo, hi = min(vals.values(), default=0.0), max(vals.values(), default=0.0)
        return {x: (v - lo) / (hi - lo) if hi > lo else 0.0 for x, v in vals.items()}

    acc, cost, lat = norm("accuracy"), norm("cost_usd"), norm("latency_s")

    def score(x: str) -> float:
        tools = sum(w for t, w in P.tools.items() if t in x.split("+"))
        return P.outcome * acc.get(x, 0.0) - P.cost * cost.get(x, 0.0) - P.latency * lat.get(x, 0.0) + tools

    return min(known, key=lambda x: (-score(x), stats.get(x, {}).get("cost_usd", 0.0), x))
