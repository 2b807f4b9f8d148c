"""The slow reference: evaluate a reward's sympy expression one rollout at a time with subs/evalf.

Used by tests (the compiled function must agree with it) and by the benchmark (what compiling buys).
Group operators cannot be evaluated on one row, so the innermost ones are resolved first: their
argument is evaluated row by row, the operator is applied to those G numbers, and the result is
substituted back as a per-row number; then the next level, and finally the whole expression per row.
`where` (forms.Where) picks its branch once its condition has become True or False. A condition
that compares a NaN cannot be decided (sympy refuses the comparison): that row's value is NaN, as
the compiled form gives.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import sympy
from sympy.logic.boolalg import BooleanAtom

from orchlib.reward.forms import GroupOperator
from orchlib.reward.names import symbol
from orchlib.reward.ops import GROUP_OPERATORS

__all__ = ["evaluate_rows"]


def _row_value(expr: sympy.Basic, subs: Mapping[sympy.Symbol, float]) -> float:
    try:
        # All inputs at once (xreplace): `subs` would replace one symbol at a time, and 0/0 could
        # become 0 * (1/latency) = 0 before latency is 0.
        value = expr.xreplace(subs).evalf()
    except TypeError:  # "Invalid NaN comparison": a condition on a NaN decides nothing
        return float("nan")
    if isinstance(value, BooleanAtom):
        return 1.0 if value else 0.0
    try:
        return float(value)
    except TypeError:  # zoo, or something still symbolic: not a finite real
        return float("nan")


def _group_ops(expr: sympy.Basic) -> list[GroupOperator]:
    return list(expr.atoms(GroupOperator))


def evaluate_rows(expr: sympy.Expr, rows: Sequence[Mapping[str, float]],
                  preference: Mapping[str, float]) -> np.ndarray:
    """Reward of each row of one group; `rows` map feature names to numbers, `preference` P names."""
    expr = expr.subs({symbol(k): sympy.Float(v) for k, v in preference.items()})
    subs = [{symbol(k): sympy.Float(v) for k, v in row.items()} for row in rows]
    while True:
        innermost = [f for f in _group_ops(expr) if not _group_ops(f.args[0])]
        if not innermost:
            break
        for f in innermost:
            column = np.array([[_row_value(f.args[0], s) for s in subs]], dtype=np.float64)
            result = np.broadcast_to(GROUP_OPERATORS[type(f).__name__][0](column), column.shape)[0]
            placeholder = sympy.Dummy(real=True)
            for s, v in zip(subs, result):
                s[placeholder] = sympy.Float(float(v))
            expr = expr.xreplace({f: placeholder})
    return np.array([_row_value(expr, s) for s in subs], dtype=np.float64)
