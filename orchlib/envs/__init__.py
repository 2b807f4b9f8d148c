"""Task suites and stateful domains. A suite is a function `make(seed=..., ...) -> Suite`, listed in
SUITES; every world, suites and domains alike, is also an Environment maker
`environment(seed=..., reward=..., ...) -> orchlib.Environment` in its module, listed in ENVIRONMENTS."""

from typing import Any, Callable

from orchlib.env import Environment
from orchlib.envs import airline, choice, mini, read, shop, toy
from orchlib.envs.choice import make_choice_suite
from orchlib.envs.mini import CATEGORIES, Suite, make_suite
from orchlib.envs.read import make_read_suite

__all__ = ["SUITES", "ENVIRONMENTS", "Suite", "CATEGORIES", "make_suite", "make_choice_suite", "make_read_suite",
           "make_environment"]

SUITES = {"orchestra-mini": make_suite, "orchestra-choice": make_choice_suite, "orchestra-read": make_read_suite}

ENVIRONMENTS: dict[str, Callable[..., Environment]] = {
    "orchestra-mini": mini.environment, "orchestra-choice": choice.environment, "orchestra-read": read.environment,
    "shop": shop.environment,
    "airline": airline.environment, "toy": toy.environment}


def make_environment(name: str, seed: int = 0, reward: Any = None, **options: Any) -> Environment:
    """The Environment `name` of ENVIRONMENTS, made with `seed`, `reward` and its maker's own `options`."""
    if name not in ENVIRONMENTS:
        raise ValueError(f"unknown environment {name!r}: choose from {sorted(ENVIRONMENTS)}")
    return ENVIRONMENTS[name](seed=seed, reward=reward, **options)
