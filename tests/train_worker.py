"""A training process for the resume and multi-process tests (run as a script, not collected).

    python tests/train_worker.py --policy DIR --ckpt DIR --steps 4 [--resume] --out FILE
    accelerate launch --multi_gpu --num_processes 2 tests/train_worker.py --policy DIR --steps 1 --out FILE
    accelerate launch ... tests/train_worker.py --policy DIR --steps 1 --paired --out FILE

With --paired, each task is drawn under two preference profiles with the preference contrast on, and
the rollouts are written by a script rather than sampled (which tool each episode calls is chosen, so
the rewards, and what the contrast takes out, are the same on every CPU).

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


# Which tool each of a task's 8 episodes calls (4 under "accuracy", then 4 under "thrifty"): the groups'
# rewards vary, and "right" has a different mean advantage under each profile, so the contrast moves it.
PAIRED_SCRIPT = ["right", "right", "right", "wrong", "right", "wrong", "wrong", "wrong"]


def scripted_engine(tokenizer, tasks, script=PAIRED_SCRIPT, model=None):
    """An engine that writes, as the k-th episode of a task in each rollout, one call to the tool
    `script[k]` (`script`: a list of tool names for every task, or {task id: list}) instead of sampling.
    Episodes are numbered across the task's groups in the rollout's order, so with paired profiles the
    second profile's group gets `script[G:2G]`.

    With `model`, each written id carries the policy's own log-prob of it under the rollout's temperature,
    as a sampling engine reports it, so an update on these rollouts starts from a ratio of 1; without it,
    the scripted engine's constant placeholder."""
    from orchlib.chat import render_call
    from orchlib.engines.scripted import ScriptedEngine
    from orchlib.trajectory import ToolCall

    class Engine(ScriptedEngine):
        def clear_prefix_cache(self) -> None:  # nothing is cached: the text is given
            pass

        def start_rollout(self, episodes) -> None:  # a task's episodes 0, 1, ... over all of its groups
            seen: dict[str, int] = {}
            numbered = []
            for task_id, _ in episodes:
                numbered.append((task_id, seen.get(task_id, 0)))
                seen[task_id] = numbered[-1][1] + 1
            super().start_rollout(numbered)

        def generate(self, prompts, params, stop_ids=()):
            out = super().generate(prompts, params, stop_ids)
            if model is not None:
                for prompt, g in zip(prompts, out.outputs):
                    g.logprobs = policy_logprobs(model, list(prompt), g.ids, params.temperature)
            return out

    by_task = script if isinstance(script, dict) else {t.id: script for t in tasks}
    turns = {task: [[render_call(ToolCall(name=name, arguments={}))] for name in names]
             for task, names in by_task.items()}
    return Engine(tokenizer, turns, tasks=tasks)


@torch.no_grad()
def policy_logprobs(model, prompt: list[int], ids: list[int], temperature: float = 1.0) -> list[float]:
    """log softmax(logits / T) of `ids` written after `prompt`, from one forward pass of `model`."""
    was_training = model.training
    model.eval()
    try:
        x = torch.tensor([prompt + list(ids)], device=model.device)
        logits = model(input_ids=x).logits[0, len(prompt) - 1:-1].float() / (temperature or 1.0)
    finally:
        model.train(was_training)
    logp = torch.log_softmax(logits, dim=-1)
    return logp.gather(-1, torch.tensor(ids, device=logp.device)[:, None])[:, 0].tolist()


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

    from orchlib.env import Environment
    from orchlib.envs.toy import toy_tasks, toy_toolbox
    from orchlib.models import load_policy
    from orchlib.reward import Reward
    from orchlib.rollout import RolloutConfig
    from orchlib.experiments.variants import VariantConfig
    from orchlib.train import GRPOConfig, Trainer

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
        trainer = Trainer.resume(args.ckpt, Environment(train=tasks, tools=tools, reward=reward), hooks=hooks)
    else:
        trainer = Trainer(load_policy(args.policy), Environment(train=tasks, tools=tools, reward=reward), cfg,
                          hooks=hooks)
    if args.paired:
        trainer.engine = scripted_engine(trainer.tokenizer, tasks,
                                         model=trainer.accelerator.unwrap_model(trainer.model))
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
