"""Does a world where the right tool can only be found by reading make the choice's gradient depend on P?

    python benchmarks/bench_reading.py [--seeds 100] [--steps 150] [--questions 12] [--threads 2]

For each seed, the tiny policy (`build_default_policy("tiny")`) is warm-started by SFT on the golden
trajectories of a world (`orchlib.train.run.warm_started_policy`: the run's own warm start) and probed on
GSM8K test questions offering both the generalist and Mixtral: the cosine between the gradients of
log p(generalist) - log p(mixtral) at the first call's name under "accuracy" and under "thrifty"
(`profile_gradient_cosine`; on orchestra-read under each question's held-out configuration, at the
aliases the two backends wear there: `orchlib.evaluate.gradients.configured_profile_cosine`). Rows:

- orchestra-choice: fixed names and order, the GSM8K choice counterbalanced in the golden data;
- orchestra-read, golden "counterbalanced": drawn aliases, order and prices, no golden choice that P decides;
- orchestra-read, golden "reading": the same, and arithmetic without the calculator golden on the tool P
  asks for (the cheaper shown under "thrifty", the more accurate under "accuracy").

1 - cos is the share of an update to one profile's choice that does not move the other's alike; the
project's bar for a choice RL can make follow P is 1e-2. Also printed: the SFT policy's first-call
well-formed rate on those questions (`heldout_summary`, one sampled run each), since a policy that cannot
call yet has no choice to probe. On 2 contended cores a world took ~2 minutes at --steps 20 --train 40
--questions 3 and ~13 minutes at --steps 100 --train 80 --questions 8 (orchestra-read's longer prompts, longer).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

WORLDS = (("orchestra-choice", {}), ("orchestra-read", {"golden": "counterbalanced"}),
          ("orchestra-read", {"golden": "reading"}))
BACKENDS = ("generalist", "mixtral")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[100])
    ap.add_argument("--steps", type=int, default=150, help="SFT steps of the warm start (batch 16)")
    ap.add_argument("--train", type=int, default=120, help="train questions of each world")
    ap.add_argument("--questions", type=int, default=12, help="GSM8K test questions probed")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from orchlib.envs import make_environment
    from orchlib.evaluate import heldout_summary
    from orchlib.evaluate.gradients import configured_profile_cosine
    from orchlib.rollout import RolloutConfig
    from orchlib.train.run import RunConfig, warm_started_policy
    from orchlib.train.sft import SFTConfig

    torch.set_num_threads(args.threads)
    rows = []
    for seed in args.seeds:
        for world, options in WORLDS:
            t0 = time.perf_counter()
            env = make_environment(world, seed=seed, n_train=args.train, n_test=4 * args.questions, **options)
            # orchestra-read's prompts are read with the `brief` list (descriptions and prices); choice's, `compact`
            rollout = RolloutConfig(max_turns=1, max_new_tokens=40, tool_latency="declared",
                                    system_prompt="You are an orchestrator. Call one tool; its answer is final.",
                                    tool_schema="brief" if world == "orchestra-read" else "compact")
            cfg = RunConfig(policy="tiny", warm_start=SFTConfig(max_steps=args.steps, batch_size=16, seed=seed,
                                                                shared_prompt=True),
                            grpo={"seed": seed, "rollout": rollout})
            torch.manual_seed(seed)
            model, tok = warm_started_policy(cfg, env, progress=False)
            gsm = [t for t in env.test if t.category == "gsm8k" and set(BACKENDS) <= set(t.tools or ())]
            firsts = list({t.id.split("@")[0]: t for t in gsm}.values())[:args.questions]
            cos = configured_profile_cosine(model, tok, env, firsts, rollout, BACKENDS)
            wf = float("nan")
            if env.test_configurations is not None:
                from orchlib.engines.transformers import TransformersEngine
                from orchlib.rollout import rollout as run

                model.eval()
                trajs = run(env, TransformersEngine(model, tok), tasks=firsts, config=rollout, seed=seed)
                wf = sum(r.well_formed * r.episodes for r in heldout_summary(trajs).values()) / len(trajs)
            label = world + (f" ({options['golden']})" if options else "")
            rows.append((label, seed, len(cos), sum(cos) / len(cos), min(cos), wf, time.perf_counter() - t0))
            print(f"done: {label} seed {seed}: 1 - cos {1 - rows[-1][3]:.2e}", file=sys.stderr, flush=True)
    print(f"tiny policy; SFT {args.steps} steps of batch 16 on {args.train} train questions' golden trajectories; "
          f"torch threads {torch.get_num_threads()}")
    print("| world (golden) | seed | questions | cos mean | cos min | 1 - cos | well formed % | s |")
    print("|---|---|---|---|---|---|---|---|")
    for label, seed, n, mean, low, wf, sec in rows:
        wf_s = "—" if wf != wf else f"{100 * wf:.0f}"
        print(f"| {label} | {seed} | {n} | {mean:.6f} | {low:.6f} | {1 - mean:.2e} | {wf_s} | {sec:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
