"""Task suites and stateful domains. A suite is a function `make(seed=..., ...) -> Suite`, listed here."""

from orchlib.envs.mini import CATEGORIES, Suite, make_suite

__all__ = ["SUITES", "Suite", "CATEGORIES", "make_suite"]

SUITES = {"orchestra-mini": make_suite}
