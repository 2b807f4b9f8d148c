"""The sympy forms the reward language builds beyond sympy's own: `where`, group operators, tool sums.

Why not sympy's `Piecewise` for `where(c, a, b)`: sympy folds any Piecewise it finds inside a
function's arguments or a condition outwards (`piecewise_fold`), turning `mean(where(c, 1, 0))` into
`where(c, mean(1), mean(0))`. That is right for a function of one number and wrong for an operator
over a whole group. `Where` is an ordinary sympy Function that sympy never folds, and group operators
are `GroupOperator` subclasses, so the expression that is compiled, printed and evaluated row by row
is the one the user wrote.

A loop variable's inputs (`calls[t]` inside `sum(... for t in tools)`) are `LoopSymbol`s: sympy
tells them apart from a literal tool that happens to be named `t` (`calls['t']`).
"""

from __future__ import annotations

from typing import Any

import sympy
from sympy.core.logic import fuzzy_and
from sympy.logic.boolalg import BooleanFalse, BooleanTrue

__all__ = ["Where", "GroupOperator", "GROUP_FORMS", "ToolSum", "LoopSymbol", "indicator"]


class Where(sympy.Function):
    """`where(c, a, b)`: a where the condition c holds, else b; c is a sympy Boolean."""

    nargs = 3

    @classmethod
    def eval(cls, c: Any, a: Any, b: Any) -> Any:
        if isinstance(c, BooleanTrue):
            return a
        if isinstance(c, BooleanFalse):
            return b
        if a == b:
            return a
        return None

    def _eval_is_extended_real(self) -> bool | None:
        return fuzzy_and([self.args[1].is_extended_real, self.args[2].is_extended_real])

    def _latex(self, printer: Any) -> str:
        c, a, b = self.args
        if a == 1 and b == 0:  # a condition used as a number: the Iverson bracket
            return r"\left[" + printer._print(c) + r"\right]"
        return (r"\begin{cases} " + printer._print(a) + r" & \text{if}\: " + printer._print(c) + r" \\ "
                + printer._print(b) + r" & \text{otherwise} \end{cases}")

    def _sympystr(self, printer: Any) -> str:
        return "where(" + ", ".join(printer._print(x) for x in self.args) + ")"


def indicator(c: Any) -> sympy.Expr:
    """A condition used as a number: 1 where it holds, else 0."""
    return Where(c, sympy.Integer(1), sympy.Integer(0))


class GroupOperator(sympy.Function):
    """An operator over the G rollouts of one group (see ops.py); one argument, real-valued."""

    nargs = 1
    symbol_tex = ""  # LaTeX of the operator's name

    def _eval_is_extended_real(self) -> bool:
        return True

    def _latex(self, printer: Any) -> str:
        return self.symbol_tex + r"\left(" + printer._print(self.args[0]) + r"\right)"


def _group_form(name: str, tex: str) -> type[GroupOperator]:
    return type(name, (GroupOperator,), {"symbol_tex": tex, "__module__": __name__})


# Language name → sympy class; the class's name is the language name, so `str(expr)` reads as written.
GROUP_FORMS: dict[str, type[GroupOperator]] = {
    "minmax": _group_form("minmax", r"\operatorname{minmax}"),
    "zscore": _group_form("zscore", r"\operatorname{zscore}"),
    "rank": _group_form("rank", r"\operatorname{rank}"),
    "mean": _group_form("mean", r"\operatorname{mean}"),
    "max": _group_form("max", r"\max_{\mathrm{group}}"),
    "min": _group_form("min", r"\min_{\mathrm{group}}"),
    "sum": _group_form("sum", r"\sum_{\mathrm{group}}"),
    "count": _group_form("count", r"\#_{\mathrm{group}}"),
}


class LoopSymbol(sympy.Symbol):
    """`calls[t]` or `P.tools[t]` with t a loop variable; unequal to a Symbol of the same name."""


class ToolSum(sympy.Function):
    """`sum(body for t in tools)` kept whole; args are (body, loop variable).

    Compiled as one vectorised evaluation over a tool axis (compile.py) when the body holds no other
    tool sum; expanded into one copy per tool for `expression_for` and the row-by-row reference.
    """

    nargs = 2

    @classmethod
    def eval(cls, body: Any, var: Any) -> None:  # never evaluates: the tool set is not known here
        return None

    def _eval_is_extended_real(self) -> bool | None:
        return self.args[0].is_extended_real

    @property
    def free_symbols(self) -> set[sympy.Basic]:
        return self.args[0].free_symbols  # the loop variable is bound, not an input

    def _latex(self, printer: Any) -> str:
        body, var = self.args
        return (r"\sum_{" + printer._print(var) + r" \in \mathrm{tools}} \left("
                + printer._print(body) + r"\right)")

    def _sympystr(self, printer: Any) -> str:
        body, var = self.args
        return f"sum({printer._print(body)} for {printer._print(var)} in tools)"
