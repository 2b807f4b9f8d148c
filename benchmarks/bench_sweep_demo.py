"""Sweep P on the demo's trained policy: one GRPO-trained tiny orchestrator under a grid of preference
vectors, beside the baselines and the oracle on the same test tasks.

    .venv/bin/python benchmarks/bench_sweep_demo.py [--seed 0] [--steps 80] [--out out/bench_sweep_demo]
    .venv/bin/python benchmarks/bench_sweep_demo.py --config examples/demo_p_as_weights.yaml  # P as weights

Runs the demo (`orchlib.demo.run_demo`, the full warm start and GRPO under "accuracy" and "thrifty"),
then `orchlib.sweep.sweep` of the trained policy over `preference_grid(cost=[0, 0.25, 0.5, 1, 2, 4])`
on the demo's 80 test tasks, two sampled runs per task and P. Prints one table per P (accuracy, $, s,
tool mix, `*` on the front), the hypervolumes of the sweep, of each baseline and of the oracle against
one reference point, and writes the figure to `<out>/sweep.html`. The policy saw two named profiles
in training; the grid asks how it answers weights between and beyond them. The demo shows its two
profiles in words written for them; a grid point has none, so it is shown as its generated sentences and
its weights (`preference_style="words"`), a line the policy never saw.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=None, help="GRPO steps (default: the demo's)")
    ap.add_argument("--out", default="out/bench_sweep_demo")
    ap.add_argument("--config", default=None, help="a DemoConfig file, as `orchlib demo --config` takes it")
    args = ap.parse_args(argv)

    from orchlib.baselines import make_baselines, try_routes
    from orchlib.commands.demo import config_from
    from orchlib.demo import run_demo
    from orchlib.demo.config import DEMO_TOOLS
    from orchlib.engines import TransformersEngine
    from orchlib.env import Environment
    from orchlib.evaluate import evaluate
    from orchlib.sweep import preference_grid, sweep

    out = Path(args.out)
    # the DemoConfig `orchlib demo` itself would run: the file's settings, then the flags
    flags = argparse.Namespace(config=args.config, steps=args.steps, size=None, seed=args.seed,
                               out=str(out / "demo"), reading_drills=False)
    t0 = time.perf_counter()
    config = config_from(flags)
    ro = config.grpo.rollout  # the run's own rendering of P and the tools, for the baselines and the sweep
    result = run_demo(config, progress=False)
    t_demo = time.perf_counter() - t0
    model, tok = result.policy
    env = result.env
    prefs = preference_grid(cost=[0, 0.25, 0.5, 1, 2, 4])
    t0 = time.perf_counter()
    per_category = {c: [t for t in env.train if t.category == c][:20] for c in DEMO_TOOLS}
    calibration = try_routes([t for ts in per_category.values() for t in ts], env.tools, tok, ro)
    engines = make_baselines(env.test, env.tools, tok, calibration=calibration, config=ro, seed=args.seed)
    references = {n: evaluate(e, Environment(test=env.test, tools=env.tools), config=ro, name=n) for n,
                  e in engines.items()}
    res = sweep(TransformersEngine(model, tok, seed=args.seed), env.test, env.tools, prefs, reward=env.reward,
                config=ro, group_size=2, name="demo policy", references=references)
    t_sweep = time.perf_counter() - t0
    print(res.table())
    print("\nhypervolume (cost-accuracy):")
    for name, hv in sorted(res.hypervolumes().items(), key=lambda kv: -kv[1]):
        print(f"  {name:<16} {hv:.6f}")
    out.mkdir(parents=True, exist_ok=True)
    res.figure(title=f"The demo's policy (seed {args.seed}) under {len(prefs)} preferences").write_html(
        out / "sweep.html", include_plotlyjs="cdn")
    print(f"\ndemo {t_demo:.0f} s, sweep and baselines {t_sweep:.0f} s; figure: {out / 'sweep.html'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
