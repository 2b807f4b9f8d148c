"""How much of a GRPO update can make a policy's choice follow P: the profile gradient cosine.

    python benchmarks/bench_profile_cosine.py [--config examples/smollm2_choice.yaml] [--model FOLDER]
                                              [--questions 8] [--threads 2]

Takes the recipe's policy after its SFT warm start (run here as `orchlib train` runs it, or a saved model
folder given with --model) and, on the first --questions GSM8K test questions, prints one row per way of
rendering P (where it goes in the prompt and how it is written):

- the cosine between the gradients of log p(generalist) - log p(mixtral) at the first call's name under
  "accuracy" and under "thrifty" (`orchlib.evaluate.gradients.profile_gradient_cosine`): mean, min, and
  1 - cos, the share of an update on one profile's choice that does not move the other's alike;
- the choice gap, p(generalist | accuracy) - p(generalist | thrifty) in points (`choice_gap`).

The paper's GRPO updates each rollout's choice in its own profile's prompt; with a cosine near 1 nearly all
of every update moves both profiles' choice together, and the reward's P-blind part is learned first.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RENDERINGS = (("system", "weights"), ("system_end", "weights"), ("user", "name"), ("assistant", "name"))
TOOLS = ("generalist", "mixtral")
PROFILES = ("accuracy", "thrifty")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(ROOT / "examples" / "smollm2_choice.yaml"))
    ap.add_argument("--model", default=None, help="a saved model folder (default: the recipe's policy after its SFT)")
    ap.add_argument("--questions", type=int, default=8)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from orchlib.configfile import load_config
    from orchlib.evaluate.gradients import profile_gradient_cosine
    from orchlib.experiments.probes import choice_gap
    from orchlib.models import load_policy
    from orchlib.train.accel import cpu_description
    from orchlib.train.run import RunConfig, load_environment, warm_started_policy

    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = load_config(args.config, RunConfig)
    env = load_environment(cfg)
    rollout = cfg.grpo.rollout
    t0 = time.perf_counter()
    if args.model:
        if not (Path(args.model) / "config.json").is_file():
            raise SystemExit(f"--model {args.model}: no saved model there (config.json missing)")
        model, tok = load_policy(args.model)
        source = args.model
    else:
        model, tok = warm_started_policy(cfg, env, progress=False)
        source = f"{cfg.policy} after the recipe's SFT" if cfg.warm_start is not None else cfg.policy
    t_model = time.perf_counter() - t0
    gsm = [t for t in env.test if t.category == "gsm8k" and set(TOOLS) <= set(t.tools or ())]
    # one task a question: profile_gradient_cosine shows it under each profile itself
    firsts = list({t.id.split("@")[0]: t for t in gsm}.values())[:args.questions]
    rows = []
    for at, style in RENDERINGS:
        cfg_r = rollout.model_copy(update={"preference_at": at, "preference_style": style})
        t1 = time.perf_counter()
        cos = profile_gradient_cosine(model, tok, firsts, env.tools, cfg_r, TOOLS, PROFILES)
        gap = choice_gap(model, tok, firsts, env.tools, cfg_r, TOOLS[0], PROFILES)
        rows.append((at, style, sum(cos) / len(cos), min(cos), gap, time.perf_counter() - t1))
    mark = (rollout.preference_at, rollout.preference_style)
    print(f"policy: {source}; {len(firsts)} GSM8K test questions; CPU: {cpu_description()}; "
          f"torch threads {torch.get_num_threads()}; model ready in {t_model:.0f} s")
    print("| P rendered at | as | cos mean | cos min | 1 - cos | choice gap (points) | s |")
    print("|---|---|---|---|---|---|---|")
    for at, style, mean, low, gap, sec in rows:
        star = " (the recipe's)" if (at, style) == mark else ""
        print(f"| {at}{star} | {style} | {mean:.4f} | {low:.4f} | {1 - mean:.4f} | {gap:+.1f} | {sec:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
