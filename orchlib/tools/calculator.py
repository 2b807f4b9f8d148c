"""The `calculator` tool's function: exact arithmetic on an expression string, without eval.

The expression is parsed with `ast` and only numbers, + - * / // % **, unary signs, parentheses and
abs/min/max/round are evaluated, on `fractions.Fraction`, so 0.1 + 0.2 is exactly 0.3. Exponents
and results are bounded so "9**9**9" is refused instead of freezing the host.
"""

from __future__ import annotations

import ast
import operator
import re
from fractions import Fraction

__all__ = ["calculate", "evaluate", "format_number"]

MAX_EXPONENT = 1000
MAX_DIGITS = 1000          # refuse results longer than this (numerator or denominator)
MAX_LENGTH = 2000          # characters of expression

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_FUNCTIONS = {"abs": abs, "min": min, "max": max}
# What people and models write for operators Python spells differently.
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_SPELLINGS = {"^": "**", "×": "*", "÷": "/", "−": "-", "–": "-"}


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression exactly, e.g. "(16 - 3 - 4) * 2" or "1/3 + 2^10".

    Args:
        expression: numbers with + - * / // % ** (or ^), parentheses, and abs, min, max, round.
    """
    return format_number(evaluate(expression))


def evaluate(expression: str) -> Fraction:
    """The exact value of `expression`; ValueError says what is not allowed."""
    if len(expression) > MAX_LENGTH:
        raise ValueError(f"expression longer than {MAX_LENGTH} characters")
    # "1,000" and "$5" as people write them; commas between arguments stay.
    text = _THOUSANDS.sub("", expression.strip()).replace("$", "")
    for written, python in _SPELLINGS.items():
        text = text.replace(written, python)
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise ValueError(f"not an arithmetic expression: {expression!r} ({e.msg})") from None
    return _eval(tree.body)


def _eval(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        # Fraction(str) keeps the decimal the user wrote (0.1 is 1/10, not the nearest binary float).
        return Fraction(repr(node.value)) if isinstance(node.value, float) else Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _eval(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            return _check(_power(left, right))
        op = _BINARY.get(type(node.op))
        if op is None:
            raise ValueError(f"operator {type(node.op).__name__} is not allowed")
        if right == 0 and op in (operator.truediv, operator.floordiv, operator.mod):
            raise ValueError("division by zero")
        return _check(Fraction(op(left, right)))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        if node.func.id not in _FUNCTIONS and node.func.id != "round":
            raise ValueError(f"function {node.func.id!r} is not allowed (abs, min, max, round)")
        args = [_eval(a) for a in node.args]
        if node.func.id == "round":
            if not 1 <= len(args) <= 2 or (len(args) == 2 and args[1].denominator != 1):
                raise ValueError("round takes a number and optional whole number of digits")
            return Fraction(round(args[0], int(args[1])) if len(args) == 2 else round(args[0]))
        if not args:
            raise ValueError(f"{node.func.id} needs at least one number")
        return Fraction(_FUNCTIONS[node.func.id](*args))
    if isinstance(node, ast.Constant):
        raise ValueError(f"only numbers are allowed, not {node.value!r}")
    raise ValueError(f"{type(node).__name__} is not allowed in an arithmetic expression")


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if exponent.denominator != 1:
        raise ValueError("only whole-number exponents are exact")
    if abs(exponent) > MAX_EXPONENT:
        raise ValueError(f"exponent larger than {MAX_EXPONENT}")
    if base == 0 and exponent < 0:
        raise ValueError("division by zero")
    return base ** int(exponent)


def _check(value: Fraction) -> Fraction:
    # Bit length × log10(2) bounds the digit count without converting to a string.
    if max(value.numerator.bit_length(), value.denominator.bit_length()) * 0.30103 > MAX_DIGITS:
        raise ValueError(f"result has more than {MAX_DIGITS} digits")
    return value


def format_number(value: Fraction) -> str:
    """Integers as integers, terminating fractions as exact decimals ("2.5"), others as
    "1/3 ≈ 0.333333333333" (the fraction is the exact value, the decimal a 12-digit rounding)."""
    if value.denominator == 1:
        return str(value.numerator)
    den, twos, fives = value.denominator, 0, 0
    while den % 2 == 0:
        den, twos = den // 2, twos + 1
    while den % 5 == 0:
        den, fives = den // 5, fives + 1
    if den == 1:  # a terminating decimal with max(twos, fives) places
        places = max(twos, fives)
        scaled = abs(value.numerator) * 10**places // value.denominator
        digits = str(scaled).rjust(places + 1, "0")
        return f"{'-' if value < 0 else ''}{digits[:-places]}.{digits[-places:]}"
    return f"{value.numerator}/{value.denominator} ≈ {float(value):.12g}"
