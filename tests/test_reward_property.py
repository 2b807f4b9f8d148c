"""Property test: compiled rewards against an independent evaluator, on random expressions and groups.

Hypothesis draws an expression tree (arithmetic, elementwise min/max, abs, `where` with nested
conditions, conditions used as numbers, every group operator — also inside conditions, the case
sympy's Piecewise used to get wrong — `G`, P entries, and sums over tools) and a batch of groups.
The tree is printed as reward-language text and compiled by orchlib; this file evaluates the same
tree itself, group by group, with plain numpy and Python written from the definitions in
docs/rewards.md (nothing from orchlib's compile path or its operators).

Inputs are small integers, so arithmetic before the first group operator is exact. After it values
are rounded, and a comparison, a tie in `rank` or the `max == min` test of `minmax`/`zscore` could
then decide differently for a last-bit difference; the evaluator records how close each such
decision came, and examples closer than 1e-9 are discarded rather than tested on rounding.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from orchlib.reward import Reward
from orchlib.tasks import Preference

FEATURES = ["outcome", "cost", "latency", "turns"]
TOOLS = ["a", "b", "c"]
GROUP_OPS = ["minmax", "zscore", "rank", "mean", "max", "min", "sum"]
COMPARE = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal,
           "!=": np.not_equal}
TIE = 1e-9

# --- expression trees ----------------------------------------------------------------------------
# Numbers: ("feat", name) ("const", v) ("P", field) ("G",) ("calls", tool) ("loop_calls",) ("loop_P",)
#          ("+"|"-"|"*"|"emin"|"emax", a, b) ("neg", a) ("abs", a) ("where", cond, a, b)
#          ("group", op, a) ("count", cond) ("num", cond) ("toolsum", body)
# Conditions: ("cmp", op, a, b) ("and", c, d) ("or", c, d) ("not", c)


def numbers(depth: int, in_loop: bool = False) -> st.SearchStrategy:
    leaves = [st.tuples(st.just("feat"), st.sampled_from(FEATURES)),
              st.tuples(st.just("const"), st.integers(-3, 3)),
              st.tuples(st.just("P"), st.sampled_from(["outcome", "cost", "latency"])),
              st.just(("G",)), st.tuples(st.just("calls"), st.sampled_from(TOOLS))]
    if in_loop:
        leaves += [st.just(("loop_calls",)), st.just(("loop_P",))]
    leaf = st.one_of(*leaves)
    if depth == 0:
        return leaf
    sub = numbers(depth - 1, in_loop)
    cond = conditions(depth - 1, in_loop)
    branches = [
        leaf,
        st.tuples(st.sampled_from(["+", "-", "*", "emin", "emax"]), sub, sub),
        st.tuples(st.sampled_from(["neg", "abs"]), sub),
        st.tuples(st.just("where"), cond, sub, sub),
        st.tuples(st.just("group"), st.sampled_from(GROUP_OPS), sub),
        st.tuples(st.just("count"), cond),
        st.tuples(st.just("num"), cond),
    ]
    if not in_loop:
        branches.append(st.tuples(st.just("toolsum"), numbers(depth - 1, in_loop=True)))
    return st.one_of(*branches)


def conditions(depth: int, in_loop: bool = False) -> st.SearchStrategy:
    sub = numbers(depth, in_loop)
    compare = st.tuples(st.just("cmp"), st.sampled_from(list(COMPARE)), sub, sub)
    if depth == 0:
        return compare
    inner = conditions(depth - 1, in_loop)
    return st.one_of(compare, st.tuples(st.sampled_from(["and", "or"]), inner, inner),
                     st.tuples(st.just("not"), inner))


def text(node: tuple) -> str:
    """The tree as reward-language text."""
    kind = node[0]
    if kind == "feat":
        return node[1]
    if kind == "const":
        return f"({node[1]})"
    if kind == "P":
        return f"P.{node[1]}"
    if kind == "G":
        return "G"
    if kind == "calls":
        return f"calls['{node[1]}']"
    if kind == "loop_calls":
        return "calls[t]"
    if kind == "loop_P":
        return "P.tools[t]"
    if kind in ("+", "-", "*"):
        return f"({text(node[1])} {kind} {text(node[2])})"
    if kind in ("emin", "emax"):
        return f"{kind[1:]}({text(node[1])}, {text(node[2])})"
    if kind == "neg":
        return f"(-{text(node[1])})"
    if kind == "abs":
        return f"abs({text(node[1])})"
    if kind == "where":
        return f"where({text(node[1])}, {text(node[2])}, {text(node[3])})"
    if kind == "group":
        return f"{node[1]}({text(node[2])})"
    if kind == "count":
        return f"count({text(node[1])})"
    if kind == "num":
        return f"(2 * ({text(node[1])}))"
    if kind == "toolsum":
        return f"sum({text(node[1])} for t in tools)"
    if kind == "cmp":
        return f"({text(node[2])} {node[1]} {text(node[3])})"
    if kind in ("and", "or"):
        return f"({text(node[1])} {kind} {text(node[2])})"
    if kind == "not":
        return f"(not {text(node[1])})"
    raise AssertionError(kind)


# --- the independent evaluator -------------------------------------------------------------------

def average_ranks(x: list[float]) -> list[float]:
    """1-based ranks, ties sharing the mean of their positions (sorted, then runs of equal values)."""
    order = sorted(range(len(x)), key=lambda i: x[i])
    ranks = [0.0] * len(x)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and x[order[j + 1]] == x[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


class Evaluator:
    """Evaluates a tree on one group: inputs are Python lists of G floats, P a dict."""

    def __init__(self, group: dict[str, list[float]], P: dict, tools: list[str]):
        self.group, self.P, self.tools, self.G = group, P, tools, len(group["outcome"])
        self.closest = math.inf  # how near any decision came to flipping

    def near(self, gap: float) -> None:
        if gap != 0:
            self.closest = min(self.closest, abs(gap))

    def num(self, node: tuple, tool: str | None = None) -> np.ndarray:
        kind, G = node[0], self.G
        if kind == "feat":
            return np.array(self.group[node[1]], dtype=float)
        if kind == "const":
            return np.full(G, float(node[1]))
        if kind == "P":
            return np.full(G, float(self.P[node[1]]))
        if kind == "G":
            return np.full(G, float(G))
        if kind == "calls":
            return np.array(self.group["calls"].get(node[1], [0.0] * G), dtype=float)
        if kind == "loop_calls":
            return self.num(("calls", tool))
        if kind == "loop_P":
            return np.full(G, float(self.P["tools"].get(tool, 0.0)))
        if kind in ("+", "-", "*", "emin", "emax"):
            a, b = self.num(node[1], tool), self.num(node[2], tool)
            return {"+": a + b, "-": a - b, "*": a * b, "emin": np.minimum(a, b), "emax": np.maximum(a, b)}[kind]
        if kind == "neg":
            return -self.num(node[1], tool)
        if kind == "abs":
            return np.abs(self.num(node[1], tool))
        if kind == "where":
            c = self.cond(node[1], tool)
            return np.where(c, self.num(node[2], tool), self.num(node[3], tool))
        if kind == "group":
            return self.group_op(node[1], [float(v) for v in self.num(node[2], tool)])
        if kind == "count":
            return np.full(G, float(sum(bool(v) for v in self.cond(node[1], tool))))
        if kind == "num":
            return 2.0 * self.cond(node[1], tool).astype(float)
        if kind == "toolsum":
            return sum((self.num(node[1], t) for t in self.tools), np.zeros(G))
        raise AssertionError(kind)

    def group_op(self, op: str, x: list[float]) -> np.ndarray:
        G, lo, hi = len(x), min(x), max(x)
        spread = hi - lo
        self.near(spread)
        if op == "mean":
            return np.full(G, sum(x) / G)
        if op in ("max", "min", "sum"):
            return np.full(G, {"max": hi, "min": lo, "sum": math.fsum(x)}[op])
        if spread == 0:
            return np.zeros(G)  # minmax, zscore, rank of a group that does not discriminate
        if op == "minmax":
            return np.array([(v - lo) / spread for v in x])
        if op == "zscore":
            mu = sum(x) / G
            sd = math.sqrt(sum((v - mu) ** 2 for v in x) / G)
            return np.array([(v - mu) / sd for v in x])
        for i in range(G):  # rank: a tie closer than rounding is a decision too
            for j in range(i):
                self.near(x[i] - x[j])
        r = average_ranks(x)
        return np.array([(v - min(r)) / (max(r) - min(r)) for v in r])

    def cond(self, node: tuple, tool: str | None = None) -> np.ndarray:
        kind = node[0]
        if kind == "cmp":
            a, b = self.num(node[2], tool), self.num(node[3], tool)
            for gap in a - b:
                self.near(gap)
            return COMPARE[node[1]](a, b)
        if kind == "and":
            return self.cond(node[1], tool) & self.cond(node[2], tool)
        if kind == "or":
            return self.cond(node[1], tool) | self.cond(node[2], tool)
        if kind == "not":
            return ~self.cond(node[1], tool)
        raise AssertionError(kind)


# --- groups --------------------------------------------------------------------------------------

@st.composite
def batches(draw):
    n, g = draw(st.integers(1, 3)), draw(st.integers(1, 6))
    small = st.integers(0, 4).map(float)

    def column():
        return draw(st.lists(small, min_size=g, max_size=g))

    groups = []
    for _ in range(n):
        group = {f: column() for f in FEATURES}
        group["calls"] = {t: column() for t in TOOLS if draw(st.booleans())}
        groups.append(group)
    weight = st.integers(-2, 2).map(float)
    prefs = [{"outcome": draw(weight), "cost": draw(weight), "latency": draw(weight),
              "tools": {t: draw(weight) for t in TOOLS if draw(st.booleans())}} for _ in range(n)]
    return groups, prefs


def as_values(groups: list[dict]) -> dict[str, np.ndarray]:
    values = {f: np.array([grp[f] for grp in groups]) for f in FEATURES}
    g = values["outcome"].shape[1]
    for t in TOOLS:
        values[f"calls[{t}]"] = np.array([grp["calls"].get(t, [0.0] * g) for grp in groups])
    return values


def independent(tree: tuple, groups: list[dict], prefs: list[dict]) -> tuple[np.ndarray, float]:
    rows, closest = [], math.inf
    for grp, P in zip(groups, prefs):
        ev = Evaluator(grp, P, TOOLS)
        rows.append(ev.num(tree))
        closest = min(closest, ev.closest)
    return np.stack(rows), closest


def as_rollouts(group: dict) -> list[dict]:
    g = len(group["outcome"])
    return [{**{f: group[f][i] for f in FEATURES}, "calls": {t: c[i] for t, c in group["calls"].items()}}
            for i in range(g)]


SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@settings(max_examples=300, **SETTINGS)
@given(numbers(3), batches())
def test_compiled_equals_independent_evaluator(tree, case):
    groups, prefs = case
    want, closest = independent(tree, groups, prefs)
    assume(closest > TIE)
    reward = Reward(text(tree), tools=TOOLS)
    got = reward.batch(as_values(groups), [Preference.model_validate(p) for p in prefs])
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


@settings(max_examples=40, **SETTINGS)
@given(numbers(2), batches())
def test_reference_and_expression_equal_independent_evaluator(tree, case):
    """The slow path (the sympy expression row by row) agrees too, on the first group."""
    groups, prefs = case
    want, closest = independent(tree, groups[:1], prefs[:1])
    assume(closest > TIE)
    reward = Reward(text(tree), tools=TOOLS)
    np.testing.assert_allclose(reward.reference(as_rollouts(groups[0]), P=prefs[0]), want[0],
                               rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("tree", [
    # The example: mean over a where, inside a where's condition.
    ("where", ("cmp", ">", ("group", "mean", ("where", ("cmp", ">", ("feat", "cost"), ("const", 1)),
                                              ("const", 1), ("const", 0))), ("const", 0)), ("const", 1), ("const", 0)),
    ("group", "minmax", ("where", ("cmp", ">=", ("feat", "outcome"), ("const", 1)), ("feat", "cost"), ("const", 0))),
    ("group", "rank", ("num", ("and", ("cmp", ">", ("feat", "cost"), ("const", 1)),
                               ("cmp", "<", ("group", "max", ("feat", "latency")), ("const", 4))))),
    ("toolsum", ("*", ("loop_P",), ("group", "zscore", ("where", ("cmp", ">", ("loop_calls",), ("const", 0)),
                                                      ("feat", "cost"), ("loop_calls",))))),
])
def test_nested_conditionals_by_hand_group(tree):
    group = {"outcome": [1.0, 0.0, 1.0, 1.0], "cost": [1.0, 3.0, 2.0, 0.0], "latency": [2.0, 1.0, 3.0, 3.0],
             "turns": [1.0, 2.0, 1.0, 1.0], "calls": {"a": [0.0, 2.0, 1.0, 1.0], "b": [3.0, 0.0, 0.0, 1.0]}}
    P = {"outcome": 1.0, "cost": 0.5, "latency": 0.5, "tools": {"a": 1.0, "b": -2.0}}
    want, _ = independent(tree, [group], [P])
    reward = Reward(text(tree), tools=TOOLS)
    np.testing.assert_allclose(reward(as_rollouts(group), P=P), want[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(reward.reference(as_rollouts(group), P=P), want[0], rtol=1e-12, atol=1e-12)
