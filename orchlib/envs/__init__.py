"""Task suites and stateful domains. A suite is a function `make(seed=..., ...) -> Suite`, listed here."""

from orchlib.envs.choice import make_choice_suite
from orchlib.envs.mini import CATEGORIES, Suite, make_suite

__all__ = ["SUITES", "Suite", "CATEGORIES", "make_suite", "make_choice_suite"]

SUITES = {"orchestra-mini": make_suite, "orchestra-choice": make_choice_suite}
