"""`orchlib train --config FILE`: a training run from a YAML file of the API's config objects."""

from __future__ import annotations

import argparse
import json
import sys


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train an orchestrator from a YAML config (SFT warm start + GRPO)",
                       description="Fields: policy, env (the world: `env: shop`, `env: {name: orchestra-choice, "
                                   "n_train: 40}`, `env: {tasks: my.jsonl, cards: mycards/}`; its reward too), steps, "
                                   "warm_start (SFTConfig), grpo (GRPOConfig, with rollout: RolloutConfig), hooks, "
                                   "configurations, test_configurations, out, save_every. A rerun with the same `out` "
                                   "resumes from its checkpoint. Example: examples/train_tiny.yaml. Exit codes: 0 "
                                   "trained, 1 training diverged (a non-finite loss; the last checkpoint is kept), 2 "
                                   "bad input or a failed save.")
    p.add_argument("--config", required=True, help="YAML file")
    p.add_argument("--steps", type=int, default=None, help="override the file's steps")
    p.add_argument("--trust-code", action="store_true", help="import and run the code the config names (`hooks:`, "
                   "`env: {factory: ...}`); a config file is data: without this flag such a config is refused")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from orchlib.atomic import write_text_atomic
    from orchlib.cards import CardError
    from orchlib.cli import UsageError
    from orchlib.commands._output import writable_folder
    from orchlib.configfile import ConfigFileError, load_config, located
    from orchlib.configurations import ConfigurationError
    from orchlib.envs.config import EnvConfigError
    from orchlib.models import PolicyLoadError
    from orchlib.reward import RewardFileError
    from orchlib.shipped import shipped_path
    from orchlib.tasks import TaskFileError
    from orchlib.train.checkpoint import CheckpointError, CheckpointSaveError
    from orchlib.train.grpo import TrainingDiverged
    from orchlib.settings import UntrustedCodeError
    from orchlib.train.plugin import HooksError, require_trust
    from orchlib.train.run import RunConfig, run_training

    try:
        cfg = load_config(args.config, RunConfig)
    except ConfigFileError as e:
        raise UsageError(str(e)) from None
    if args.steps is not None:
        if args.steps < 0:  # model_copy does not validate: say it here, as the file's own `steps` would
            raise UsageError(f"--steps: {args.steps} is negative; give the number of GRPO steps (0 or more)")
        cfg = cfg.model_copy(update={"steps": args.steps})
    try:
        require_trust(cfg.hooks, args.trust_code)  # before anything is written
    except UntrustedCodeError as e:
        raise UsageError(f"{args.config}: {e}") from None
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
    except (PolicyLoadError, CardError, RewardFileError, TaskFileError, HooksError) as e:  # before the first step
        raise UsageError(f"{args.config}: {e}") from None
    except EnvConfigError as e:  # the world the file names cannot be made (env.factory, a maker's option)
        raise UsageError(f"{args.config}: {e}") from None
    except ConfigurationError as e:  # a configuration space that does not fit the run's world
        raise UsageError(str(located(args.config, e.loc, e.problem))) from None
    except CheckpointError as e:  # the message names the checkpoint's file; the folder is left as it is
        raise UsageError(f"{e} (not resumed; move the folder away to start again)") from None
    except CheckpointSaveError as e:  # names the folder and the cause; the previous checkpoint is kept
        raise UsageError(str(e)) from None
    except TrainingDiverged as e:  # the input was valid; the run failed: exit 1, the last checkpoint kept
        kept = f"the last checkpoint, {out / 'checkpoint'}, is kept" if (out / "checkpoint").exists() else \
            "no checkpoint had been saved"
        print(f"orchlib train: {e}; {kept}", file=sys.stderr)
        return 1
    write_text_atomic(out / "history.json", json.dumps(trainer.history, indent=1))  # never half written
    if not trainer.history:
        print(f"trained 0 steps; nothing to report (steps: {cfg.steps})")
        return 0
    last = trainer.history[-1]
    print(f"trained {trainer.step_count} steps; reward {last.get('reward', float('nan')):.3f}, "
          f"accuracy {last.get('accuracy', float('nan')):.2f}; checkpoint in {out / 'checkpoint'}")
    return 0
