"""One GRPO step on a GPU, at the shapes of real orchestrators: time, MFU, rollout tokens/s, beside TRL.

    python benchmarks/bench_gpu.py [--shapes smollm2-135m qwen3-0.6b] [--prompts 8] [--group 8] [--len 128]
                                   [--steps 3] [--no-trl]

For each shape (the demo's tiny policy, SmolLM2-135M's, Qwen3-0.6B's) a model is initialised at random (the
weights do not change the work; no download is needed), in fp32 with bf16 autocast (Accelerate's
`mixed_precision="bf16"`, what orchlib's "auto" picks on a GPU), and trained by orchlib's `Trainer`: single-
turn, no tools, `--prompts` prompts × `--group` completions of exactly `--len` new ids (the random model
rarely samples its end id), no KL (beta 0), full fine-tuning with AdamW. Printed per shape (medians over
`--steps` steps after one warm-up step):

- step, rollout and update seconds (orchlib's own `time/*` metrics);
- update MFU: 6 × N × ids through the model / update seconds / the GPU's dense bf16 peak, where N counts
  the matrix weights the ids go through (every linear layer and the output layer; attention's own
  products are left out, as in the usual estimate), and "ids" are every trained row's prompt and reply;
- rollout tokens/s (new ids over rollout seconds) beside one plain batched `model.generate` of the same
  prompts and lengths, and their ratio;
- TRL's `GRPOTrainer` on the same model copy, prompts, group, lengths and precision (beta 0), where TRL
  imports: its median step seconds and orchlib / TRL.

The prompts' text is tokenized by the tiny policy's tokenizer (4096 ids); ids above it decode to nothing,
so the reward ("the reply holds an a", as in bench_grpo_vs_trl.py) varies within groups and every group
is trained on.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
import traceback
import warnings

import torch

warnings.filterwarnings("ignore")

# "tiny": the demo's own policy (orchlib.models.build_default_policy); the others are the published shapes
# of HuggingFaceTB/SmolLM2-135M-Instruct and Qwen/Qwen3-0.6B (config.json of each)
SHAPES = {
    "tiny": ("orchlib", {}),
    "smollm2-135m": ("llama", dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                   num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
                                   max_position_embeddings=8192, rope_theta=100000.0, tie_word_embeddings=True)),
    "qwen3-0.6b": ("qwen3", dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                                 num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                                 max_position_embeddings=40960, rope_theta=1000000.0, tie_word_embeddings=True)),
}
# Dense bf16 peak (TFLOP/s) by the GPU's name, from NVIDIA's data sheets (SXM parts)
PEAKS = {"H100": 989.4, "H200": 989.4, "A100": 312.0, "L40S": 362.1}


DEVICE = "cuda"


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def build(shape: str):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    kind, kw = SHAPES[shape]
    torch.manual_seed(0)
    if kind == "orchlib":
        from orchlib.models import build_default_policy

        return build_default_policy(shape)[0]
    if kind == "llama":
        return LlamaForCausalLM(LlamaConfig(**kw))
    return Qwen3ForCausalLM(Qwen3Config(**kw))


def matrix_params(model) -> int:
    """Weights of every linear layer plus the output layer (tied or not): what each id multiplies through."""
    n = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    out = model.get_output_embeddings()
    return n if isinstance(out, torch.nn.Linear) else n + out.weight.numel()


def peak_tflops() -> float | None:
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else ""
    return next((v for k, v in PEAKS.items() if k in name), None)


def orchlib_steps(model, tok, questions, group, length, steps):
    from orchlib.env import Environment
    from orchlib.reward import Reward
    from orchlib.rollout import RolloutConfig
    from orchlib.tasks import Task
    from orchlib.tools import Toolbox
    from orchlib.train import GRPOConfig, Trainer

    tasks = [Task(id=f"p{i}", prompt=q, answer="a", checker="contains", tools=[]) for i, q in enumerate(questions)]
    rc = RolloutConfig(max_turns=1, max_new_tokens=length, show_preference=False, system_prompt="",
                       tool_schema="compact")
    cfg = GRPOConfig(learning_rate=1e-5, tasks_per_step=len(tasks), group_size=group, kl_coef=0.0,
                     micro_batch_size=len(tasks) * group, rollout=rc, min_reward_spread=None,
                     mixed_precision="bf16")
    trainer = Trainer((model, tok), Environment(train=tasks, tools=Toolbox([]),
                                                reward=Reward.from_string("name: r\nreward: outcome")), cfg)
    rows = []
    for _ in range(steps + 1):
        sync()
        rep = trainer.step()
        sync()
        ids = sum(len(t.ids) for t in rep.trajectories)
        new = sum(sum(t.mask) for t in rep.trajectories)
        rows.append({**{k: rep.metrics[k] for k in ("time/step", "time/rollout", "time/update")},
                     "ids": ids, "new": new})
    return rows[1:], trainer


def plain_generate_rate(model, tok, prompts, group, length) -> float:
    """New ids per second of one batched `model.generate` over the same prompts, `group` copies each."""
    rows = [p for p in prompts for _ in range(group)]
    width = max(len(r) for r in rows)
    pad = tok.pad_token_id or 0
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=DEVICE)
    attn = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=DEVICE)
    rates = []
    for _ in range(3):
        sync()
        t0 = time.perf_counter()
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            out = model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=length, min_new_tokens=length,
                                 do_sample=True, pad_token_id=pad)
        sync()
        rates.append((out.shape[1] - width) * len(rows) / (time.perf_counter() - t0))
    return statistics.median(rates[1:])


def trl_step_seconds(model, tok, prompts, group, length, steps) -> float:
    """TRL's median step on the same settings (bench_grpo_vs_trl.py's run, on this script's device)."""
    import sys
    from pathlib import Path

    from accelerate.state import AcceleratorState

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_grpo_vs_trl import trl_step_times

    AcceleratorState._reset_state(reset_partial_state=True)
    return statistics.median(trl_step_times(model, tok, prompts, group, length, steps, 1e-5, "bf16",
                                            use_cpu=DEVICE == "cpu", sync=sync))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--len", type=int, default=128)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--no-trl", action="store_true")
    ap.add_argument("--cpu", action="store_true", help="a dry run of the script on the CPU (numbers mean nothing)")
    args = ap.parse_args()
    global DEVICE
    DEVICE = "cpu" if args.cpu else "cuda"
    if not args.cpu and not torch.cuda.is_available():
        raise SystemExit("bench_gpu.py needs a CUDA GPU (torch.cuda.is_available() is False)")
    from accelerate.state import AcceleratorState

    from orchlib.models import build_default_policy
    from orchlib.prompting import render_prompt
    from orchlib.rollout import RolloutConfig
    from orchlib.tasks import Task

    peak = peak_tflops() if DEVICE == "cuda" else None
    _, tok = build_default_policy("tiny")
    questions = [f"Question {i}: what is {i} plus {i * 7}? Think it through and answer." for i in range(args.prompts)]
    rc = RolloutConfig(show_preference=False, system_prompt="", tool_schema="compact")
    texts = [render_prompt(Task(id=str(i), prompt=q, tools=[]), [], tok, rc) for i, q in enumerate(questions)]
    prompt_ids = [tok.encode(t, add_special_tokens=False) for t in texts]
    gpu = torch.cuda.get_device_name() if DEVICE == "cuda" else "CPU (dry run)"
    print(f"{gpu}, torch {torch.__version__}, dense bf16 peak {peak} TFLOP/s; "
          f"{args.prompts} prompts x {args.group} completions x {args.len} new ids "
          f"(prompts {min(map(len, prompt_ids))}-{max(map(len, prompt_ids))} ids)", flush=True)
    results = []
    for shape in args.shapes:
        model = build(shape)
        n_matrix = matrix_params(model)
        n_all = sum(p.numel() for p in model.parameters())
        res = {"shape": shape, "params": n_all, "matrix": n_matrix}
        AcceleratorState._reset_state(reset_partial_state=True)
        if DEVICE == "cuda":
            torch.cuda.reset_peak_memory_stats()
        rows, trainer = orchlib_steps(copy.deepcopy(model), tok, questions, args.group, args.len, args.steps)
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        res.update(med)
        res["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30 if DEVICE == "cuda" else 0.0
        res["mfu"] = 6 * n_matrix * med["ids"] / med["time/update"] / (peak * 1e12) if peak else None
        res["rollout_tps"] = med["new"] / med["time/rollout"]
        policy = trainer.accelerator.unwrap_model(trainer.model)
        del trainer
        res["generate_tps"] = plain_generate_rate(policy, tok, prompt_ids, args.group, args.len)
        del policy
        torch.cuda.empty_cache()
        print(f"{shape}: {res}", flush=True)
        if not args.no_trl:
            try:
                res["trl"] = trl_step_seconds(copy.deepcopy(model).to(DEVICE), tok, texts, args.group, args.len,
                                              args.steps)
                import trl

                res["trl_version"] = trl.__version__
            except Exception as e:  # noqa: BLE001 - the table says why TRL has no column, with the error
                res["trl_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"
                traceback.print_exc()
            print(f"{shape} TRL: {res.get('trl', res.get('trl_error'))}", flush=True)
        torch.cuda.empty_cache()
        results.append(res)

    print(f"\nGRPO step on {gpu}, bf16 autocast, full fine-tuning, beta 0; "
          f"{args.prompts} x {args.group} x {args.len} new ids; medians of {args.steps} steps after a warm-up")
    head = (f"{'shape':<14}{'params':>8}{'step s':>8}{'rollout s':>10}{'update s':>9}{'ids':>7}{'MFU upd':>8}"
            f"{'peak GiB':>9}{'rollout tok/s':>14}{'generate tok/s':>15}{'ratio':>6}{'TRL s':>7}{'ours/TRL':>9}")
    print(head)
    for r in results:
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "?"
        trl_s = f"{r['trl']:.2f}" if "trl" in r else "-"
        ratio = f"{r['time/step'] / r['trl']:.2f}" if "trl" in r else "-"
        print(f"{r['shape']:<14}{r['params'] / 1e6:>7.0f}M{r['time/step']:>8.2f}{r['time/rollout']:>10.2f}"
              f"{r['time/update']:>9.3f}{r['ids']:>7.0f}{mfu:>8}{r['peak_gib']:>9.1f}{r['rollout_tps']:>14.0f}"
              f"{r['generate_tps']:>15.0f}{r['rollout_tps'] / r['generate_tps']:>6.2f}{trl_s:>7}{ratio:>9}")
    for r in results:
        if "trl_error" in r:
            print(f"TRL on {r['shape']}: not run ({r['trl_error']})")
        elif "trl_version" in r:
            print(f"TRL {r['trl_version']} on {r['shape']}")


if __name__ == "__main__":
    main()
