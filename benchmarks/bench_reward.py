"""Run: .venv/bin/python benchmarks/bench_reward.py [--trajectories 100000] [--group 8] [--tools 8]

How fast is the compiled ToolOrchestra reward (rewards/toolorchestra.yaml)? Over 100 000 synthetic
trajectories in groups of 8 with three tools, it times, in one run on the same data:

- compiled     `Reward.batch(values, P)`: the lambdified numpy program, one P for all groups;
- compiled, P per group   the same with 12 500 distinct Preference objects (tasks with their own P);
- torch        `Reward.batch(..., backend="torch")` on float64 CPU tensors;
- numpy        the same formula written by hand in numpy (the target: compiled within 2x of it);
- sympy rows   the sympy expression evaluated row by row with subs/evalf (`Reward.reference`) on a
               subsample of groups, extrapolated linearly to all of them (the target: compiled at
               least 20x faster).

Then a per-tool term written once for every tool, `sum(P.tools[t] * minmax(calls[t]) for t in tools)`,
over the same 100 000 trajectories with 8 tools:

- compiled     the sum over tools (one inner function called per tool; see orchlib/reward/compile.py);
- spelled out  the same term written tool by tool, `P.tools['tool0'] * minmax(calls['tool0']) + ...`;
- numpy, loop  hand-written numpy, one min-max per tool, accumulated (the target: compiled within 2x);
- numpy, stacked   hand-written numpy on the (k, n, G) stack of all tools at once.

Times are the best of several repeats; compiling happens once before timing and is reported apart.
All paths are checked to give the same rewards first. Exits 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from orchlib.reward import Reward
from orchlib.tasks import Preference

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ("search", "gpt-5", "python")


def paper_numpy(v: dict[str, np.ndarray], pref: Preference) -> np.ndarray:
    """ToolOrchestra's R = M_norm · P if outcome == 1 else 0, written directly (arrays (n, G))."""
    def mm(x):
        lo, hi = x.min(-1, keepdims=True), x.max(-1, keepdims=True)
        spread = hi - lo
        return np.divide(x - lo, spread, out=np.zeros_like(x), where=spread > 0)

    total = pref.outcome * mm(v["outcome"]) + pref.cost * mm(-v["cost"]) + pref.latency * mm(-v["latency"])
    for tool in TOOLS:
        total += pref.tools.get(tool, 0.0) * mm(v[f"calls[{tool}]"])
    return np.where(v["outcome"] >= 1, total, 0.0)


