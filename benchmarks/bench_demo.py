"""The demo's learning bars, seed by seed: the full `orchlib demo` per seed, one table.

    .venv/bin/python benchmarks/bench_demo.py --seeds 0 1 2 3 4          # ~5 min a seed on 2 cores
    .venv/bin/python benchmarks/bench_demo.py --seeds 0 --steps 20       # a quicker look
    .venv/bin/python benchmarks/bench_demo.py --seeds 0 1 2 3 4 --parallel 2  # bars only: shared cores
    .venv/bin/python benchmarks/bench_demo.py --seeds 0 1 2 3 4 --set warm_start.golden.max_steps=200  # a variant
    .venv/bin/python benchmarks/bench_demo.py --seeds 0 1 2 3 4 --set split_seed=null  # each seed its own split

A table per seed (the bars' numbers, and 1 - cos of the GSM8K choice's gradients under the two
profiles after the warm start and after RL), then a table per seed and profile (the share of calls to
each backend, accuracy, $ and seconds per task, before and after RL). The last lines hold the bars
across seeds (each PASS or FAIL): the format before RL, GSM8K controllability on every seed, each margin
above its seed-to-seed spread, 1 - cos >= 1e-2 after the warm start on every seed, the anchored reward
rising on every seed, and the wall time of every seed. It exits 1 when one fails. With --parallel the seeds
share the cores, so their wall times say nothing.

What a training run learns turns on float rounding, which differs from one CPU to the next, so these
bars are measured here (on several seeds, with their spread) and not asserted by the test suite; the
suite runs a shortened demo that checks the machinery. Each seed runs in its own process, as
`orchlib demo --seed S` would, and writes into --out/seed-S/. The table's margins are the orchestrator's
lead over the baseline named in each bar; the last rows are their mean and spread over the seeds.
"""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parents[1]


def run_seed(seed: int, out: Path, steps: int | None, settings: dict | None = None) -> dict:
    """`orchlib demo --seed S` in its own process; `settings` are DemoConfig fields."""
    cmd = [sys.executable, "-m", "orchlib.cli", "demo", "--seed", str(seed), "--out", str(out), "--quiet"]
    if steps is not None:
        cmd += ["--steps", str(steps)]
    if settings:  # a DemoConfig file: the demo's flags do not name every field
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "bench_config.yaml", "w", encoding="utf-8") as f:
            YAML(typ="safe").dump(dict(sorted(settings.items())), f)
        cmd += ["--config", str(out / "bench_config.yaml")]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"seed {seed}: `{' '.join(cmd)}` failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    m = json.loads((out / "metrics.json").read_text())
    m["bench_wall_s"] = time.perf_counter() - start
    return m


def row(m: dict) -> dict:
    """The numbers each bar stands for, recomputed from metrics.json."""
    across, pol = m["reward_across"], m["policies"]
    by_cat = m["controllability_by_category"]["orchestrator"]
    return {
        "seed": m["seed"],
        "bars": f"{sum(m['checks'].values())}/{len(m['checks'])}",
        "ctrl": m["controllability_points"],
        **{f"ctrl {c}": v for c, v in sorted(by_cat.items())},
        "thrifty margin": across["orchestrator"]["thrifty"] - across["strongest"]["thrifty"],
        "accuracy margin": pol["orchestrator"]["all"]["accuracy"] - pol["cheapest"]["all"]["accuracy"],
        "reward first10": m["reward_first10"], "reward last10": m["reward_last10"],
        "well-formed %": 100 * m["format"]["well_formed_turns"],
        "copied %": 100 * m["format"]["arithmetic_copy_exact"],
        # the mechanism: how far apart the GSM8K choice's gradients under the two profiles point
        "1-cos warm": 1 - m["format"]["profile_cosine"], "1-cos RL": 1 - m["profile_cosine"],
        **{f"{k} s": v for k, v in m["wall_s"].items()},
        "total s": m["wall_total_s"],
    }


def profile_rows(m: dict) -> list[dict]:
    """Per profile, before and after RL: the share of calls to each backend, accuracy, $ and seconds per task
    (the demo's world names each tool by its backend, so a name is a backend here)."""
    out = []
    for when, policy in (("before RL", "before RL"), ("after RL", "orchestrator")):
        for profile, shares in m["backend_share"][when].items():
            p = m["policies"][policy][profile]
            out.append({"seed": m["seed"], "policy": when, "profile": profile,
                        **{f"calls {b}": v for b, v in sorted(shares.items())},
                        "accuracy": p["accuracy"], "$ / task": p["cost_usd"], "s / task": p["latency_s"]})
    return out


def profile_table(runs: list[dict]) -> str:
    """`profile_rows` of every seed's metrics, one table (a backend one seed never called: 0 there)."""
    rows = [r for m in runs for r in profile_rows(m)]
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return _grid(keys, [[_fmt(r.get(k, 0.0 if k.startswith("calls ") else None)) for k in keys] for r in rows])


def table(rows: list[dict]) -> str:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    numeric = [k for k in keys if all(isinstance(r.get(k), (int, float)) for r in rows) and k != "seed"]
    body = [[_fmt(r.get(k)) for k in keys] for r in rows]
    if len(rows) > 1:
        for name, fn in (("mean", statistics.fmean), ("spread (sd)", statistics.stdev)):
            body.append([name if k == "seed" else (_fmt(fn([r[k] for r in rows])) if k in numeric else "")
                         for k in keys])
    return _grid(keys, body)


