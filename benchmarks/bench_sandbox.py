"""Run: .venv/bin/python benchmarks/bench_sandbox.py [--calls 30]

What bubblewrap costs per python-tool call, next to the Python guards alone, measured in one run with
the calls interleaved (so both see the same machine load). Three programs: an expression, numpy work,
and 300 small files written and read back (the audit hook checks every open). Prints the median and
the 90th percentile wall time of a call (process start to exit, working folder made and removed),
and the ratio of medians.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

from orchlib.tools.python import PythonSettings, bwrap_works, run_code

PROGRAMS = {
    "1 + 1": "1 + 1",
    "numpy": "import numpy as np\nx = np.arange(90_000.0).reshape(300, 300) / 9e4\nfloat(np.linalg.norm(x @ x))",
    "300 files": "for i in range(300):\n    open(f'f{i}', 'w').write(str(i))\n"
                 "sum(int(open(f'f{i}').read()) for i in range(300))",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args(argv)
    if not bwrap_works():
        print("bubblewrap is not installed or cannot make namespaces here: nothing to compare")
        return 1
    settings = {iso: PythonSettings(isolation=iso) for iso in ("python", "bwrap")}
    print(f"{'program':<11} {'python guards: median':>22} {'p90':>7} {'bwrap: median':>14} {'p90':>7} {'ratio':>6}")
    for name, code in PROGRAMS.items():
        times: dict[str, list[float]] = {iso: [] for iso in settings}
        for _ in range(args.calls):
            for iso, s in settings.items():
                t0 = time.perf_counter()
                obs = asyncio.run(run_code(code, s))
                times[iso].append(time.perf_counter() - t0)
                assert obs.error is None, obs.content
        med = {iso: statistics.median(t) for iso, t in times.items()}
        p90 = {iso: statistics.quantiles(t, n=10)[-1] for iso, t in times.items()}
        print(f"{name:<11} {med['python']:>20.3f} s {p90['python']:>5.3f} s {med['bwrap']:>12.3f} s "
              f"{p90['bwrap']:>5.3f} s {med['bwrap'] / med['python']:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
