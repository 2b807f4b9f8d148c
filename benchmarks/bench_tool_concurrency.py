"""One turn's tool calls run concurrently: 16 calls to a tool that sleeps 100 ms should take about as
long as one call (target: at most 1.3x), for a sync function (run in the tool thread pool) and an
async one.

    .venv/bin/python benchmarks/bench_tool_concurrency.py

Prints a table (median of 5 repetitions after a warm-up) and exits 1 if a ratio misses the target.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

from orchlib.tools import FunctionTool, Toolbox
from orchlib.trajectory import ToolCall

SLEEP_S = 0.1
CALLS = 16
REPEATS = 5
TARGET = 1.3


def nap(seconds: float) -> str:
    """Sleep, blocking its thread.

    Args:
        seconds: how long
    """
    time.sleep(seconds)
    return "done"


async def async_nap(seconds: float) -> str:
    """Sleep without blocking.

    Args:
        seconds: how long
    """
    await asyncio.sleep(seconds)
    return "done"


async def wall(box: Toolbox, name: str, n: int) -> float:
    calls = [ToolCall(name=name, arguments={"seconds": SLEEP_S})] * n
    t0 = time.perf_counter()
    obs = await box.call_many(calls, max_parallel=CALLS)
    took = time.perf_counter() - t0
    bad = [o.error for o in obs if o.error]
    if bad:
        raise RuntimeError(f"{name}: {bad[0]}")
    return took


async def main() -> int:
    box = Toolbox([FunctionTool.from_function(nap), FunctionTool.from_function(async_nap)])
    rows, ok = [], True
    for name in ("nap", "async_nap"):
        await wall(box, name, CALLS)  # warm-up: the thread pool starts its threads
        one = statistics.median([await wall(box, name, 1) for _ in range(REPEATS)])
        many = statistics.median([await wall(box, name, CALLS) for _ in range(REPEATS)])
        ratio = many / one
        ok &= ratio <= TARGET
        rows.append((f"{name} ({'thread' if name == 'nap' else 'async'})", one, many, ratio))
    header = f"{'tool (100 ms sleep)':<22} {'1 call (s)':>10} {f'{CALLS} calls (s)':>13} {'ratio':>7}"
    print(f"{header}  target <= {TARGET}x")
    for label, one, many, ratio in rows:
        print(f"{label:<22} {one:>10.3f} {many:>13.3f} {ratio:>6.2f}x  {'ok' if ratio <= TARGET else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
