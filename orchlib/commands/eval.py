"""`orchlib eval`: run a policy (and the baselines) over a task set; print the table, save the numbers."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate a policy and the baselines on tasks",
                       description="Runs the policy on every task (default: the orchestra-mini test split) "
                                   "and, with --baselines, always-strongest, always-cheapest, random and the "
                                   "oracle. Writes metrics.json, table.txt and trajectories.jsonl per policy.")
    p.add_argument("--policy", default="tiny",
                   help="'tiny'/'small', a model folder, a Hugging Face id, or a training checkpoint folder")
    p.add_argument("--tasks", default=None, help="tasks JSONL (default: orchestra-mini test split)")
    p.add_argument("--suite-seed", type=int, default=0)
    p.add_argument("--cards", default="toolcards", help="folder of tool cards")
    p.add_argument("--reward", default="rewards/toolorchestra.yaml")
    p.add_argument("--baselines", action="store_true", help="also run the four baselines")
    p.add_argument("--tool-schema", choices=["full", "compact"], default="full",
                   help="how tools are listed to the policy (use what it was trained with)")
    p.add_argument("--out", default="out/eval")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from orchlib.cli import UsageError
    from orchlib.engines import TransformersEngine
    from orchlib.evaluate import EVAL_ROLLOUT, compare, evaluate, reward_across
    from orchlib.models import PolicyLoadError, build_default_policy, load_policy
    from orchlib.reward import Reward, RewardFileError
    from orchlib.tasks import TaskFileError, load_tasks
    from orchlib.tools import CardError, Toolbox

    try:
        if args.tasks:
            tasks = load_tasks(args.tasks)
        else:
            from orchlib.envs import make_suite

            tasks = make_suite(args.suite_seed).test
        toolbox, reward = Toolbox.load(args.cards), Reward.load(args.reward)
        policy = Path(args.policy)
        if (policy / "policy").is_dir():  # a training checkpoint
            policy = policy / "policy"
        model, tok = (build_default_policy(args.policy) if args.policy in ("tiny", "small")
                      else load_policy(policy if policy.exists() else args.policy))
    except (TaskFileError, CardError, RewardFileError, PolicyLoadError, FileNotFoundError) as e:
        raise UsageError(str(e)) from None
    config = EVAL_ROLLOUT.model_copy(update={"tool_schema": args.tool_schema})
    reports = {"policy": evaluate(TransformersEngine(model, tok), tasks, toolbox, reward, config, name="policy")}
    if args.baselines:
        from orchlib.baselines import make_baselines

        engines = make_baselines(tasks, toolbox, tok, config=config)
        reports.update({n: evaluate(e, tasks, toolbox, reward, config, name=n) for n, e in engines.items()})
    out = Path(args.out)
    for name, report in reports.items():
        report.save(out / name)
    print(compare(reports, extra={"reward*": reward_across(reports, reward)}))
    print(f"\n* ToolOrchestra-style reward grouped across the policies per task. Saved under {out}/")
    return 0
