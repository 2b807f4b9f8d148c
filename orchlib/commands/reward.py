"""`orchlib reward show|check FILE`: print a reward file's formula, or compile and try it on a sample group.

`check` exits 2 with `FILE:LINE: field: problem` on a malformed file, 1 if the reward is not finite on
the sample groups, 0 otherwise.
"""

from __future__ import annotations

import argparse
from typing import Any

from orchlib.cli import UsageError

# A small group of four rollouts of one task, two tools: values are plausible, not recorded.
SAMPLE_GROUP: list[dict[str, Any]] = [
    {"outcome": 1, "cost": 0.012, "latency": 3.1, "turns": 2, "tokens": 180, "errors": 0,
     "calls": {"search": 1, "gpt-5": 0}},
    {"outcome": 1, "cost": 0.090, "latency": 9.5, "turns": 3, "tokens": 260, "errors": 0,
     "calls": {"gpt-5": 2}},
    {"outcome": 0, "cost": 0.004, "latency": 1.2, "turns": 1, "tokens": 90, "errors": 1,
     "calls": {}},
    {"outcome": 1, "cost": 0.030, "latency": 5.0, "turns": 3, "tokens": 300, "errors": 0,
     "calls": {"search": 2, "gpt-5": 1}},
]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("reward", help="show or check a reward file (rewards/*.yaml)")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="name, doc, expression, LaTeX, symbols, default P")
    show.add_argument("file")
    check = actions.add_parser("check", help="parse, compile and evaluate on a built-in sample group")
    check.add_argument("file")
    p.set_defaults(handler=run)


def _load(path: str):
    from orchlib.reward import Reward, RewardFileError, RewardSyntaxError

    try:
        return Reward.load(path)
    except RewardFileError as e:
        raise UsageError(str(e)) from None
    except RewardSyntaxError as e:  # an expression the loader did not place on a line of the file
        raise UsageError(f"{path}: reward: {e}") from None
    except OSError as e:
        raise UsageError(f"{path}:0: file: cannot read ({e.strerror or e})") from None


def run(args: argparse.Namespace) -> int:
    reward = _load(args.file)
    return show(reward) if args.action == "show" else check(reward)


def show(reward) -> int:
    print(f"name        {reward.name}")
    if reward.doc:
        print(f"doc         {' '.join(reward.doc.split())}")
    for name, text in reward.term_sources.items():
        print(f"term        {name} = {text}")
    print(f"reward      {reward.source}")
    print(f"sympy       {reward.expression}")
    print(f"latex       {reward.latex()}")
    print(f"symbols     {', '.join(reward.symbols)}")
    print(f"default P   {reward.preference.render()}")
    return 0


def check(reward) -> int:
    from orchlib.reward import RewardValueError

    tied = [dict(SAMPLE_GROUP[0]) for _ in range(4)]  # every rollout the same: normalised terms are 0
    status = 0
    for label, group in (("sample group", SAMPLE_GROUP), ("tied group", tied)):
        try:
            explanation = reward.explain(group)
        except RewardValueError as e:
            print(f"{label}: FAILED: {e}")
            status = 1
            continue
        print(f"{label} (P = {reward.preference.render()}):")
        inputs = [n for n in explanation.inputs if not n.startswith("P.")]
        for i in range(len(group)):
            shown = ", ".join(f"{n}={explanation.inputs[n][i]:g}" for n in inputs)
            print(f"  rollout {i}: reward {explanation.reward[i]:.4f}   ({shown})")
        if reward.term_sources:
            print("  terms (value → contribution per rollout):")
            for name in explanation.values:
                cells = "  ".join(f"{v:.3f}→{c:.3f}" for v, c in
                                  zip(explanation.values[name], explanation.contributions[name]))
                print(f"    {name:<14} {cells}")
    unused = reward.unused_terms
    if unused:
        print(f"note: terms not used by the reward: {', '.join(unused)}")
    print("ok" if status == 0 else "FAILED")
    return status

