"""A training process for the resume and multi-process tests (run as a script, not collected).

    python tests/train_worker.py --policy DIR --ckpt DIR --steps 4 [--resume] --out FILE
    accelerate launch --multi_gpu --num_processes 2 tests/train_worker.py --policy DIR --steps 1 --out FILE
    accelerate launch ... tests/train_worker.py --policy DIR --steps 1 --paired --out FILE

With --paired, each task is drawn under two preference profiles with the preference contrast on.

Trains on the toy environment, saves a checkpoint after every step, writes `progress` (the step
being run) beside the checkpoint, and at the end writes per process: the history, a hash of the
weights, the task ids this process rolled out and one row per rollout (task, profile, first tool,
reward, advantage).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path

import torch


def weights_hash(model) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().cpu().float().numpy().tobytes())
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", required=True)
    ap.add_argument("--ckpt", default=None)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--out", required=True)
    ap.add_argument("--paired", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)  # the same arithmetic order in every run

    from orchlib.envs.toy import toy_tasks, toy_toolbox
    from orchlib.models import load_policy
    from orchlib.reward import Reward
    from orchlib.rollout import RolloutConfig
    from orchlib.train import GRPOConfig, Trainer, VariantConfig

    rc = RolloutConfig(max_turns=2, max_new_tokens=24, tool_schema="compact", tool_latency="declared")
    cfg = GRPOConfig(rollout=rc, learning_rate=1e-3, kl_coef=0.05, tasks_per_step=4, group_size=4, seed=3)
    tasks, tools = toy_tasks(), toy_toolbox()
    reward = Reward.from_string("name: accuracy\nreward: outcome")
    hooks = VariantConfig().hooks()
    if args.paired:  # the profiles' rewards differ, so the contrast has something to take out
        cfg = cfg.model_copy(update={"kl_coef": 0.0})
        hooks = VariantConfig(paired_profiles=("accuracy", "thrifty"), preference_contrast=1.0).hooks()
        reward = Reward.load(Path(__file__).resolve().parents[1] / "rewards" / "toolorchestra.yaml")
    if args.resume:
        trainer = Trainer.resume(args.ckpt, tasks, tools, reward, hooks=hooks)
    else:
        trainer = Trainer(load_policy(args.policy), tasks, tools, reward, cfg, hooks=hooks)
    seen: list[str] = []
    rows: list[dict] = []
    while trainer.step_count < args.steps:
        if args.ckpt and trainer.accelerator.is_main_process:
            Path(args.ckpt).parent.mkdir(parents=True, exist_ok=True)
            Path(args.ckpt).parent.joinpath("progress").write_text(str(trainer.step_count + 1))
        report = trainer.step()
        seen += sorted({t.task_id for t in report.trajectories})
        rows += [{"step": report.step, "task": t.task_id, "profile": t.preference.get("name", ""),
                  "first": next((c.name for turn in t.turns for c in turn.calls), None), "reward": r, "advantage": a}
                 for t, r, a in zip(report.trajectories, report.rewards, report.advantages)]
        if args.ckpt:
            trainer.save(args.ckpt)
    rank = trainer.accelerator.process_index
    out = {"rank": rank, "world": trainer.accelerator.num_processes, "history": trainer.history,
           "weights": weights_hash(trainer.accelerator.unwrap_model(trainer.model)), "tasks": seen,
           "rows": rows}
    Path(f"{args.out}.{rank}").write_text(json.dumps(out))
    trainer.accelerator.end_training()
    os._exit(0)  # skip interpreter teardown of the process group


if __name__ == "__main__":
    main()
