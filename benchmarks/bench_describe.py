"""Run: .venv/bin/python benchmarks/bench_describe.py [--steps 20] [--sft-epochs 40] [--n-train 30] [--n-test 30]

Do tool descriptions written from evidence help an orchestrator? Two runs that differ only in the text
of the tool cards, on the default suite (orchestra-mini):

- bare       every card's description is one line, "<name>: a tool." (argument schemas are unchanged);
- described  the same bare cards after `orchlib.describe` (offline template) on the train split:
             "<name>: a tool." followed by the measured success rate per category with its 95% CI,
             the mean cost and the mean latency.

Each run: a fresh tiny policy (same seed), SFT warm start on golden trajectories of the train tasks,
then GRPO for the same number of steps with rewards/toolorchestra.yaml, every drawn task paired under
the accuracy and the thrifty preference, full tool schemas in the prompt (so descriptions are read)
and declared tool latency. Both are evaluated on the test split under P = accuracy and P = thrifty,
with the training rollout settings (3 turns of at most 64 new ids: one call and an answer).
The warm start draws, per task, uniformly among *all* its routes (golden calls and every offered
model tool that answers the task itself, `orchlib.baselines.routes`): it teaches the call format of
every tool and no preference between them, which is left to RL and to what the descriptions say.

Printed: accuracy and mean cost (USD) per profile, and controllability: the share of calls going to
the dear `generalist` under P = accuracy minus that share under P = thrifty (a policy that reads P
sends fewer calls to it when told to be thrifty), ± one binomial standard error; a difference smaller
than about two of them is noise. Accuracy comes with its 95% Wilson interval.

Takes about five minutes on two idle CPU cores with the defaults (the warm start dominates: 160 SFT
steps over ~600-token prompts); 18 minutes were measured with the two cores shared with other jobs. With
fewer SFT steps the randomly initialised tiny policy has not yet learned the call format and both runs
score 0. A longer comparison: `--sft-epochs 60 --steps 60 --n-train 100 --n-test 100`.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from orchlib.baselines import routes
from orchlib.describe import DescribeError, describe
from orchlib.describe_stats import wilson
from orchlib.envs import CATEGORIES, make_suite
from orchlib.evaluate import format_table, preference_adherence
from orchlib.experiments.variants import VariantConfig
from orchlib.models import build_default_policy
from orchlib.reward import Reward
from orchlib.rollout import RolloutConfig
from orchlib.tools import Toolbox
from orchlib.train import GRPOConfig, SFTConfig, Trainer, golden_trajectories, sft_train

REPO = Path(__file__).resolve().parents[1]
PROFILES = ("accuracy", "thrifty")
DEAR = "generalist"


def bare(cards):
    """The cards with a one-line description and nothing generated."""
    return [c.model_copy(update={"description": f"{c.name}: a tool.", "auto_description": None}) for c in cards]


def described(cards, tasks, n: int, seed: int):
    """The cards described on `tasks`; a card no task has arguments for stays bare (and is named).
    Cards no task offers stay bare too: they never appear in a prompt."""
    out = []
    for c in cards:
        if not any(t.tools is None or c.name in t.tools for t in tasks):
            out.append(c)
            continue
        try:
            out.append(describe(c, tasks, n=n, seed=seed, task_source="orchestra-mini train split").card)
        except DescribeError as e:
            print(f"  {c.name} stays bare: {e}")
            out.append(c)
    return out


def every_route(task, cards):
    """The task with all its routes as golden alternatives, so the warm start teaches no choice."""
    seqs = list(routes(task, cards).values())
    return task.model_copy(update={"golden": task.golden.model_copy(update={"calls": seqs[0],
                                                                             "alternatives": seqs[1:]})})


def train_and_evaluate(cards, suite, args) -> dict:
    """SFT warm start + GRPO on the train split with these cards; the test split under each profile."""
    toolbox = Toolbox.from_cards(cards)
    # One call and an answer solve these categories: 3 turns of 64 ids bound the time a policy that has
    # not yet learned to stop spends generating, in training and in evaluation alike.
    rollout = RolloutConfig(tool_schema="full", tool_latency="declared", max_turns=3, max_new_tokens=64,
                            max_total_tokens=3072)
    model, tok = build_default_policy("tiny", seed=args.seed)
    gold = golden_trajectories([every_route(t, cards) for t in suite.train], toolbox, tok, rollout, seed=args.seed)
    sft = sft_train(model, tok, gold, SFTConfig(seed=args.seed, epochs=args.sft_epochs, batch_size=8),
                    progress=False)
    config = GRPOConfig(seed=args.seed, tasks_per_step=args.tasks_per_step, group_size=args.group_size,
                        rollout=rollout)
    trainer = Trainer((model, tok), suite.train, toolbox, Reward.load(REPO / "rewards" / "toolorchestra.yaml"),
                      config, hooks=VariantConfig(paired_profiles=PROFILES).hooks())
    t = time.perf_counter()
    steps = trainer.run(args.steps, progress=False)
    grpo_s = time.perf_counter() - t
    t = time.perf_counter()
    result = preference_adherence(trainer.engine, suite.test, toolbox, PROFILES, config=rollout,
                                  group_size=args.eval_group, seed=args.seed)
    last = steps[-1].metrics if steps else {}
    print(f"    SFT {len(sft.losses)} steps in {sft.seconds:.0f} s (loss {sft.losses[0]:.2f} -> {sft.losses[-1]:.2f}); "
          f"GRPO {len(steps)} steps in {grpo_s:.0f} s (last: reward {last.get('reward', 0):.3f}, "
          f"accuracy {last.get('accuracy', 0):.2f}, errors {last.get('errors', 0):.2f}); "
          f"evaluation {time.perf_counter() - t:.0f} s")
    return result


def _se(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 0.0) / n)


def rows_of(name: str, result: dict) -> list[list[str]]:
    """Two rows (one per profile); accuracy with its 95% Wilson interval (the outcomes here are 0/1)."""
    reports = result["reports"]
    out, shares = [], {}
    for prof in PROFILES:
        m = reports[prof].metrics["overall"]
        calls = sum(v["count"] for v in m["calls"].values())
        share = m["calls"].get(DEAR, {}).get("share", 0.0)
        shares[prof] = (share, calls)
        lo, hi = wilson(round(m["accuracy"] * m["n"]), m["n"])
        out.append([name, prof, f"{m['accuracy']:.3f}", f"{lo:.2f}–{hi:.2f}", f"{m['cost_usd']:.5f}",
                    f"{share:.3f}" if calls else "no calls", f"{m['errors']['per_task']:.2f}", ""])
    (s_a, c_a), (s_t, c_t) = shares["accuracy"], shares["thrifty"]
    if c_a and c_t:  # one binomial standard error of each share, over that profile's calls
        out[-1][-1] = f"{s_a - s_t:+.3f} ±{math.hypot(_se(s_a, c_a), _se(s_t, c_t)):.3f}"
    else:
        out[-1][-1] = "n/a (no well-formed calls under a profile)"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--categories", default="arithmetic,lookup,hard",
                    help="comma-separated, or 'all'; the default keeps the categories that offer the generalist")
    ap.add_argument("--n-train", type=int, default=30, help="train tasks (describe, SFT and GRPO draw on them)")
    ap.add_argument("--n-test", type=int, default=30)
    ap.add_argument("--steps", type=int, default=20, help="GRPO steps of each run")
    ap.add_argument("--tasks-per-step", type=int, default=2, help="each paired under both profiles")
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--sft-epochs", type=int, default=40, help="passes over the train tasks, batches of 8")
    ap.add_argument("--describe-n", type=int, default=40, help="tasks each tool is tried on")
    ap.add_argument("--eval-group", type=int, default=1, help="samples per test task and profile")
    args = ap.parse_args()

    t0 = time.perf_counter()
    categories = CATEGORIES if args.categories == "all" else tuple(args.categories.split(","))
    suite = make_suite(seed=args.seed, n_train=args.n_train, n_test=args.n_test, categories=categories)
    arms = {"bare": bare(suite.cards)}
    arms["described"] = described(arms["bare"], suite.train, args.describe_n, args.seed)
    print(f"orchestra-mini (seed {args.seed}, {', '.join(categories)}): {len(suite.train)} train / "
          f"{len(suite.test)} test tasks; "
          f"{args.steps} GRPO steps x {args.tasks_per_step} tasks x {len(PROFILES)} profiles x {args.group_size}")
    for c in arms["described"]:
        if c.name in ("specialist", DEAR):
            print(f"  described {c.name}: {' '.join(c.description.split())}")
    rows = []
    for name, cards in arms.items():
        t = time.perf_counter()
        rows += rows_of(name, train_and_evaluate(cards, suite, args))
        print(f"  {name}: trained and evaluated in {time.perf_counter() - t:.0f} s")
    header = ["cards", "P", "accuracy", "95% CI", "cost $", f"share {DEAR}", "errors/task",
              f"controllability (Δ share {DEAR})"]
    print()
    print(format_table(header, rows))
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
