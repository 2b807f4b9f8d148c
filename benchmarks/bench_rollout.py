""".venv/bin/python benchmarks/bench_rollout.py [--sizes tiny small] [--batch 32] [--tokens 24]

Tokens generated per second by a 3-turn rollout of 32 trajectories vs one plain batched `generate`
of the same number of new tokens on the same engine (target: rollout ≥ 0.8 of plain).

So that every trajectory really makes 3 turns with a randomly initialised model, the sampler is
teacher-forced: every step runs the real model and the real sampling (full compute, KV cache, the
same batch), then emits the next id of a scripted tool call instead of the drawn one. Everything else
is the real rollout: prompts, parsing, concurrent tool calls, observation segments, and the engine's
reuse of each conversation's keys/values from one turn to the next. `--no-reuse` turns that reuse
off, to show what it buys.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

warnings.filterwarnings("ignore")


def forced_engine(model, tok, text, **kw):
    """A TransformersEngine whose sampler emits `text` (+ eos) step by step after doing the real work."""
    import torch

    from orchlib.engines import TransformersEngine

    class ForcedEngine(TransformersEngine):
        script = tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
        new_tokens = 0

        def generate(self, prompts, params, stop_ids=()):
            self._step = 0
            out = super().generate(prompts, params.model_copy(update={"max_new_tokens": len(self.script)}), [])
            self.new_tokens += out.new_tokens
            for g in out.outputs:
                g.finish_reason = "stop"
            return out

        def _sample(self, logits, params):
            _, logprob = super()._sample(logits, params)  # the real sampling cost, then the scripted id
            token = torch.full_like(logprob, self.script[self._step], dtype=torch.long)
            self._step += 1
            return token, logprob

    return ForcedEngine(model, tok, seed=0, **kw)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", nargs="+", default=["tiny", "small"])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-reuse", action="store_true", help="turn the engine's prefix cache off")
    args = ap.parse_args()

    from orchlib.chat import render_call
    from orchlib.engines import SamplingParams, TransformersEngine
    from orchlib.env import Environment
    from orchlib.models import build_default_policy
    from orchlib.prompting import render_prompt, tool_schemas
    from orchlib.rollout import RolloutConfig, rollout
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
        kw = {"prefix_cache_mb": 0} if args.no_reuse else {}
        engine = TransformersEngine(model, tok, seed=0, **kw)
        ro_rates, plain_rates = [], []
        for _ in range(args.repeats):
            forced = forced_engine(model, tok, call, **kw)
            t0 = time.perf_counter()
            trajs = rollout(Environment(train=tasks, tools=toolbox), forced, config=cfg, group_size=1, seed=0)
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
          f"(median of {args.repeats}; prefix reuse {'off' if args.no_reuse else 'on'})")
    print(f"{'model':<7}{'new tokens':>11}{'rollout tok/s':>15}{'generate tok/s':>16}{'ratio':>7}  target >= 0.8")
    for size, n, ro, plain, r in rows:
        print(f"{size:<7}{n:>11}{ro:>15.0f}{plain:>16.0f}{r:>7.2f}  {'ok' if r >= 0.8 else 'MISSED'}")


if __name__ == "__main__":
    main()
