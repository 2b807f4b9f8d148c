""".venv/bin/python benchmarks/bench_grpo_vs_trl.py [--sizes tiny small] [--precisions fp32 bf16]
                                                   [--steps 4] [--prompts 4] [--group 8] [--len 32]

One GRPO step of orchlib's Trainer vs TRL's GRPOTrainer on the same model, batch, group size and
lengths: single-turn, no tools (so both do the same work: sample G completions of L tokens per prompt,
score them, one optimiser step on the clipped surrogate), no KL term (beta 0 / kl_coef 0), the same
prompt token ids (TRL gets the prompt orchlib's chat template renders). Both train in the same
precision: fp32, or bf16 autocast (TRL's default `bf16=True`, which on a CPU with AMX is about twice as
fast; orchlib's `mixed_precision="bf16"`). Both run side by side in this one process; the table gives
the median step time after one warm-up step and the ratio orchlib / TRL. Needs the `bench` extra
(`pip install -e ".[bench]"`).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
import warnings

import torch

warnings.filterwarnings("ignore")


def orchlib_step_times(model, tok, questions, group, length, steps, lr, precision) -> list[float]:
    from orchlib.env import Environment
    from orchlib.reward import Reward
    from orchlib.rollout import RolloutConfig
    from orchlib.tasks import Task
    from orchlib.tools import Toolbox
    from orchlib.train import GRPOConfig, Trainer

    tasks = [Task(id=f"p{i}", prompt=q, answer="a", checker="contains", tools=[]) for i, q in enumerate(questions)]
    rc = RolloutConfig(max_turns=1, max_new_tokens=length, show_preference=False, system_prompt="",
                       tool_schema="compact")
    cfg = GRPOConfig(learning_rate=lr, tasks_per_step=len(tasks), group_size=group, kl_coef=0.0,
                     micro_batch_size=len(tasks) * group, rollout=rc, min_reward_spread=None,
                     mixed_precision="bf16" if precision == "bf16" else "no")
    trainer = Trainer((model, tok), Environment(train=tasks, tools=Toolbox([]),
                                                reward=Reward.from_string("name: r\nreward: outcome")), cfg)
    times = []
    for _ in range(steps + 1):
        t0 = time.perf_counter()
        trainer.step()
        times.append(time.perf_counter() - t0)
    return times[1:]


def trl_step_times(model, tok, prompts, group, length, steps, lr, precision, use_cpu=True,
                   sync=lambda: None) -> list[float]:
    """TRL's step times (after a warm-up step); `sync` runs before each clock reading (a GPU's queue)."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    class Clock(TrainerCallback):
        def __init__(self):
            self.marks = []

        def on_step_begin(self, args, state, control, **kw):
            sync()
            self.marks.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kw):
            sync()
            self.marks.append(time.perf_counter())

    def reward(completions, **kw):
        return [float("a" in c.lower()) for c in completions]

    data = Dataset.from_dict({"prompt": prompts * (steps + 2)})
    with tempfile.TemporaryDirectory() as out:
        cfg = GRPOConfig(output_dir=out, per_device_train_batch_size=len(prompts) * group, num_generations=group,
                         max_completion_length=length, learning_rate=lr, beta=0.0, max_steps=steps + 1,
                         use_cpu=use_cpu, bf16=precision == "bf16", report_to="none", save_strategy="no",
                         logging_steps=10_000,
                         temperature=1.0, epsilon=0.2, epsilon_high=0.28, loss_type="dapo",
                         shuffle_dataset=False, disable_dropout=True, dataloader_num_workers=0)
        clock = Clock()
        tok = copy.deepcopy(tok)
        tok.padding_side = "left"
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=cfg, train_dataset=data,
                              processing_class=tok, callbacks=[clock])
        trainer.train()
    pairs = list(zip(clock.marks[::2], clock.marks[1::2]))
    return [b - a for a, b in pairs][1:]


def _reset_accelerate() -> None:
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", nargs="+", default=["tiny", "small"])
    ap.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--len", type=int, default=32)
    args = ap.parse_args()
    from orchlib.models import build_default_policy
    from orchlib.prompting import render_prompt
    from orchlib.rollout import RolloutConfig
    from orchlib.tasks import Task

    rows = []
    for size in args.sizes:
        model, tok = build_default_policy(size)
        rc = RolloutConfig(show_preference=False, system_prompt="")
        questions = [f"Question {i}: what is {i} plus {i * 7}?" for i in range(args.prompts)]
        prompts = [render_prompt(Task(id=str(i), prompt=q), [], tok, rc) for i, q in enumerate(questions)]
        for precision in args.precisions:
            _reset_accelerate()  # each trainer sets up Accelerate's process-wide state its own way
            torch.manual_seed(0)
            ours = orchlib_step_times(copy.deepcopy(model), tok, questions, args.group, args.len, args.steps, 1e-5,
                                      precision)
            _reset_accelerate()
            torch.manual_seed(0)
            theirs = trl_step_times(copy.deepcopy(model), tok, prompts, args.group, args.len, args.steps, 1e-5,
                                    precision)
            o, t = statistics.median(ours), statistics.median(theirs)
            rows.append((size, precision, o, t, o / t))
            print(f"{size} {precision}: orchlib {o:.3f} s/step, TRL {t:.3f} s/step, ratio {o / t:.2f}", flush=True)
    import trl

    print(f"\nGRPO step, {args.prompts} prompts x {args.group} completions x {args.len} new tokens, CPU, "
          f"{torch.get_num_threads()} threads, TRL {trl.__version__}")
    print(f"{'model':<8}{'precision':<11}{'orchlib s/step':>15}{'TRL s/step':>12}{'ratio':>8}  target")
    for size, precision, o, t, r in rows:
        target = 0.7 if size == "tiny" else 1.0
        print(f"{size:<8}{precision:<11}{o:>15.3f}{t:>12.3f}{r:>8.2f}  <= {target} {'ok' if r <= target else 'MISSED'}")


if __name__ == "__main__":
    main()
