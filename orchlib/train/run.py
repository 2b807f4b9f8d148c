"""A whole training run from one config (what `orchlib train --config FILE` runs).

The file holds the same config objects as the Python API: `grpo:` is a GRPOConfig (with its
`rollout:`), `variants:` a VariantConfig (the experimental ones; empty = the paper's GRPO),
`warm_start:` an SFTConfig. `policy: Qwen/Qwen3-8B` with a gpt-5 card in `cards:` is
the real-scale path (see examples/qwen3_8b.yaml); the defaults train the tiny policy on a laptop.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from orchlib.train.config import GRPOConfig
from orchlib.train.grpo import Trainer
from orchlib.train.sft import SFTConfig
from orchlib.train.variants import VariantConfig

__all__ = ["RunConfig", "run_training"]


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    policy: str = Field("tiny", description="'tiny' / 'small' (built offline), a Hugging Face id, or a folder")
    cards: str | list[str] = Field("toolcards", description="folder, file or list of files of tool cards")
    reward: str = Field("rewards/toolorchestra.yaml", description="reward file in the reward DSL")
    tasks: str | None = Field(None, description="tasks JSONL; empty = the orchestra-mini train split")
    suite_seed: int = Field(0, description="seed of the default suite when `tasks` is empty")
    steps: int = Field(20, ge=0, description="GRPO steps")
    warm_start: SFTConfig | None = Field(default_factory=SFTConfig, description="SFT on golden trajectories "
                                         "first; null to skip (a real instruction model needs none)")
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    variants: VariantConfig = Field(default_factory=VariantConfig, description="experimental objectives and "
                                    "samplers (train/variants.py); the defaults are the paper's GRPO")
    out: str = Field("runs/train", description="checkpoint and metrics folder; a rerun resumes from it")
    save_every: int = Field(10, ge=1, description="checkpoint every this many steps (and at the end)")


def run_training(cfg: RunConfig, progress: bool = True) -> Trainer:
    """Warm start (unless resuming), then GRPO for `cfg.steps`, checkpointing into `cfg.out`."""
    from orchlib.models import build_default_policy, load_policy
    from orchlib.reward import Reward
    from orchlib.tasks import load_tasks
    from orchlib.tools import Toolbox
    from orchlib.train.checkpoint import find_checkpoint
    from orchlib.train.sft import golden_trajectories, sft_train

    if cfg.tasks:
        tasks = load_tasks(cfg.tasks)
    else:
        from orchlib.envs import make_suite

        tasks = make_suite(cfg.suite_seed).train
    toolbox, reward = Toolbox.load(cfg.cards), Reward.load(cfg.reward)
    ckpt = Path(cfg.out) / "checkpoint"
    if find_checkpoint(ckpt):
        trainer = Trainer.resume(ckpt, tasks, toolbox, reward, hooks=cfg.variants.hooks())
    else:
        model, tok = build_default_policy(cfg.policy) if cfg.policy in ("tiny", "small") else load_policy(cfg.policy)
        if cfg.warm_start is not None:
            with_golden = [t for t in tasks if t.golden is not None]
            gold = golden_trajectories(with_golden, toolbox, tok, cfg.grpo.rollout, seed=cfg.warm_start.seed)
            sft_train(model, tok, gold, cfg.warm_start, progress=progress)
        trainer = Trainer((model, tok), tasks, toolbox, reward, cfg.grpo, hooks=cfg.variants.hooks(),
                          policy_source=cfg.policy)
    while trainer.step_count < cfg.steps:
        n = min(cfg.save_every, cfg.steps - trainer.step_count)
        trainer.run(n, progress=progress)
        trainer.save(ckpt)
    return trainer
