""".venv/bin/python benchmarks/bench_rollout.py [--sizes tiny small] [--batch 32] [--tokens 24]

Tokens generated per second by a 3-turn rollout of 32 trajectories vs one plain batched `generate`
of the same number of new tokens on the same engine (target: rollout ≥ 0.8 of plain).

So that every trajectory really makes 3 turns with a randomly initialised model, the engine samples
each turn with the real model (full compute: `--tokens` new ids per row, KV cache, the same batch)
and then hands the rollout a scripted tool call of that length instead of the sampled ids. Everything
else is the real rollout: prompts, parsing, concurrent tool calls, observation segments, and the
re-prefill of each trajectory's whole context at every turn (the rollout's main extra cost).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

warnings.filterwarnings("ignore")


class ForcedEngine:
    """Real sampling compute, scripted text (see the module docstring)."""

    def __init__(self, engine, text):
        self.engine, self.tokenizer = engine, engine.tokenizer
        self.ids = engine.tokenizer.encode(text, add_special_tokens=False) + [engine.tokenizer.eos_token_id]
        self.new_tokens = 0

    def generate(self, prompts, params, stop_ids=()):
        n = len(self.ids)
        out = self.engine.generate(prompts, params.model_copy(update={"max_new_tokens": n}), stop_ids=[])
        for g in out.outputs:
            self.new_tokens += len(g.ids)
            g.ids, g.finish_reason = list(self.ids), "stop"
        return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", nargs="+", default=["tiny", "small"])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    from orchlib.chat import render_call
    from orchlib.engines import SamplingParams, TransformersEngine
    from orchlib.models import build_default_policy
    from orchlib.rollout import RolloutConfig, render_prompt, rollout, tool_schemas
    from orchlib.tasks import Task
    from orchlib.tools import Toolbox
    from orchlib.tools.function import FunctionTool
    from orchlib.trajectory import ToolCall

    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: first
            b: second
        """
        return a + b

    toolbox = Toolbox([FunctionTool.from_function(add)])
    call = render_call(ToolCall(name="add", arguments={"a": 12, "b": 30}))
    tasks = [Task(id=f"t{i}", prompt=f"What is {i} + {3 * i}? Use the tool.", answer=str(4 * i), checker="numeric")
             for i in range(args.batch)]
    cfg = RolloutConfig(max_turns=3, max_new_tokens=64, tool_schema="compact", tool_latency="declared")
    rows = []
    for size in args.sizes:
        model, tok = build_default_policy(size)
        engine = TransformersEngine(model, tok, seed=0)
        ro_rates, plain_rates = [], []
        for _ in range(args.repeats):
            forced = ForcedEngine(engine, call)
            t0 = time.perf_counter()
            trajs = rollout(tasks, toolbox, forced, cfg, group_size=1, seed=0)
            ro_s = time.perf_counter() - t0
            assert all(len(t.turns) == 3 for t in trajs)
            per_row = forced.new_tokens // len(tasks)
            prompts = [tok.encode(render_prompt(t, tool_schemas(toolbox, t, "compact"), tok, cfg),
                                  add_special_tokens=False) for t in tasks]
            t0 = time.perf_counter()
            out = engine.generate(prompts, SamplingParams(max_new_tokens=per_row, seed=0), stop_ids=[])
            plain_s = time.perf_counter() - t0
            ro_rates.append(forced.new_tokens / ro_s)
            plain_rates.append(out.new_tokens / plain_s)
        ro, plain = statistics.median(ro_rates), statistics.median(plain_rates)
        rows.append((size, forced.new_tokens, ro, plain, ro / plain))
    print(f"\n3-turn rollout of {args.batch} trajectories vs one batched generate of the same new tokens "
          f"(median of {args.repeats})")
    print(f"{'model':<7}{'new tokens':>11}{'rollout tok/s':>15}{'generate tok/s':>16}{'ratio':>7}  target >= 0.8")
    for size, n, ro, plain, r in rows:
        print(f"{size:<7}{n:>11}{ro:>15.0f}{plain:>16.0f}{r:>7.2f}  {'ok' if r >= 0.8 else 'MISSED'}")


if __name__ == "__main__":
    main()
