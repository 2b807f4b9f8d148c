""".venv/bin/python examples/baselines.py  [--seed 0] [--n-train 250] [--n-test 100] [--out out/baselines]

The fixed-routing baselines on the test split of the default suite, orchestra-mini: always-strongest,
always-cheapest, random and the per-task oracle. Strongest and cheapest rank each category's routes on
the train split; the oracle tries every route on each test task. All four run through the same
rollout and accounting as a trained orchestrator (their own tokens are priced like the policy's).

Prints the comparison table (with the ToolOrchestra reward computed across the four policies per
task), the cost–accuracy frontier, AIQ of the baselines' hull, and PGR on the GSM8K tasks between
always-Mixtral (weak) and always-GPT-4 (strong). Writes each report (metrics.json, table.txt,
trajectories.jsonl) under --out. Takes about twenty seconds on a laptop CPU.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from orchlib.env import Environment
from orchlib.baselines import make_baselines, try_routes
from orchlib.envs import make_suite
from orchlib.evaluate import Undefined, aiq, compare, evaluate, frontier, pgr, reward_across
from orchlib.models import build_tokenizer
from orchlib.reward import Reward

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-train", type=int, default=250)
    ap.add_argument("--n-test", type=int, default=100)
    ap.add_argument("--out", default="out/baselines")
    args = ap.parse_args()

    suite = make_suite(seed=args.seed, n_train=args.n_train, n_test=args.n_test)
    toolbox = suite.toolbox()
    tokenizer = build_tokenizer()  # the default policy's tokenizer: baselines' tokens are counted with it
    calibration = try_routes(suite.train, toolbox, tokenizer)
    on_test = try_routes(suite.test, toolbox, tokenizer)
    engines = make_baselines(suite.test, toolbox, tokenizer, calibration=calibration, trials=on_test)
    reports = {name: evaluate(engine, Environment(test=suite.test, tools=toolbox)) for name, engine in engines.items()}

    reward = Reward.load(REPO / "rewards" / "toolorchestra.yaml")
    across = reward_across(reports, reward)
    print(f"orchestra-mini (seed {args.seed}), test split: {len(suite.test)} tasks\n")
    print(compare(reports, extra={"reward*": across}))
    print("\n* ToolOrchestra reward, each task's group = the four policies' runs of it (min-max over them)")

    points = {n: (r.metrics["overall"]["cost_usd"], r.metrics["overall"]["accuracy"]) for n, r in reports.items()}
    print(f"\nPareto frontier (cost, accuracy): {', '.join(frontier(points))}")
    print(f"AIQ of the baselines' hull over their cost range: {aiq(points):.3f}")

    gsm = [t for t in suite.test if t.category == "gsm8k"]
    weak = float(np.mean([on_test.results[t.id]["mixtral"].outcome for t in gsm]))
    strong = float(np.mean([on_test.results[t.id]["gpt4"].outcome for t in gsm]))
    print(f"\nGSM8K ({len(gsm)} tasks): always-mixtral {weak:.3f}, always-gpt4 {strong:.3f}")
    pgrs = {}
    for name, rep in reports.items():
        trajs = [tr for tr in rep.trajectories if tr.category == "gsm8k"]
        share = np.mean([tr.calls.get("gpt4", 0) > 0 for tr in trajs])
        acc = np.mean([tr.outcome for tr in trajs])
        value = pgr(acc, weak, strong)  # Undefined when always-gpt4 is no better than always-mixtral
        pgrs[name] = None if isinstance(value, Undefined) else value
        shown = "n/a" if pgrs[name] is None else f"{pgrs[name]:.2f}"
        print(f"  {name:<10} gpt4 share {share:.2f}  accuracy {acc:.3f}  PGR {shown}")

    out = Path(args.out)
    for name, rep in reports.items():
        rep.save(out / name)
    (out / "summary.json").write_text(json.dumps({"points": points, "reward_across": across,
                                                  "aiq": aiq(points), "gsm8k": {"weak": weak, "strong": strong,
                                                                                "pgr": pgrs}}, indent=2))
    print(f"\nreports written to {out}/")


if __name__ == "__main__":
    main()
