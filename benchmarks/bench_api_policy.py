"""An API policy keeps many episodes in flight: 100 tasks x 8 rollouts against a local OpenAI-compatible
server that answers every request after a fixed delay should take about requests x delay / in-flight,
i.e. be limited by the server, not by orchlib.

    .venv/bin/python benchmarks/bench_api_policy.py [--delay 0.05] [--tasks 100] [--group 8]

Each episode is two requests (a tool call, then the answer after the tool's result) and one tool call.
The server runs in its own process (asyncio, keep-alive, no limit of its own), so its work does not
share orchlib's interpreter. Prints, per number of episodes in flight: the wall time; the server-bound
time (the episodes run in ceil(episodes / in flight) waves of two requests in a row, which is
requests x delay / in flight when the waves are full); their ratio; episodes per second; and
orchlib's own CPU time per request (when that times the requests in flight exceeds the delay, the
CPU is the bound, not the server). Then the speed-up of 64 in flight over 1 (the 1-in-flight row
runs a tenth of the tasks: all of them would take 80 s). Exits 1 if the speed-up is under 30x or the
64-in-flight ratio over 1.5.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing
import os
import sys
import time

from orchlib.env import Environment
from orchlib.engines.openai import OpenAIPolicy
from orchlib.evaluate import format_table
from orchlib.rollout import RolloutConfig, rollout
from orchlib.tasks import Task
from orchlib.tools import Toolbox
from orchlib.tools.function import FunctionTool

SPEEDUP_TARGET, RATIO_TARGET = 30.0, 1.5


async def add(a: int, b: int) -> str:
    """Add two integers.

    Args:
        a: first addend
        b: second addend
    """
    return str(a + b)


def _reply(body: dict) -> dict:
    """Turn 0: call `add`; turn 1: answer."""
    turn = sum(m["role"] == "assistant" for m in body["messages"])
    msg: dict = {"role": "assistant", "content": "100"}
    if turn == 0:
        msg = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "add", "arguments": '{"a": 60, "b": 40}'}}]}
    return {"choices": [{"index": 0, "message": msg, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 200, "completion_tokens": 20}}


def serve(port_out, delay: float) -> None:
    """A minimal HTTP/1.1 server: every POST is answered after `delay` seconds."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                body = json.loads(await reader.readexactly(length))
                await asyncio.sleep(delay)
                payload = json.dumps(_reply(body)).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(payload)).encode() + b"\r\n\r\n" + payload)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
        port_out.put(server.sockets[0].getsockname()[1])
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def run(url: str, tasks: list[Task], box: Toolbox, group: int, in_flight: int) -> tuple[float, int, float]:
    """(wall seconds, requests, orchlib's CPU seconds: this process only, the server runs in another)."""
    policy = OpenAIPolicy(base_url=url, model="bench", max_in_flight=in_flight)
    t0, c0 = time.perf_counter(), time.process_time()
    out = rollout(Environment(train=tasks, tools=box), policy, config=RolloutConfig(), group_size=group)
    took, cpu = time.perf_counter() - t0, time.process_time() - c0
    bad = [t for t in out if t.errors or t.outcome != 1.0]
    if bad:
        raise RuntimeError(f"{len(bad)} episodes went wrong, e.g. {bad[0].errors} {bad[0].final_answer!r}")
    return took, sum(t.meta["requests"] for t in out), cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--delay", type=float, default=0.05, help="the server's seconds per request")
    ap.add_argument("--tasks", type=int, default=100)
    ap.add_argument("--group", type=int, default=8, help="rollouts per task")
    args = ap.parse_args()
    ports: multiprocessing.Queue = multiprocessing.Queue()
    server = multiprocessing.Process(target=serve, args=(ports, args.delay), daemon=True)
    server.start()
    try:
        url = f"http://127.0.0.1:{ports.get(timeout=30)}/v1"
        box = Toolbox([FunctionTool.from_function(add)])
        tasks = [Task(id=f"t{i}", prompt=f"What is 60+40? ({i})", answer="100", checker="numeric")
                 for i in range(args.tasks)]
        run(url, tasks[:2], box, 2, 4)  # warm-up: imports, first connections
        rows, eps = [], {}
        for in_flight, n in ((1, max(1, args.tasks // 10)), (8, args.tasks), (64, args.tasks), (256, args.tasks)):
            took, requests, cpu = run(url, tasks[:n], box, args.group, in_flight)
            # Server-bound: every episode is the same requests in a row, at most `in_flight` at once,
            # so the episodes run in ceil(episodes / in_flight) waves of (requests per episode) x delay.
            episodes = n * args.group
            ideal = math.ceil(episodes / in_flight) * (requests / episodes) * args.delay
            eps[in_flight] = n * args.group / took
            rows.append([in_flight, n * args.group, requests, f"{took:.2f}", f"{ideal:.2f}", f"{took / ideal:.2f}",
                         f"{eps[in_flight]:.1f}", f"{cpu / requests * 1000:.2f}"])
            if in_flight == 64:
                ratio64 = took / ideal
    finally:
        server.terminate()
    load = os.getloadavg()[0]
    print(f"server: {args.delay * 1000:g} ms per request, no limit of its own; {os.cpu_count()} CPUs, "
          f"load average {load:.1f} at the end (other work on the machine stretches the wall times)\n")
    print(format_table(["in flight", "episodes", "requests", "wall s", "ideal s", "wall/ideal", "episodes/s",
                        "orchlib CPU ms/request"], rows))
    speedup = eps[64] / eps[1]
    print(f"\nspeed-up of 64 in flight over 1: {speedup:.1f}x (target >= {SPEEDUP_TARGET:g}x); "
          f"64 in flight: {ratio64:.2f}x the server-bound time (target <= {RATIO_TARGET:g})")
    return 0 if speedup >= SPEEDUP_TARGET and ratio64 <= RATIO_TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
