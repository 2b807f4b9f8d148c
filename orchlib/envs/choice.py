"""orchestra-choice: the slice of orchestra-mini where the user's preference decides the tool.

Two categories, two tools each, every tool `final` (its answer ends the episode, so the orchestrator
only chooses and calls — ToolOrchestra's `answer` tool):

- arithmetic: the free, exact `calculator` (right when the expression is copied exactly) or the dear
  `generalist` (97 %). The calculator is right under every profile.
- gsm8k: Mixtral-8x7B's real recorded answers (`mixtral`, 64 %, cheap) or the dear `generalist` (95 %).
  Under "accuracy" the generalist is worth its price; under "thrifty" Mixtral is.

The train split is counterbalanced: each GSM8K question appears under both profiles, the two profiles'
golden tools opposite, each way on half the questions — so a warm start on its golden trajectories
teaches the call format and that the choice depends on P, but not which way; that is RL's to learn from
the reward. Arithmetic's golden call is the calculator. The test split holds every test task once under
each profile, so only P differs between a question's two runs (controllability is measured on them).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Sequence

from orchlib.env import Environment, RewardFunction
from orchlib.envs.mini import Suite, make_suite
from orchlib.tasks import PROFILES, Golden, Task, under_profiles
from orchlib.trajectory import ToolCall

__all__ = ["CHOICE_TOOLS", "CHOICE_TOOL_NAMES", "CHOICE_PROFILES", "EXPENSIVE", "make_choice_suite", "offer_choice",
           "counterbalanced", "environment"]

CHOICE_TOOLS: dict[str, list[str]] = {"arithmetic": ["calculator", "generalist"], "gsm8k": ["mixtral", "generalist"]}
CHOICE_TOOL_NAMES = tuple(sorted({t for tools in CHOICE_TOOLS.values() for t in tools}))
CHOICE_PROFILES = ("accuracy", "thrifty")
EXPENSIVE = "generalist"  # the dear tool whose share, per profile, measures controllability


def offer_choice(t: Task) -> Task:
    """An orchestra-mini task with its category's two tools, each one a golden alternative (the
    calculator, where offered, first: it is right under every profile)."""
    options = [[c for c in (t.golden.calls if t.golden else []) if c.name == "calculator"]]
    options = [o for o in options if o] + [[ToolCall(name=n)] for n in CHOICE_TOOLS[t.category] if n != "calculator"]
    golden = Golden(calls=options[0], alternatives=options[1:], answer=t.answer)
    return t.model_copy(update={"tools": CHOICE_TOOLS[t.category], "golden": golden})


def counterbalanced(tasks: list[Task], seed: int, profiles: Sequence[str] = CHOICE_PROFILES) -> list[Task]:
    """`tasks` with each GSM8K question twice, once under each of the two `profiles`, their golden tools
    opposite, and which profile gets which drawn so that each way holds half the questions. Other
    tasks are kept as they are."""
    rng = random.Random(f"counterbalanced:{seed}")
    gsm = [t for t in tasks if t.category == "gsm8k" and t.golden is not None and t.golden.alternatives]
    ways = [i % 2 for i in range(len(gsm))]
    rng.shuffle(ways)
    chosen = {t.id for t in gsm}
    out = [t for t in tasks if t.id not in chosen]
    for t, way in zip(gsm, ways):
        first, second = [t.golden.calls, *t.golden.alternatives]  # the category's two tools
        for profile, calls in zip(profiles, (second, first) if way else (first, second)):
            out.append(t.model_copy(update={"id": f"{t.id}@{profile}", "preference": PROFILES[profile],
                                            "golden": Golden(calls=calls, answer=t.answer)}))
    return out


def make_choice_suite(seed: int = 0, n_train: int = 120, n_test: int = 80) -> Suite:
    """Build "orchestra-choice" from orchestra-mini's arithmetic and GSM8K tasks (`n_train` and `n_test`
    questions, half each; the splits hold more tasks than that, one per question and profile)."""
    base = make_suite(seed, n_train=n_train, n_test=n_test, categories=tuple(CHOICE_TOOLS), profiles=CHOICE_PROFILES)
    cards = [c.model_copy(update={"final": True}) for c in base.cards if c.name in CHOICE_TOOL_NAMES]
    train = [offer_choice(t) for t in base.train]
    # arithmetic: the calculator alone is golden (exact and free, so right under every profile)
    train = [t.model_copy(update={"golden": t.golden.model_copy(update={"alternatives": []})})
             if t.category == "arithmetic" else t for t in train]
    train = counterbalanced(train, seed)  # arithmetic keeps the profile orchestra-mini gave it
    test = under_profiles([offer_choice(t) for t in base.test], CHOICE_PROFILES)
    return Suite(name="orchestra-choice", seed=seed, train=train, test=test, cards=cards)


def environment(seed: int = 0, reward: RewardFunction | str | Path | None = None, n_train: int = 120,
                n_test: int = 80) -> Environment:
    """"orchestra-choice" as an Environment: `make_choice_suite(seed, n_train, n_test).environment(reward)`."""
    return make_choice_suite(seed, n_train, n_test).environment(reward)
