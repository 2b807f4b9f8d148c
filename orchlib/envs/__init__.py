"""Task worlds: suites (orchestra-mini, orchestra-choice) and stateful domains (shop, airline). Every world
is an Environment maker `environment(seed=..., reward=..., ...) -> orchlib.Environment` in its module,
listed in ENVIRONMENTS, the one registry of worlds (what `env:` of a run config and `orchlib eval --env`
name). A suite's tasks and cards are also at hand as a `Suite` (`make_suite`, `make_choice_suite`)."""

from typing import Any, Callable

from orchlib.env import Environment
from orchlib.envs import airline, choice, mini, read, shop, toy
from orchlib.envs.choice import make_choice_suite
from orchlib.envs.mini import CATEGORIES, Suite, make_suite
from orchlib.envs.read import make_read_suite

__all__ = ["ENVIRONMENTS", "Suite", "CATEGORIES", "make_suite", "make_choice_suite", "make_read_suite",
           "make_environment"]

ENVIRONMENTS: dict[str, Callable[..., Environment]] = {
    "orchestra-mini": mini.environment, "orchestra-choice": choice.environment, "orchestra-read": read.environment,
    "shop": shop.environment,
    "airline": airline.environment, "toy": toy.environment}


def make_environment(name: str, seed: int = 0, reward: Any = None, **options: Any) -> Environment:
    """The Environment `name` of ENVIRONMENTS, made with `seed`, `reward` and its maker's own `options`."""
    if name not in ENVIRONMENTS:
        raise ValueError(f"unknown environment {name!r}: choose from {sorted(ENVIRONMENTS)}")
    return ENVIRONMENTS[name](seed=seed, reward=reward, **options)
