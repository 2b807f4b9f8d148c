"""A Trainer's save and resume: everything a killed run needs to continue exactly where it stopped.

`save_trainer` writes the weights (or the LoRA adapter), the frozen reference, the optimizer, scheduler
and Accelerate's RNG states, each process's engine generator, the task sampler's RNG, the step, the
history, the config and the hooks' record into a sibling folder, and commits it atomically with a
SHA-256 manifest (`orchlib.train.checkpoint`); `resume_trainer` checks every file against that manifest
before reading any, and refuses hooks other than those the run was trained with.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from orchlib.train.checkpoint import (CheckpointError, abandon, commit, find_checkpoint, random_state_from_json,
                                      random_state_to_json, read_trainer_state, require, temporary_sibling)
from orchlib.train.config import GRPOConfig
from orchlib.train.hooks import Hooks

__all__ = ["save_trainer", "resume_trainer"]


def save_trainer(trainer, path: str | Path) -> Path:
    """Weights (or adapter), optimizer, scheduler, RNG states, step, history — atomically. A save that
    fails (a full disk, a write error) raises one CheckpointSaveError and leaves no partial copy; the
    previous checkpoint stays as it was."""
    acc = trainer.accelerator
    path = Path(path)
    tmp = path.parent / f".{path.name}.tmp-{trainer.step_count}"
    if acc.is_main_process:
        tmp = temporary_sibling(path, str(trainer.step_count))
    try:
        _write_checkpoint(trainer, tmp, path)
    except Exception as e:  # one line, and no partial copy left to fill the disk
        raise abandon(tmp, path, e) from None
    return path


def _write_checkpoint(trainer, tmp: Path, path: Path) -> None:
    acc = trainer.accelerator
    acc.wait_for_everyone()
    acc.save_state(str(tmp / "state"))
    torch.save(trainer.engine.generator.get_state(), tmp / "state" / f"engine_rng_{acc.process_index}.pt")
    acc.wait_for_everyone()
    if acc.is_main_process:
        unwrapped = acc.unwrap_model(trainer.model)
        unwrapped.save_pretrained(tmp / "policy")
        trainer.tokenizer.save_pretrained(tmp / "policy")
        if trainer.ref_model is not None:
            trainer.ref_model.save_pretrained(tmp / "reference")
        (tmp / "sampler_rng.json").write_text(json.dumps(random_state_to_json(trainer.rng.getstate())))
        state = {"step": trainer.step_count, "history": trainer.history, "policy_source": trainer.policy_source,
                 "config": trainer.config.model_dump(mode="json"), "hooks": trainer.hooks.record}
        (tmp / "trainer_state.json").write_text(json.dumps(state, indent=1))
        commit(tmp, path)
    acc.wait_for_everyone()


def resume_trainer(cls, path: str | Path, env, config: GRPOConfig | None = None, hooks: Hooks | None = None):
    """A `cls` (Trainer) rebuilt from `save_trainer`'s state at `path`, to continue exactly where it stopped,
    in `env`. `hooks` must be the ones it was trained with (their `record` is checked against the
    checkpoint's); `config`, if given, replaces the saved one."""
    from pydantic import ValidationError

    from orchlib.models import load_policy, resolve_policy

    ckpt = find_checkpoint(path)  # every file checked against the manifest's SHA-256 first
    if ckpt is None:
        raise FileNotFoundError(f"no complete checkpoint at {path}")
    state = read_trainer_state(require(ckpt, "trainer_state.json"))
    sampler_state = random_state_from_json(require(ckpt, "sampler_rng.json"))
    hooks = hooks if hooks is not None else Hooks()
    if state.get("hooks", {}) != hooks.record:
        raise ValueError(f"{ckpt / 'trainer_state.json'}: trained with hooks {state.get('hooks', {})}, resumed "
                         f"with {hooks.record}; pass the same hooks= (e.g. VariantConfig(**record['variants'])"
                         f".hooks())")
    try:
        config = config or GRPOConfig.model_validate(state["config"])
    except ValidationError as e:
        err = e.errors()[0]
        raise CheckpointError(f"{ckpt / 'trainer_state.json'}: config.{'.'.join(map(str, err['loc']))}: "
                              f"{err['msg']}") from None
    if config.lora:  # the adapter's base, by the name it was built or loaded by; its weights (the warm start's
        # changes included) come back with Accelerate's state below
        model, tok, _ = resolve_policy(state["policy_source"])
    else:
        model, tok = load_policy(ckpt / "policy")
    trainer = cls((model, tok), env, config, hooks=hooks, policy_source=state["policy_source"])
    if trainer.ref_model is not None and (ckpt / "reference").exists():
        ref, _ = load_policy(ckpt / "reference")
        trainer.ref_model.load_state_dict(ref.state_dict())
    acc = trainer.accelerator
    rng_file = require(ckpt, f"state/engine_rng_{acc.process_index}.pt")
    try:  # accelerate reads its files with weights_only=True and no custom objects are registered
        acc.load_state(str(ckpt / "state"))
        engine_rng = torch.load(rng_file, weights_only=True)
        trainer.engine.generator.set_state(engine_rng)
    except Exception as e:  # a file that passed its hash but does not fit this model or config
        raise CheckpointError(f"{ckpt / 'state'}: cannot be loaded into this trainer "
                              f"({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})") from None
    trainer.rng.setstate(sampler_state)
    trainer.step_count, trainer.history = state["step"], state["history"]
    return trainer