def synthetic(n_groups: int, g: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (n_groups, g)
    values = {"outcome": (rng.random(shape) < 0.6).astype(np.float64),
              "cost": np.round(rng.lognormal(-4, 1, shape), 4),
              "latency": np.round(rng.gamma(2.0, 3.0, shape), 2)}
    for tool in TOOLS:
        values[f"calls[{tool}]"] = rng.poisson(1.0, shape).astype(np.float64)
    return values


def mm(x: np.ndarray) -> np.ndarray:
    lo, hi = x.min(-1, keepdims=True), x.max(-1, keepdims=True)
    spread = hi - lo
    return np.divide(x - lo, spread, out=np.zeros_like(x), where=spread > 0)


def per_tool_loop(v: dict[str, np.ndarray], weights: dict[str, float]) -> np.ndarray:
    total = np.zeros_like(next(iter(v.values())))
    for tool, w in weights.items():
        total += w * mm(v[f"calls[{tool}]"])
    return total


def per_tool_stacked(v: dict[str, np.ndarray], weights: dict[str, float]) -> np.ndarray:
    stack = np.stack([v[f"calls[{tool}]"] for tool in weights])
    w = np.array(list(weights.values()))[:, None, None]
    return (w * mm(stack)).sum(axis=0)


def per_tool_table(n_groups: int, g: int, n_tools: int, repeats: int) -> bool:
    """Time a per-tool min-max term over n_tools tools; True if compiled is within 2x of numpy."""
    tools = [f"tool{i}" for i in range(n_tools)]
    rng = np.random.default_rng(1)
    values = {f"calls[{t}]": rng.poisson(1.0, (n_groups, g)).astype(np.float64) for t in tools}
    weights = {t: float(w) for t, w in zip(tools, rng.uniform(-1, 1, n_tools))}
    pref = Preference(outcome=1.0, tools=weights)
    start = time.perf_counter()
    once = Reward("sum(P.tools[t] * minmax(calls[t]) for t in tools)", tools=tools)
    once.program(tools)
    compile_s = time.perf_counter() - start
    spelled = Reward(" + ".join(f"P.tools['{t}'] * minmax(calls['{t}'])" for t in tools))
    spelled.program(())

    want = per_tool_loop(values, weights)
    for got in (once.batch(values, pref), spelled.batch(values, pref), per_tool_stacked(values, weights)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    rows = [("compiled: sum(... for t in tools)", best_of(lambda: once.batch(values, pref), repeats)),
            ("compiled: spelled out tool by tool", best_of(lambda: spelled.batch(values, pref), repeats)),
            ("hand-written numpy, loop over tools", best_of(lambda: per_tool_loop(values, weights), repeats)),
            ("hand-written numpy, (k, n, G) stack", best_of(lambda: per_tool_stacked(values, weights), repeats))]
    numpy_s = min(rows[2][1], rows[3][1])
    compiled_s = rows[0][1]
    print(f"\nPer-tool min-max, {n_groups * g:,} trajectories in groups of {g}, {n_tools} tools; "
          f"best of {repeats}; compile once: {compile_s * 1e3:.0f} ms")
    print(f"{'path':<58} {'time':>12} {'vs numpy':>9} {'vs compiled':>12}")
    for label, secs in rows:
        print(f"{label:<58} {secs * 1e3:>9.2f} ms {secs / numpy_s:>8.2f}x {secs / compiled_s:>11.2f}x")
    if compiled_s > 2 * numpy_s:
        print(f"MISSED: the per-tool sum is {compiled_s / numpy_s:.2f}x the faster hand-written numpy (target <= 2x)")
        return False
    return True


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trajectories", type=int, default=100_000)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--rowwise-groups", type=int, default=40, help="groups evaluated by sympy row by row")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--tools", type=int, default=8, help="tools in the per-tool min-max table")
    args = ap.parse_args()

    n_groups = args.trajectories // args.group
    values = synthetic(n_groups, args.group)
    pref = Preference(outcome=1.0, cost=0.7, latency=0.3, tools={"search": 0.1, "gpt-5": -0.2})
    # One Preference object per group, as when every task carries its own P (the worst case).
    prefs = [pref.model_copy() for _ in range(n_groups)]

    start = time.perf_counter()
    reward = Reward.load(ROOT / "rewards" / "toolorchestra.yaml", tools=TOOLS)
    reward.program(TOOLS)
    compile_s = time.perf_counter() - start

    import torch

    tensors = {k: torch.as_tensor(v) for k, v in values.items()}
    want = paper_numpy(values, pref)
    np.testing.assert_allclose(reward.batch(values, pref), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(reward.batch(values, prefs), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(reward.batch(tensors, pref, backend="torch").numpy(), want, rtol=1e-12, atol=1e-12)

    k = min(args.rowwise_groups, n_groups)
    groups = [[{"outcome": values["outcome"][i, j], "cost": values["cost"][i, j],
                "latency": values["latency"][i, j],
                "calls": {t: values[f"calls[{t}]"][i, j] for t in TOOLS}} for j in range(args.group)]
              for i in range(k)]
    start = time.perf_counter()
    slow = np.stack([reward.reference(grp, P=pref) for grp in groups])
    rowwise_s = (time.perf_counter() - start) * n_groups / k
    np.testing.assert_allclose(slow, want[:k], rtol=1e-9, atol=1e-12)

    numpy_s = best_of(lambda: paper_numpy(values, pref), args.repeats)
    compiled_s = best_of(lambda: reward.batch(values, pref), args.repeats)
    per_group_s = best_of(lambda: reward.batch(values, prefs), args.repeats)
    torch_s = best_of(lambda: reward.batch(tensors, pref, backend="torch"), args.repeats)

    rows = [("compiled (numpy), one P", compiled_s), ("compiled (numpy), P per group", per_group_s),
            ("compiled (torch, CPU), one P", torch_s), ("hand-written numpy", numpy_s),
            (f"sympy row by row (subs/evalf; {k} groups, extrapolated)", rowwise_s)]
    print(f"ToolOrchestra reward, {n_groups * args.group:,} trajectories in groups of {args.group}, "
          f"{len(TOOLS)} tools; best of {args.repeats}; compile once: {compile_s * 1e3:.0f} ms")
    print(f"{'path':<58} {'time':>12} {'vs numpy':>9} {'vs compiled':>12}")
    for label, secs in rows:
        print(f"{label:<58} {secs * 1e3:>9.2f} ms {secs / numpy_s:>8.2f}x {secs / compiled_s:>11.1f}x")

    ok = True
    if compiled_s > 2 * numpy_s:
        print(f"MISSED: compiled is {compiled_s / numpy_s:.2f}x the hand-written numpy (target <= 2x)")
        ok = False
    if rowwise_s < 20 * compiled_s:
        print(f"MISSED: compiled is only {rowwise_s / compiled_s:.1f}x faster than row by row (target >= 20x)")
        ok = False
    ok = per_tool_table(n_groups, args.group, args.tools, args.repeats) and ok
    print("targets met: compiled <= 2x numpy (both tables), >= 20x faster than sympy row by row" if ok
          else "targets missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
