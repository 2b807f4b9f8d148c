""".venv/bin/python examples/routellm_frontier.py  [--limit 1319] [--seed 0]

The cost–accuracy frontier of real recorded answers: RouteLLM's GSM8K recording (shipped in
orchlib/data/routellm/, Apache-2.0) replayed by the `mixtral` (weak, 0.6 / 0.6 USD per M tokens) and
`gpt4` (strong, 10 / 30) cards. Each question's outcome is the grade RouteLLM recorded
(`checker: recorded`). Every route is run once (`try_routes`), then the four baselines; then

- the frontier of the routes and baselines in (mean cost, accuracy);
- APGR (RouteLLM's average performance gap recovered) of two routers swept from 0 % to 100 % of
  questions sent to GPT-4: random, and the oracle order (first the questions only GPT-4 gets right);
- AIQ (RouterBench) of each router's (cost, accuracy) points over the same cost range.

All 1319 questions take about half a minute on a laptop CPU.
"""

from __future__ import annotations

import argparse
import csv
import random
from pathlib import Path

import numpy as np

from orchlib.env import Environment
from orchlib.baselines import make_baselines, route_stats, try_routes
from orchlib.cards import load_cards
from orchlib.evaluate import EVAL_ROLLOUT, aiq, apgr, compare, evaluate, frontier
from orchlib.models import build_tokenizer
from orchlib.tasks import Task
from orchlib.tools import Toolbox, replay_lookup

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=1319, help="the first N questions of GSM8K's test set")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    box = Toolbox.from_cards(load_cards([REPO / "toolcards" / "mixtral.yaml", REPO / "toolcards" / "gpt4.yaml"]))
    with (REPO / "orchlib" / "data" / "routellm" / "gsm8k_responses.csv").open(encoding="utf-8") as f:
        prompts = [row["prompt"] for row in csv.DictReader(f)][:args.limit]
    tasks = [Task(id=f"gsm8k-{i}", prompt=p, checker="recorded", category="gsm8k") for i, p in enumerate(prompts)]
    tok = build_tokenizer()
    trials = try_routes(tasks, box, tok, EVAL_ROLLOUT, seed=args.seed)
    reports = {name: evaluate(engine, Environment(test=tasks, tools=box), name=name) for name, engine in
               make_baselines(tasks, box, tok, trials=trials, seed=args.seed).items()}
    print(compare(reports))

    stats = route_stats(trials)["gsm8k"]
    points = {f"always {k}": (v["cost_usd"], v["accuracy"]) for k, v in stats.items()}
    points |= {k: (r.metrics["overall"]["cost_usd"], r.metrics["overall"]["accuracy"]) for k, r in reports.items()}
    print("\nfrontier (cost $, accuracy):", ", ".join(f"{k} ({points[k][0]:.5f}, {points[k][1]:.3f})"
                                                       for k in frontier(points)))

    # Routers swept over the share of questions sent to GPT-4, from the per-question trials.
    res = trials.results
    weak = np.array([res[t.id]["mixtral"].outcome for t in tasks])
    strong = np.array([res[t.id]["gpt4"].outcome for t in tasks])
    cost_w = np.array([res[t.id]["mixtral"].cost_usd for t in tasks])
    cost_s = np.array([res[t.id]["gpt4"].cost_usd for t in tasks])
    orders = {"random": random.Random(args.seed).sample(range(len(tasks)), len(tasks)),
              "oracle order": sorted(range(len(tasks)), key=lambda i: -(strong[i] - weak[i]))}
    acc_w, acc_s = weak.mean(), strong.mean()
    lo, hi = cost_w.mean(), cost_s.mean()
    print(f"\nalways mixtral {acc_w:.3f}, always gpt4 {acc_s:.3f} (recorded grades: "
          f"{sum(replay_lookup(box['gpt4'].card, p)[1] for p in prompts):.0f} of {len(prompts)} for GPT-4)")
    for name, order in orders.items():
        ops, costs = [], []
        for share in np.linspace(0, 1, 21):
            to_strong = np.zeros(len(tasks), bool)
            to_strong[order[:round(share * len(tasks))]] = True
            ops.append((share, np.where(to_strong, strong, weak).mean()))
            costs.append((np.where(to_strong, cost_s, cost_w).mean(), ops[-1][1]))
        print(f"{name:13} APGR {apgr(ops, acc_w, acc_s):.3f}   AIQ {aiq(costs, cost_range=(lo, hi)):.3f}")


if __name__ == "__main__":
    main()