def _grid(keys: list[str], body: list[list[str]]) -> str:
    widths = [max(len(k), *(len(b[i]) for b in body)) for i, k in enumerate(keys)]
    lines = ["  ".join(k.rjust(w) for k, w in zip(keys, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(b, widths)) for b in body]
    return "\n".join(lines)


def _fmt(v) -> str:
    if isinstance(v, float):  # small numbers (a cosine's gap, $ per task) in exponent form, not as 0.000
        return f"{v:.1e}" if 0 < abs(v) < 0.01 else f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
    return "" if v is None else str(v)


def verdict(rows: list[dict], max_seconds: float | None) -> list[tuple[str, bool, str]]:
    """(bar, passed, the numbers behind it) over every seed."""
    def spread(k: str) -> float:
        return statistics.stdev(r[k] for r in rows) if len(rows) > 1 else 0.0

    out = [
        ("well-formed turns >= 95 % before RL", min(r["well-formed %"] for r in rows) >= 95,
         f"min {min(r['well-formed %'] for r in rows):.1f}"),
        ("arithmetic copied >= 90 % before RL", min(r["copied %"] for r in rows) >= 90,
         f"min {min(r['copied %'] for r in rows):.1f}"),
        ("GSM8K controllability >= 30 points", min(r["ctrl gsm8k"] for r in rows) >= 30,
         f"min {min(r['ctrl gsm8k'] for r in rows):.1f}"),
    ]
    for k in ("thrifty margin", "accuracy margin"):
        lo, sd = min(r[k] for r in rows), spread(k)
        out.append((f"{k} > its seed-to-seed spread", lo > sd, f"min {lo:.3f}, spread (sd) {sd:.3f}"))
    lo = min(r["1-cos warm"] for r in rows)
    out.append(("1 - cos of the profiles' GSM8K choice gradients >= 1e-2 after the warm start", lo >= 1e-2,
                f"min {lo:.1e}"))
    rises = [r["reward last10"] - r["reward first10"] for r in rows]
    out.append(("anchored reward: last 10 steps > first 10", min(rises) > 0, f"min rise {min(rises):.3f}"))
    if max_seconds is not None:
        slowest = max(r["total s"] for r in rows)
        out.append((f"wall time <= {max_seconds:.0f} s per seed", slowest <= max_seconds, f"max {slowest:.0f} s"))
    return out


def parse_settings(pairs: list[str]) -> dict:
    """`--set FIELD=VALUE` pairs as one nested dict of DemoConfig settings, each value read as YAML and a
    nested field written with dots (`warm_start.golden.max_steps=200`); a field the demo does not have, or
    a value of the wrong type, is refused here, before any seed runs."""
    from orchlib.configfile import dotted, merged
    from orchlib.demo import DemoConfig

    out: dict = {}
    for pair in pairs:
        field, eq, value = pair.partition("=")
        if not eq or not field:
            raise SystemExit(f"--set {pair!r}: expected FIELD=VALUE")
        if field.split(".")[0] not in DemoConfig.model_fields:
            raise SystemExit(f"--set {pair!r}: DemoConfig has no field {field.split('.')[0]!r}")
        out = _merge_dicts(out, dotted(field, YAML(typ="safe").load(value)))
    try:
        merged(DemoConfig(), out)
    except ValueError as e:
        raise SystemExit(f"--set {' '.join(pairs)}: {e}") from None
    return out


def _merge_dicts(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge_dicts(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--steps", type=int, default=None, help="GRPO steps (default: the demo's)")
    ap.add_argument("--out", default="out/bench_demo", help="one folder per seed inside")
    ap.add_argument("--parallel", type=int, default=1, help="seeds run at once (their wall times then mean nothing)")
    ap.add_argument("--max-seconds", type=float, default=300.0, help="the wall-time bar per seed")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="a DemoConfig field for every seed, the value read as YAML (repeatable): a variant "
                         "measured side by side with the defaults, e.g. --set warm_start.golden.max_steps=200; --set "
                         "split_seed=null gives each seed its own train/test split")
    args = ap.parse_args(argv)
    settings = parse_settings(args.set)

    def one(seed: int) -> dict:
        m = run_seed(seed, Path(args.out) / f"seed-{seed}", args.steps, settings)
        fails = [k for k, ok in m["checks"].items() if not ok]
        print(f"seed {seed}: {sum(m['checks'].values())}/{len(m['checks'])} bars"
              + (f" (failed: {', '.join(fails)})" if fails else ""), f"in {m['bench_wall_s']:.0f} s", flush=True)
        return m

    with ThreadPoolExecutor(max(1, args.parallel)) as pool:
        runs = list(pool.map(one, args.seeds))
    rows = [row(m) for m in runs]
    print()
    print(table(rows))
    print()
    print(profile_table(runs))
    print()
    bars = verdict(rows, args.max_seconds if args.parallel == 1 else None)
    for name, ok, why in bars:
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {why}")
    return 0 if all(ok for _, ok, _ in bars) else 1


if __name__ == "__main__":
    sys.exit(main())
