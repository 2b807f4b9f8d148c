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

A real model choosing tools it never saw (ToolOrchestra §6.3):

    .venv/bin/python benchmarks/bench_describe.py --policy smollm2 --seeds 0 1      # ~21 min on 2 cores (AMX)
    .venv/bin/python benchmarks/bench_describe.py --policy smollm2 --config examples/smollm2_cards.yaml --seeds 0
                                                       # 23-26 min a seed, alone on 2 cores (AVX2)
    .venv/bin/python benchmarks/bench_describe.py --policy RUN/checkpoint ...       # one checkpoint per seed

With a model name, each seed runs the real-model recipe (examples/smollm2_choice.yaml) with the seen
tools' cards (calculator, generalist, mixtral) described by `orchlib.describe` and listed `brief` (each
description on a line below the tool list): its SFT warm start, then `--grpo-steps` of the paper's GRPO
(default 0: the warm start alone, to fit 30 minutes). A checkpoint must come from a run that listed its
tools `brief`: a policy that learned its calls from `compact` lines was seen copying the description
lines into its calls. A recipe whose rollout shows the evidence as lines (`evidence_order`) is tested as it
lists its tools, and with a compact list the `plain` arm is left out (its words would not be shown). The
seeds run side by side, one process each and an equal share of the cores (one seed alone takes them
all). With a recipe that drills first (`examples/smollm2_cards.yaml`: order and evidence drills, the
evidence-order lines), each seed's drills are printed with their held-out share at every check (the
run's `warm_start.json`).

