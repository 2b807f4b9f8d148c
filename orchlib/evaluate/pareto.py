"""Cost–accuracy summaries from the routing literature: the Pareto `frontier`, `pgr` and `apgr` (RouteLLM),
`aiq` (RouterBench); a metric with no value here (no gap to recover) is `Undefined`, which says why and
refuses to be used as a number."""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["frontier", "Undefined", "UndefinedMetricError", "pgr", "apgr", "aiq"]


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


_SPEC = re.compile(r"(?P<align>.?[<>^])?[-+ ]?z?#?0?(?P<width>\d*)")  # a format spec's alignment and width


class UndefinedMetricError(TypeError):
    """A number was asked of an `Undefined` metric (compared, converted, computed with)."""


class Undefined:
    """A metric that has no value here (PGR with no gap between the weak and the strong reference),
    with `reason` saying why. It is not a number: comparing it (`<`, `>`, `==` with a number),
    converting it (`float`, `int`, `bool`) or computing with it (`a - b`, `abs`) raises
    UndefinedMetricError, so a check such as `abs(a - b) > tol` cannot pass on it silently (a NaN
    would: every comparison with NaN is False). Test for it with `isinstance(value, Undefined)`.
    Formatting it (`f"{value:.3f}"`, a table cell) gives "undefined"; its repr says why."""

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason

    def __repr__(self) -> str:
        return f"undefined here, because {self.reason}"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        """ "undefined", at the width and alignment the spec asks of a number (right-aligned by default)."""
        m = _SPEC.match(spec)
        return format("undefined", f"{m['align'] or '>'}{m['width']}")

    def _refuse(self, *_: Any) -> Any:
        raise UndefinedMetricError(f"not a number: {self!r}; test isinstance(value, Undefined) before comparing "
                                   "or computing with a metric")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Undefined):
            return self.reason == other.reason
        return self._refuse()

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self.reason)

    __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __float__ = __int__ = __index__ = __bool__ = __round__ = __abs__ = __neg__ = __pos__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _refuse
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = __rpow__ = _refuse


def _no_gap(acc_weak: float, acc_strong: float) -> Undefined | None:
    if acc_strong > acc_weak:
        return None
    return Undefined(f"the strong reference ({acc_strong:g}) is no more accurate than the weak one ({acc_weak:g}): "
                     "there is no gap to recover (the cheapest model is also the best)")


def pgr(acc: float, acc_weak: float, acc_strong: float) -> float | Undefined:
    """Performance gap recovered (RouteLLM): (acc − weak) / (strong − weak); 0 = weak, 1 = strong.
    `Undefined` (which says why, and is not a number) when the strong reference is no more accurate
    than the weak."""
    undefined = _no_gap(acc_weak, acc_strong)
    if undefined is not None:
        return undefined
    return (acc - acc_weak) / (acc_strong - acc_weak)


def apgr(points: Sequence[Sequence[float]], acc_weak: float, acc_strong: float) -> float | Undefined:
    """Average performance gap recovered (RouteLLM, arXiv 2406.18665 §4; `routellm/evals/evaluate.py`).

    `points` are a router's operating points (share of calls to the strong model in [0, 1], accuracy),
    e.g. one per cost threshold or per preference P. With x sorted, APGR = (AUC − AUC_weak) /
    (AUC_strong − AUC_weak), each AUC the trapezoid area over the points' x range — the mean PGR over
    that range. Over points from 0 % to 100 % strong calls this is RouteLLM's ∫₀¹ PGR d(strong share).
    A single operating point gives its PGR. `Undefined` (which says why; never ±inf or NaN) when the
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
