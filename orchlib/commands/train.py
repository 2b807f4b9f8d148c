"""`orchlib train --config FILE`: a training run from a YAML file of the API's config objects."""

from __future__ import annotations

import argparse
import json


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train an orchestrator from a YAML config (SFT warm start + GRPO)",
                       description="Fields: policy, env (the world: `env: shop`, `env: {name: orchestra-choice, "
                                   "n_train: 40}`, `env: {tasks: my.jsonl, cards: mycards/}`; its reward too), steps, "
                                   "warm_start (SFTConfig), grpo (GRPOConfig, with rollout: RolloutConfig), out, "
                                   "save_every. A rerun with the same `out` resumes from its checkpoint. Example: "
                                   "examples/train_tiny.yaml.")
    p.add_argument("--config", required=True, help="YAML file")
    p.add_argument("--steps", type=int, default=None, help="override the file's steps")
    p.add_argument("--trust-code", action="store_true",
                   help="run the code the file names (env.factory); without it such a file is refused")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from orchlib.atomic import write_text_atomic
    from orchlib.cards import CardError
    from orchlib.cli import UsageError
    from orchlib.commands._output import writable_folder
    from orchlib.configfile import ConfigFileError, load_config
    from orchlib.envs.config import EnvConfigError
    from orchlib.models import PolicyLoadError
    from orchlib.reward import RewardFileError
    from orchlib.shipped import shipped_path
    from orchlib.tasks import TaskFileError
    from orchlib.train.checkpoint import CheckpointError
    from orchlib.train.run import RunConfig, run_training

    try:
        cfg = load_config(args.config, RunConfig)
    except ConfigFileError as e:
        raise UsageError(str(e)) from None
    if args.steps is not None:
        if args.steps < 0:  # model_copy does not validate: say it here, as the file's own `steps` would
            raise UsageError(f"--steps: {args.steps} is negative; give the number of GRPO steps (0 or more)")
        cfg = cfg.model_copy(update={"steps": args.steps})
    if cfg.env.factory is not None and not args.trust_code:
        raise UsageError(f"{args.config}: env.factory: {cfg.env.factory!r} is code of one's own; run it only if you "
                         f"trust it, with --trust-code")
    for field in ("cards", "reward", "tasks", "test_tasks"):
        values = getattr(cfg.env, field)
        for value in [values] if isinstance(values, str) else values or []:
            if not shipped_path(value).exists():
                raise UsageError(f"{args.config}: env.{field}: {value} does not exist")
    out = writable_folder(cfg.out, f"{args.config}: out:")  # before minutes of training
    try:
        trainer = run_training(cfg, trust_code=args.trust_code)
    except (PolicyLoadError, CardError, RewardFileError, TaskFileError) as e:  # read before the first step
        raise UsageError(f"{args.config}: {e}") from None
    except EnvConfigError as e:  # the world the file names cannot be made (env.factory, a maker's option)
        raise UsageError(f"{args.config}: {e}") from None
    except CheckpointError as e:  # the message names the checkpoint's file; the folder is left as it is
        raise UsageError(f"{e} (not resumed; move the folder away to start again)") from None
    write_text_atomic(out / "history.json", json.dumps(trainer.history, indent=1))  # never half written
    if not trainer.history:
        print(f"trained 0 steps; nothing to report (steps: {cfg.steps})")
        return 0
    last = trainer.history[-1]
    print(f"trained {trainer.step_count} steps; reward {last.get('reward', float('nan')):.3f}, "
          f"accuracy {last.get('accuracy', float('nan')):.2f}; checkpoint in {out / 'checkpoint'}")
    return 0
