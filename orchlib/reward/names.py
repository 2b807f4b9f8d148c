"""Names of the reward language's inputs and their sympy symbols.

Every input is a real-valued sympy Symbol whose name is written the way a reward file writes it:
`outcome`, `calls[gpt-5]`, `P.cost`, `P.tools[gpt-5]`, `P.budget`. The same strings key the feature
arrays (`orchlib.reward.features`) and the preference values, so one name means one thing everywhere.
"""

from __future__ import annotations

import sympy

__all__ = ["FEATURES", "GROUP_SIZE", "P_FIELDS", "P_RESERVED", "symbol", "calls_name", "p_name", "p_tool_name",
           "is_p_name", "is_feature_name", "tool_of", "latex_name"]

# Per-trajectory numbers every group provides (see orchlib.reward.features for where each comes from).
FEATURES: tuple[str, ...] = ("outcome", "cost", "latency", "turns", "tokens", "errors")
# The number of rollouts in the group: one value per group, like an entry of P.
GROUP_SIZE = "G"
# Preference fields that are numbers; `P.tools[t]` is per tool and any other `P.<name>` is user-named.
P_FIELDS: tuple[str, ...] = ("outcome", "cost", "latency")
# Preference attributes that are not numbers: `P.name` is the profile's label, `P.extra` the mapping.
P_RESERVED: frozenset[str] = frozenset({"tools", "name", "extra"})


def symbol(name: str) -> sympy.Symbol:
    """The symbol for an input; real so sympy may simplify comparisons and Min/Max soundly."""
    return sympy.Symbol(name, real=True)


def calls_name(tool: str) -> str:
    return f"calls[{tool}]"


def p_name(field: str) -> str:
    return f"P.{field}"


def p_tool_name(tool: str) -> str:
    return f"P.tools[{tool}]"


def is_p_name(name: str) -> bool:
    return name.startswith("P.")


def is_feature_name(name: str) -> bool:
    return name in FEATURES or (name.startswith("calls[") and name.endswith("]"))


def tool_of(name: str) -> str | None:
    """`calls[x]` or `P.tools[x]` → `x`; None for other names."""
    for prefix in ("calls[", "P.tools["):
        if name.startswith(prefix) and name.endswith("]"):
            return name[len(prefix):-1]
    return None


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "_": r"\_", "#": r"\#", "%": r"\%", "&": r"\&", "$": r"\$",
                  "{": r"\{", "}": r"\}", "^": r"\^{}", "~": r"\~{}"}


def _text(s: str) -> str:
    return "".join(_LATEX_SPECIAL.get(c, c) for c in s)


def latex_name(name: str, loop_vars: frozenset[str] = frozenset()) -> str:
    """LaTeX for an input name: `P.cost` → P_{\\mathrm{cost}}, `calls[t]` → \\mathrm{calls}_{t}.

    A tool index that is a loop variable prints in math italics; a literal tool name prints as text.
    """
    tool = tool_of(name)
    if tool is not None:
        index = tool if tool in loop_vars else r"\text{" + _text(tool) + "}"
        if name.startswith("calls["):
            return r"\mathrm{calls}_{" + index + "}"
        return r"P_{\mathrm{tools}," + index + "}"
    if is_p_name(name):
        return r"P_{\mathrm{" + _text(name[2:]) + "}}"
    if name == GROUP_SIZE:
        return "G"
    return r"\mathrm{" + _text(name) + "}"