Then three tools the policy never saw, under names that say nothing, on the recipe's held-out GSM8K and
arithmetic questions under "accuracy" and "thrifty": atlas (GPT-4-1106's recorded GSM8K answers), lyra
(Mixtral's) and vega (simulated: exact on arithmetic, poor on word problems). Four arms differ only in
the cards: `bare` (one line, the same for each but its name), `described` (`orchlib.describe`'s template
of each tool's success per category with its 95% CI, cost and latency, measured on the train questions),
`plain` (the same evidence in words: "Good at math word problems (right 100% of the time)..."), and
`described, list prices` (atlas at GPT-4-1106's list price, the others at theirs). In the first three
the tools cost and take the same, so only the evidence tells them apart; each tool is listed first
for a third of the questions. Printed per arm and category: the share of episodes calling the right
tool (GSM8K: atlas; arithmetic: vega) with its 95% Wilson interval, the share calling whichever tool
was listed first, well-formed calls, the right tool's share of the well-formed calls (the choice apart
from the writing), accuracy and cost; each arm minus `bare` with a 95% interval;
and atlas's share on GSM8K at list prices against same prices, per profile.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import tempfile
import time
from pathlib import Path

from orchlib.env import Environment
from orchlib.baselines import routes
from orchlib.describe import DescribeError, describe
from orchlib.describe_stats import newcombe, wilson
from orchlib.envs import CATEGORIES, make_suite
from orchlib.evaluate import format_table, preference_adherence
from orchlib.experiments.variants import VariantConfig
from orchlib.models import build_default_policy
from orchlib.reward import Reward
from orchlib.rollout import RolloutConfig
from orchlib.tools import Toolbox
from orchlib.train import GRPOConfig, SFTConfig, Trainer, golden_trajectories, sft_train
from orchlib.train.accel import cpu_description
from orchlib.train.evaluation import well_formed

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
    trainer = Trainer((model, tok), Environment(train=suite.train, tools=toolbox,
                                                reward=Reward.load(REPO / "rewards" / "toolorchestra.yaml")), config,
                      hooks=VariantConfig(paired_profiles=PROFILES).hooks())
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


# ---------------------------------------------------------------------------------- a real model, unseen tools
# Three tools the recipe's policy never saw, under names that say nothing. Two replay real recorded
# answers to the GSM8K test set (RouteLLM: GPT-4-1106 right on 1130/1319, Mixtral-8x7B on 842/1319) and
# error on anything else; the third is simulated, exact on arithmetic and poor on word problems. In the
# main arms they cost and take the same, so only the evidence of what each is good at tells them apart.
RIGHT = {"gsm8k": "atlas", "arithmetic": "vega"}
CATEGORY_WORDS = {"gsm8k": "math word problems", "arithmetic": "arithmetic expressions"}
SAME_PRICE = {"per_m_input": 0.8, "per_m_output": 0.8}
# the "repriced" arm: GPT-4-1106's list price for atlas, Mixtral's hosted price for lyra, a 7B's for vega
LIST_PRICES = {"atlas": {"per_m_input": 10, "per_m_output": 30}, "lyra": {"per_m_input": 0.6, "per_m_output": 0.6},
               "vega": {"per_m_input": 0.2, "per_m_output": 0.2}}


def unseen_cards(prices: dict[str, dict[str, float]] | None = None):
    """atlas (GPT-4-1106's recorded answers), lyra (Mixtral's), vega (simulated arithmetic expert), each with
    the same one-line description apart from its name; `prices` per name, else all the same."""
    from orchlib.cards import Latency, Price, load_card

    shipped = {n: load_card(REPO / "orchlib" / "toolcards" / f"{n}.yaml") for n in ("gpt4", "mixtral", "specialist")}
    vega_backend = {**shipped["specialist"].backend, "accuracy": {"default": 0.1, "arithmetic": 0.97, "gsm8k": 0.1}}
    made = {"atlas": (shipped["gpt4"], {}), "lyra": (shipped["mixtral"], {}),
            "vega": (shipped["specialist"], {"backend": vega_backend})}
    return [card.model_copy(update={
        "name": name, "description": f"{name.capitalize()}, a language model: it reads the task itself (no prompt "
                                     f"needed) and its answer is the final answer.",
        "price": Price(**(prices or {}).get(name, SAME_PRICE)), "latency": Latency(seconds=5.0), "tags": [],
        **extra}) for name, (card, extra) in made.items()]


def plain_text(stats) -> str:
    """The same measurements said plainly: what the tool is good and bad at, in words, best first."""
    from orchlib.describe_stats import percent, usd

    cats = sorted(stats.categories.items(), key=lambda kv: -kv[1].success_rate)
    verdict = lambda r: "Good at" if r >= 0.7 else "Bad at" if r <= 0.3 else "Fair at"  # noqa: E731
    said = [f"{verdict(s.success_rate)} {CATEGORY_WORDS.get(c, c)} (right {percent(s.success_rate)} of the time)."
            for c, s in cats]
    return " ".join(said) + f" Costs about {usd(stats.overall.mean_cost_usd)} a call."


def unseen_arms(describe_tasks, seed: int, describe_n: int, words: bool = True) -> dict[str, list]:
    """The arms' cards: bare, described (orchlib.describe's template), plain (the same evidence in words; only
    with `words`, when the prompt shows descriptions: a compact list would show it as it shows bare), and
    described with each tool at its own list price."""
    arms = {"bare": unseen_cards()}
    results = [describe(c, describe_tasks, n=describe_n, seed=seed, task_source="orchestra-mini train split")
               for c in arms["bare"]]
    arms["described"] = [r.card for r in results]
    if words:
        arms["plain"] = [c.model_copy(update={"description": f"{c.description} {plain_text(r.stats)}"})
                         for c, r in zip(arms["bare"], results)]
    repriced = unseen_cards(LIST_PRICES)
    arms["described, list prices"] = [
        describe(c, describe_tasks, n=describe_n, seed=seed, task_source="orchestra-mini train split").card
        for c in repriced]
    return arms


def reader_rollout(rollout: RolloutConfig) -> RolloutConfig:
    """How the reader is shown the cards: as `rollout` lists them when it shows the evidence as lines
    (`evidence_order`: the policy learned to read those, compact or brief alike), else `brief` (each
    description on a line below the list)."""
    return rollout if rollout.evidence_order else rollout.model_copy(update={"tool_schema": "brief"})


def train_reader(model: str, config: str, seed: int, describe_n: int, grpo_steps: int):
    """The real-model recipe (`config`) with every seen tool's card described by `orchlib.describe` and
    listed 'brief' (descriptions in the prompt): its SFT warm start, then `grpo_steps` of the paper's GRPO
    (0: the warm start alone). Returns the Trainer and the run's warm_start.json (its drills' records)."""
    import json

    from orchlib.configfile import load_config
    from orchlib.envs import make_choice_suite, make_read_suite, make_suite
    from orchlib.train.run import RunConfig, run_training

    cfg = load_config(config, RunConfig)
    makers = {"orchestra-mini": make_suite, "orchestra-choice": make_choice_suite, "orchestra-read": make_read_suite}
    suite = makers[cfg.env.world](cfg.env.seed, **cfg.env.maker_options())
    source = f"{cfg.env.world} train split"
    cards = [describe(c, suite.train, n=describe_n, seed=seed, task_source=source).card for c in suite.cards]
    suite = suite.model_copy(update={"cards": cards})
    rollout_config = reader_rollout(cfg.grpo.rollout)
    run = RunConfig(**{k: getattr(cfg, k) for k in cfg.model_fields_set - {"env"}}).model_copy(update={
                        "policy": model, "steps": grpo_steps, "evaluation": None,
                        "out": tempfile.mkdtemp(prefix="orchlib-describe-"),
                        "grpo": cfg.grpo.model_copy(update={"seed": seed, "rollout": rollout_config}),
                        "warm_start": cfg.warm_start.model_copy(update={"seed": seed}) if cfg.warm_start else None,
                        **{k: getattr(cfg, k).model_copy(update={"seed": seed})
                           for k in ("order_drills", "evidence_drills") if getattr(cfg, k) is not None}})
    trainer = run_training(run, progress=False, env=suite.environment(cfg.env.reward))
    return trainer, json.loads((Path(run.out) / "warm_start.json").read_text(encoding="utf-8"))


def evaluate_unseen(policy: str, config: str, seed: int, n_test: int, describe_n: int, grpo_steps: int,
                    threads: int = 1) -> dict:
    """One policy on every arm: the test questions under both profiles, each tool first in the list for a
    third of them. `policy`: a checkpoint of the real-model recipe, or a model name to train here
    (`train_reader`). Returns one row per episode (plain values) and the arms' descriptions."""
    import torch

    from orchlib.configfile import load_config
    from orchlib.envs.mini import preference_for
    from orchlib.rollout import rollout
    from orchlib.train.run import RunConfig, load_environment

    torch.set_num_threads(threads)  # one process per seed, side by side, sharing the cores
    t0 = time.perf_counter()
    cfg = load_config(config, RunConfig)
    warm = None  # the drills' records, when the policy is trained here
    if Path(policy).is_dir():
        trainer = Trainer.resume(policy, load_environment(cfg))  # the environment it trained in
    else:
        trainer, warm = train_reader(policy, config, seed, describe_n, grpo_steps)
    trained_s = time.perf_counter() - t0
    print(f"seed {seed}: policy ready in {trained_s:.0f} s", flush=True)  # the seeds' processes print as they go
    rollout_config = reader_rollout(trainer.config.rollout)
    # the recipe's own split: its held-out questions are the test, its training questions describe the tools
    sizes = {k: v for k, v in cfg.env.maker_options().items() if k in ("n_train", "n_test")}  # a world's own
    suite = make_suite(seed=cfg.env.seed, **sizes, categories=tuple(RIGHT))                    # options stay its
    test = [t for cat in RIGHT for t in [t for t in suite.test if t.category == cat][:n_test // len(RIGHT)]]
    names = [c.name for c in unseen_cards()]
    offer = lambda t: t.model_copy(update={"tools": names})  # noqa: E731
    arms = unseen_arms([offer(t) for t in suite.train], seed, describe_n, words=rollout_config.tool_schema == "brief")
    rows = []
    for arm, cards in arms.items():
        for turn in range(len(cards)):  # listing order rotated: position is no one tool's advantage
            order = cards[turn:] + cards[:turn]
            toolbox = Toolbox.from_cards(order)
            tasks = [offer(t).model_copy(update={"id": f"{t.id}@{p}", "preference": preference_for(p, names, order)})
                     for i, t in enumerate(test) if i % len(cards) == turn for p in PROFILES]
            by_id = {t.id: t for t in tasks}
            for traj in rollout(Environment(train=tasks, tools=toolbox), trainer.engine, config=rollout_config,
                                group_size=1, seed=seed):
                t = by_id[traj.task_id]
                first = next((c.name for turn_ in traj.turns for c in turn_.calls), None)
                rows.append({"seed": seed, "arm": arm, "category": t.category, "profile": t.id.rsplit("@", 1)[1],
                             "call": first, "listed_first": order[0].name, "outcome": traj.outcome,
                             "cost": traj.cost_usd, "well_formed": well_formed([traj]) == 1.0})
        print(f"seed {seed}: arm {arm!r} evaluated ({time.perf_counter() - t0:.0f} s)", flush=True)
    return {"rows": rows, "descriptions": {arm: {c.name: c.description for c in cards} for arm, cards in arms.items()},
            "seconds": {"train": trained_s, "evaluate": time.perf_counter() - t0 - trained_s}, "warm_start": warm}


def share_ci(hits: int, n: int) -> str:
    lo, hi = wilson(hits, n)
    return f"{hits / n:.2f} ({lo:.2f}–{hi:.2f})" if n else "-"


def diff_ci(a: list[bool], b: list[bool]) -> str:
    """Difference of two shares (b − a) with Newcombe's 95% interval (stays within [-1, 1])."""
    if not a or not b:
        return "-"
    lo, hi = newcombe(sum(b), len(b), sum(a), len(a))
    return f"{sum(b) / len(b) - sum(a) / len(a):+.2f} ({lo:+.2f}, {hi:+.2f})"


def _calls(rows: list[dict], tool: str, **where) -> list[bool]:
    """For each episode matching `where` (arm=..., category=..., profile=...): did it call `tool`?"""
    return [r["call"] == tool for r in rows if all(r[k] == v for k, v in where.items())]


def unseen_tables(rows: list[dict]) -> str:
    """Per arm and category: right-tool share, first-listed share, well-formed, accuracy, cost; then each
    arm's right-tool share minus the bare arm's, and the repriced arm's effect under each profile."""
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    out, head = [], ["cards", "category", "episodes", "right tool (95% CI)", "first listed", "well-formed",
                     "right of well-formed", "accuracy (95% CI)", "mean $"]
    for arm in arms:
        for cat in RIGHT:
            rs = [r for r in rows if r["arm"] == arm and r["category"] == cat]
            n = len(rs)
            # an arm whose calls are malformed scores low on "right tool" without choosing wrong: this column
            # keeps the choice apart from the writing (chance is one in the number of tools offered)
            formed = [r for r in rs if r["well_formed"]]
            out.append([arm, cat, str(n), share_ci(sum(_calls(rs, RIGHT[cat])), n),
                        f"{sum(r['call'] == r['listed_first'] for r in rs) / n:.2f}",
                        f"{len(formed) / n:.2f}",
                        f"{sum(_calls(formed, RIGHT[cat]))}/{len(formed)}",
                        share_ci(round(sum(r["outcome"] for r in rs)), n), f"{sum(r['cost'] for r in rs) / n:.5f}"])
    text = format_table(head, out)
    diffs = [[f"{arm} − bare", cat, diff_ci(_calls(rows, RIGHT[cat], arm="bare", category=cat),
                                            _calls(rows, RIGHT[cat], arm=arm, category=cat))]
             for arm in arms[1:] for cat in RIGHT]
    text += "\n\n" + format_table(["arms", "category", "Δ right-tool share (95% CI)"], diffs)
    price = []
    for prof in PROFILES:
        same = _calls(rows, "atlas", arm="described", category="gsm8k", profile=prof)
        dear = _calls(rows, "atlas", arm="described, list prices", category="gsm8k", profile=prof)
        price.append([prof, share_ci(sum(same), len(same)), share_ci(sum(dear), len(dear)), diff_ci(same, dear)])
    text += "\n\n" + format_table(["P", "GSM8K: atlas share, same prices", "atlas at GPT-4's list price",
                                    "Δ (95% CI)"], price)
    return text


def drill_lines(warm: dict | None) -> list[str]:
    """One line per drill a trained policy went through: its steps, seconds and held-out share at each check."""
    out = []
    for name in ("order_drills", "evidence_drills"):
        if warm and name in warm:
            d = warm[name]
            curve = ", ".join(f"{step:.0f}: {share:.2f}" for step, share in d["checks"])
            out.append(f"{name.replace('_', ' ')}: {d['steps']:.0f} steps in {warm['wall_s'].get(name, 0):.0f} s; "
                       f"held-out share at each check (step: share): {curve}")
    return out


def unseen_main(args) -> None:
    """`--policy MODEL` (trained here, once per `--seeds` seed) or `--policy CKPT [CKPT ...]` (one checkpoint
    a seed): each seed in its own process, then one table."""
    import json
    from concurrent.futures import ProcessPoolExecutor

    missing = [p for p in args.policy if ("/" in p or p.startswith(".")) and not Path(p).is_dir()]
    if missing:
        raise SystemExit(f"--policy {missing[0]}: no such checkpoint folder (or give a model name, e.g. smollm2)")
    t0 = time.perf_counter()
    policies = args.policy if len(args.policy) > 1 else args.policy * len(args.seeds)
    seeds = args.seeds if len(args.policy) == 1 else list(range(len(args.policy)))
    n = len(seeds)
    # the cores this process may run on (a cpuset can allow fewer than the machine has), shared out evenly
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    threads = max(1, cores // n)
    with ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn")) as pool:
        done = list(pool.map(evaluate_unseen, policies, [args.config] * n, seeds, [args.n_test] * n,
                             [args.describe_n] * n, [args.grpo_steps] * n, [threads] * n))
    rows = [r for d in done for r in d["rows"]]
    for arm, cards in done[0]["descriptions"].items():
        print(f"\n{arm} (seed {seeds[0]}):")
        for name, text in cards.items():
            print(f"  {name}: {' '.join(text.split())}")
    print(f"\nUnseen tools, {n} trained polic{'y' if n == 1 else 'ies'} (seeds {seeds}), "
          f"{args.n_test} test questions each under {' and '.join(PROFILES)}; right tool: "
          f"{', '.join(f'{c} → {t}' for c, t in RIGHT.items())}\n")
    print(unseen_tables(rows))
    for s in seeds:
        print(f"\nseed {s}:\n" + unseen_tables([r for r in rows if r["seed"] == s]).split("\n\n")[1])
    if args.out:
        Path(args.out).write_text(json.dumps(done, indent=1), encoding="utf-8")
    for s, d in zip(seeds, done):
        print(f"seed {s}: training {d['seconds']['train']:.0f} s, evaluation {d['seconds']['evaluate']:.0f} s")
        for line in drill_lines(d.get("warm_start")):
            print(f"  {line}")
    print(f"\ntotal {time.perf_counter() - t0:.0f} s ({cpu_description()}; {n} seed(s) side by side, "
          f"{threads} thread(s) each)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--categories", default="arithmetic,lookup,hard",
                    help="comma-separated, or 'all'; the default keeps the categories that offer the generalist")
    ap.add_argument("--n-train", type=int, default=30, help="train tasks (describe, SFT and GRPO draw on them)")
    ap.add_argument("--n-test", type=int, default=None, help="test questions (default 30; 40 with --policy)")
    ap.add_argument("--steps", type=int, default=20, help="GRPO steps of each run")
    ap.add_argument("--tasks-per-step", type=int, default=2, help="each paired under both profiles")
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--sft-epochs", type=int, default=40, help="passes over the train tasks, batches of 8")
    ap.add_argument("--describe-n", type=int, default=40, help="tasks each tool is tried on")
    ap.add_argument("--eval-group", type=int, default=1, help="samples per test task and profile")
    ap.add_argument("--policy", nargs="+", default=None, metavar="CHECKPOINT",
                    help="a real model: checkpoints of the real-model recipe, one per seed (see the docstring)")
    ap.add_argument("--config", default=str(REPO / "examples" / "smollm2_choice.yaml"),
                    help="with --policy: the recipe the checkpoints were trained by")
    ap.add_argument("--json", default=None, help="with --policy: write every episode's row here")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="with --policy MODEL: one run per seed")
    ap.add_argument("--grpo-steps", type=int, default=0,
                    help="with --policy MODEL: GRPO steps after the warm start (0: the warm start alone)")
    args = ap.parse_args()
    if args.policy:
        args.out = args.json
        args.n_test = args.n_test if args.n_test is not None else 40
        return unseen_main(args)
    args.n_test = args.n_test if args.n_test is not None else 30

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
