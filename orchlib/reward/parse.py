"""The reward language: Python-syntax text → a sympy expression, through an `ast` whitelist.

Nothing is evaluated: the text is parsed by `ast.parse` and each node is either turned into sympy or
refused with a `RewardSyntaxError` naming its position and what is not allowed. That error is the
only exception `parse` lets escape, whatever the input (see tests/test_reward_fuzz.py).

Two modes share one walk:
- generic (`tools=None`): `sum(e for t in tools)` stays one `ToolSum` node (printing, LaTeX, and the
  vectorised compiled form), its loop inputs being `LoopSymbol`s;
- concrete (`tools=(...)`): the sum is expanded over the given tools (the row-by-row reference).

`where` and the group operators are built as the forms in forms.py, never as sympy `Piecewise`,
which sympy would fold across group operators (see forms.py).

Constant sub-expressions are folded to plain numbers as they are built (`exp(2)` → 7.389…), with
guards on size, so sympy is never asked to build a huge integer (`2**10**10`) or a tower of
transcendental constants that it would try to compare numerically.
"""

from __future__ import annotations

import ast
import io
import math
import tokenize
import warnings
from dataclasses import dataclass
from typing import Collection, Sequence

import sympy
from sympy.logic.boolalg import Boolean, BooleanAtom

from orchlib.reward.errors import RewardSyntaxError
from orchlib.reward.forms import GROUP_FORMS, LoopSymbol, ToolSum, Where, indicator
from orchlib.reward.names import (FEATURES, GROUP_SIZE, calls_name, is_feature_name, p_name, p_tool_name,
                                  symbol)
from orchlib.reward.ops import GROUP_OPERATORS

__all__ = ["parse", "Parsed", "ToolSum", "FUNCTIONS", "RESERVED", "GROUP_FUNCTIONS",
           "MAX_CHARS", "MAX_NODES", "MAX_DEPTH"]

# Guards: a reward is one line or a few; these bound the work any input can cause.
MAX_CHARS = 4000
MAX_NODES = 1000
MAX_DEPTH = 40          # ast nesting; sympy's printers recurse several frames per level
_MAX_MAGNITUDE = 1e300  # constants stay well inside float64 after compiling
_MIN_MAGNITUDE = 1e-300

# name → (min args, max args). With one argument `min`, `max` and `sum` are group operators; `min`
# and `max` with 2 or more are elementwise; `sum` of a generator over `tools` is the sum over tools.
FUNCTIONS: dict[str, tuple[int, int]] = {
    **{name: (1, 1) for name in GROUP_OPERATORS}, "min": (1, 64), "max": (1, 64),
    "clip": (3, 3), "exp": (1, 1), "log": (1, 1), "sin": (1, 1), "cos": (1, 1), "abs": (1, 1), "where": (3, 3),
}
# Names with a fixed meaning besides the features: the group size and the constant pi.
CONSTANT_NAMES: tuple[str, ...] = (GROUP_SIZE, "pi")
# Names a term or a loop variable may not take.
RESERVED: frozenset[str] = frozenset({*FEATURES, *CONSTANT_NAMES, "P", "calls", "tools", *FUNCTIONS})

GROUP_FUNCTIONS: dict[str, sympy.FunctionClass] = dict(GROUP_FORMS)

_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**", ast.FloorDiv: "//",
           ast.Mod: "%", ast.MatMult: "@", ast.LShift: "<<", ast.RShift: ">>", ast.BitOr: "|",
           ast.BitXor: "^", ast.BitAnd: "&"}
_COMPARE = {ast.Lt: sympy.Lt, ast.LtE: sympy.Le, ast.Gt: sympy.Gt, ast.GtE: sympy.Ge,
            ast.Eq: sympy.Eq, ast.NotEq: sympy.Ne}
_COMPARE_TEXT = {ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}
_DESCRIBE = {
    "Lambda": "a lambda", "ListComp": "a list comprehension", "SetComp": "a set comprehension",
    "DictComp": "a dict comprehension", "GeneratorExp": "a generator outside sum(... for t in tools)",
    "List": "a list", "Tuple": "a tuple", "Set": "a set", "Dict": "a dict", "JoinedStr": "an f-string",
    "FormattedValue": "an f-string", "NamedExpr": "an assignment expression (:=)",
    "Starred": "unpacking with *", "Slice": "a slice", "Await": "await", "Yield": "yield",
    "YieldFrom": "yield", "IfExp": "`a if c else b` (write where(c, a, b))",
}


@dataclass(frozen=True)
class Parsed:
    """What one expression became: its sympy form and the names it reads."""

    expr: sympy.Expr
    symbols: frozenset[str]   # input names as written: `cost`, `calls[t]`, `P.tools[gpt-5]`, ...
    terms: frozenset[str]     # named terms it refers to
    loop_vars: frozenset[str]
    has_tool_sum: bool


def parse(text: str, *, terms: Collection[str] = (), tools: Sequence[str] | None = None) -> Parsed:
    """Parse one expression; `terms` are names of already defined terms it may use.

    Line breaks count as spaces (an expression may span lines in a YAML block), but positions in
    errors refer to the original text.
    """
    if not isinstance(text, str):
        raise RewardSyntaxError(f"an expression must be a string, not {type(text).__name__}")
    if len(text) > MAX_CHARS:
        raise RewardSyntaxError(f"the expression is longer than {MAX_CHARS} characters")
    joined = text.replace("\r", " ").replace("\n", " ")
    lead = len(joined) - len(joined.lstrip())
    line = joined[lead:]
    if not line.strip():
        raise RewardSyntaxError("the expression is empty")
    where = _Positions(text, line, lead)
    try:
        with warnings.catch_warnings():
            # e.g. "invalid escape sequence" in a quoted tool name: not our concern, and with
            # warnings turned into errors it would escape as a SyntaxError.
            warnings.simplefilter("ignore")
            tree = ast.parse(line, mode="eval")
    except SyntaxError as e:
        # CPython gives offset 0 when the text ends too early ("cost +"): point past its last character.
        offset = max(0, min(e.offset - 1, len(line))) if e.offset else len(line.rstrip())
        raise RewardSyntaxError(f"invalid syntax: {e.msg}", where.from_chars(offset)) from None
    except (MemoryError, RecursionError, ValueError) as e:
        # CPython's parser gives up on very deep nesting with MemoryError/RecursionError.
        raise RewardSyntaxError(f"the expression cannot be parsed ({type(e).__name__}: too deeply nested?)",
                                where.from_chars(0)) from None
    _check_size(tree, where)
    if "#" in line:
        _refuse_comments(line, where)
    return _Builder(line, where, frozenset(terms), None if tools is None else tuple(tools)).run(tree)


class _Positions:
    """Maps positions in the one-line text that was parsed back to (line, column) of the original."""

    def __init__(self, original: str, parsed: str, lead: int):
        self.original, self.parsed, self.lead = original, parsed, lead

    def from_chars(self, offset: int) -> tuple[int, int]:
        absolute = self.lead + offset
        line = self.original.count("\n", 0, absolute) + 1
        start = self.original.rfind("\n", 0, absolute) + 1
        return line, absolute - start + 1

    def of(self, node: ast.AST) -> tuple[int, int]:
        col = getattr(node, "col_offset", 0) or 0
        # ast columns are UTF-8 byte offsets; errors speak in characters.
        chars = len(self.parsed.encode("utf-8")[:col].decode("utf-8", errors="ignore"))
        return self.from_chars(chars)


def _check_size(tree: ast.AST, where: _Positions) -> None:
    count = 0
    stack: list[tuple[ast.AST, int]] = [(tree, 0)]  # iterative: a recursive walk could itself overflow
    while stack:
        node, depth = stack.pop()
        count += isinstance(node, ast.expr)  # operators and load/store markers are not parts
        if count > MAX_NODES:
            raise RewardSyntaxError(f"the expression has more than {MAX_NODES} parts", where.of(node))
        if depth > MAX_DEPTH:
            raise RewardSyntaxError(f"the expression is nested deeper than {MAX_DEPTH} levels", where.of(node))
        family = _chain_family(node)
        for child in ast.iter_child_nodes(node):
            # `a + b + c + ...` parses as a left-leaning tree; the builder walks such a chain in a loop,
            # so a long sum counts as one level, not one per term.
            same = family is not None and child is node.left and _chain_family(child) == family
            stack.append((child, depth if same else depth + 1))


def _chain_family(node: ast.AST) -> str | None:
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, (ast.Add, ast.Sub)):
            return "add"
        if isinstance(node.op, (ast.Mult, ast.Div)):
            return "mul"
    return None


def _refuse_comments(line: str, where: _Positions) -> None:
    # With line breaks read as spaces, a `#` comment would silently swallow the rest of the text.
    try:
        for tok in tokenize.generate_tokens(io.StringIO(line).readline):
            if tok.type == tokenize.COMMENT:
                raise RewardSyntaxError("comments (#) are not allowed in an expression",
                                        where.from_chars(tok.start[1]))
    except (tokenize.TokenError, SyntaxError) as e:
        raise RewardSyntaxError(f"invalid syntax: {e}", where.from_chars(0)) from None


def _snippet(node: ast.AST) -> str:
    try:
        text = ast.unparse(node)
    except Exception as e:  # unparse of a hand-made node can fail; the message must still go out
        text = f"<{type(node).__name__}: {type(e).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


_TRANSCENDENTAL = {"exp": (math.exp, sympy.exp), "log": (math.log, sympy.log),
                   "sin": (math.sin, sympy.sin), "cos": (math.cos, sympy.cos)}


def _const(x: sympy.Basic) -> bool:
    return isinstance(x, sympy.Number)


def _boolean(x: sympy.Basic) -> bool:
    # sympy's Symbol is also a Boolean; a condition is a Boolean that is not an expression.
    return isinstance(x, Boolean) and not isinstance(x, sympy.Expr)


class _Builder:
    def __init__(self, source: str, where: _Positions, terms: frozenset[str], tools: tuple[str, ...] | None):
        self.source, self.where, self.terms, self.tools = source, where, terms, tools
        self.env: dict[str, str] = {}       # loop variable → tool name (concrete) or itself (generic)
        self.used: set[str] = set()
        self.terms_used: set[str] = set()
        self.loop_vars: set[str] = set()
        self.has_tool_sum = False

    def run(self, tree: ast.Expression) -> Parsed:
        expr = self.num(self.visit(tree.body), tree.body)
        return Parsed(expr, frozenset(self.used), frozenset(self.terms_used), frozenset(self.loop_vars),
                      self.has_tool_sum)

    # --- helpers --------------------------------------------------------------------------------

    def refuse(self, node: ast.AST, message: str) -> RewardSyntaxError:
        return RewardSyntaxError(message, self.where.of(node))

    def visit(self, node: ast.AST) -> sympy.Basic:
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is None:
            what = _DESCRIBE.get(type(node).__name__, f"`{type(node).__name__}`")
            raise self.refuse(node, f"{what} is not allowed (got `{_snippet(node)}`)")
        return method(node)

    def num(self, x: sympy.Basic, node: ast.AST) -> sympy.Expr:
        """A condition used as a number is 1 or 0, as in Python."""
        if isinstance(x, BooleanAtom):
            return sympy.Integer(1 if x else 0)
        if _boolean(x):
            return indicator(x)
        return x

    def cond(self, x: sympy.Basic, node: ast.AST) -> Boolean:
        """A number used as a condition is true when non-zero, as in Python."""
        return x if _boolean(x) else self.make(node, sympy.Ne, x, sympy.Integer(0))

    def make(self, node: ast.AST, fn, *args) -> sympy.Basic:
        """Call a sympy constructor and check the result is a finite real (folded if constant)."""
        try:
            out = fn(*args)
        except RewardSyntaxError:
            raise
        except Exception as e:
            # sympy raises many types on degenerate input (TypeError for comparisons with zoo,
            # ValueError, PolynomialError ...); each becomes a syntax error naming the node.
            raise self.refuse(node, f"cannot build `{_snippet(node)}`: {type(e).__name__}: {e}") from e
        return self.check(out, node)

    def check(self, out: sympy.Basic, node: ast.AST) -> sympy.Basic:
        if _boolean(out):
            return out
        if out.has(sympy.S.NaN, sympy.S.ComplexInfinity, sympy.S.Infinity, sympy.S.NegativeInfinity,
                   sympy.S.ImaginaryUnit):
            raise self.refuse(node, f"`{_snippet(node)}` is not a finite real number")
        if not out.free_symbols and not _const(out) and not out.atoms(sympy.Function):
            try:
                out = sympy.Float(float(out))
            except (TypeError, ValueError, OverflowError) as e:
                raise self.refuse(node, f"`{_snippet(node)}` is not a finite real number") from e
        if _const(out):
            size = abs(float(out)) if abs(out) <= _MAX_MAGNITUDE else math.inf
            if size > _MAX_MAGNITUDE or not math.isfinite(size):
                raise self.refuse(node, f"the constant `{_snippet(node)}` is too large (limit 1e300)")
            if 0 < size < _MIN_MAGNITUDE:
                raise self.refuse(node, f"the constant `{_snippet(node)}` is too small (limit 1e-300)")
        return out

    def per_rollout(self, x: sympy.Basic) -> bool:
        """Whether x can differ between rollouts of a group (else group operators fold)."""
        return any(is_feature_name(s.name) or s.name in self.terms for s in x.free_symbols)

    # --- leaves ---------------------------------------------------------------------------------

    def visit_Constant(self, node: ast.Constant) -> sympy.Basic:
        v = node.value
        if isinstance(v, bool):
            return sympy.true if v else sympy.false
        if isinstance(v, int):
            if abs(v) > _MAX_MAGNITUDE:
                raise self.refuse(node, "integer constant too large (limit 1e300)")
            return sympy.Integer(v)
        if isinstance(v, float):
            if not math.isfinite(v):
                raise self.refuse(node, f"`{_snippet(node)}` is not a finite number")
            return self.check(sympy.Float(v), node)
        if isinstance(v, str):
            raise self.refuse(node, f"a string is allowed only as a tool name, calls['name'] or "
                                    f"P.tools['name'] (got `{_snippet(node)}`)")
        raise self.refuse(node, f"only numbers are allowed as constants (got `{_snippet(node)}`)")

    def visit_Name(self, node: ast.Name) -> sympy.Basic:
        name = node.id
        if name in self.env:
            raise self.refuse(node, f"the loop variable `{name}` can only index calls[{name}] or "
                                    f"P.tools[{name}]")
        if name in FEATURES or name == GROUP_SIZE:
            self.used.add(name)
            return symbol(name)
        if name == "pi":
            return sympy.Float(math.pi)
        if name in self.terms:
            self.terms_used.add(name)
            return symbol(name)
        if name == "P":
            raise self.refuse(node, "P needs a field: P.outcome, P.cost, P.latency, P.tools[t] or P.<name>")
        if name == "calls":
            raise self.refuse(node, "calls needs a tool: calls[t] inside sum(... for t in tools), "
                                    "or calls['name']")
        if name == "tools":
            raise self.refuse(node, "tools can only be iterated: sum(... for t in tools)")
        if name in FUNCTIONS:
            raise self.refuse(node, f"`{name}` is a function: call it, e.g. {name}(...)")
        known = ", ".join([*FEATURES, *CONSTANT_NAMES])
        if self.terms:
            known += f"; terms: {', '.join(sorted(self.terms))}"
        raise self.refuse(node, f"unknown name `{name}` (inputs: {known}; calls[t]; P.<field>)")

    def visit_Attribute(self, node: ast.Attribute) -> sympy.Basic:
        attr = node.attr
        if attr.startswith("_"):
            raise self.refuse(node, f"names starting with _ are not allowed (got `{_snippet(node)}`)")
        if not (isinstance(node.value, ast.Name) and node.value.id == "P"):
            raise self.refuse(node, f"attribute access is allowed only on P (got `{_snippet(node)}`)")
        if attr == "tools":
            raise self.refuse(node, "P.tools needs a tool: P.tools[t] or P.tools['name']")
        if attr in ("name", "extra"):
            raise self.refuse(node, f"P.{attr} is not a number; user-named entries are written P.<entry>")
        name = p_name(attr)
        self.used.add(name)
        return symbol(name)

    def visit_Subscript(self, node: ast.Subscript) -> sympy.Basic:
        base = node.value
        if isinstance(base, ast.Name) and base.id == "calls":
            make = calls_name
        elif (isinstance(base, ast.Attribute) and base.attr == "tools" and isinstance(base.value, ast.Name)
              and base.value.id == "P"):
            make = p_tool_name
        else:
            raise self.refuse(node, f"indexing is allowed only on calls[...] and P.tools[...] "
                                    f"(got `{_snippet(node)}`)")
        index = node.slice
        if isinstance(index, ast.Name) and index.id in self.env:
            tool = self.env[index.id]
            if self.tools is None:  # generic: the loop variable's input, kept apart from a tool named `t`
                self.used.add(make(tool))
                return LoopSymbol(make(tool), real=True)
        elif isinstance(index, ast.Constant) and isinstance(index.value, str):
            tool = index.value
            if not tool or len(tool) > 200 or not tool.isprintable():
                raise self.refuse(index, "a tool name must be 1–200 printable characters")
        else:
            raise self.refuse(index, f"a tool index must be a loop variable of sum(... for t in tools) "
                                     f"or a quoted tool name (got `{_snippet(index)}`)")
        name = make(tool)
        self.used.add(name)
        return symbol(name)

    # --- operators ------------------------------------------------------------------------------

    def visit_BinOp(self, node: ast.BinOp) -> sympy.Basic:
        op = type(node.op)
        if op not in (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow):
            raise self.refuse(node, f"the operator `{_BINOPS.get(op, op.__name__)}` is not allowed "
                                    f"(allowed: + - * / **)")
        if op is ast.Pow:
            a = self.num(self.visit(node.left), node.left)
            return self.power(node, a, self.num(self.visit(node.right), node.right))
        # Walk a left-leaning chain `a + b - c + ...` in a loop: recursion only for real nesting.
        chain: list[ast.BinOp] = [node]
        family = _chain_family(node)
        while _chain_family(chain[-1].left) == family:
            chain.append(chain[-1].left)  # type: ignore[arg-type]
        acc = self.num(self.visit(chain[-1].left), chain[-1].left)
        for link in reversed(chain):
            acc = self.binary(link, acc, self.num(self.visit(link.right), link.right))
        return acc

    def binary(self, node: ast.BinOp, a: sympy.Expr, b: sympy.Expr) -> sympy.Basic:
        op = type(node.op)
        if op is ast.Add:
            return self.make(node, sympy.Add, a, b)
        if op is ast.Sub:
            return self.make(node, sympy.Add, a, sympy.Mul(sympy.Integer(-1), b))
        if op is ast.Mult:
            return self.make(node, sympy.Mul, a, b)
        if op is ast.Div:
            if _const(b) and b == 0:
                raise self.refuse(node, f"division by zero in `{_snippet(node)}`")
            return self.make(node, lambda x, y: x / y, a, b)
        raise self.refuse(node, f"the operator `{_BINOPS.get(op, op.__name__)}` is not allowed")

    def power(self, node: ast.AST, a: sympy.Expr, b: sympy.Expr) -> sympy.Basic:
        if _const(a) and _const(b):
            fa, fb = float(a), float(b)
            if fa == 0 and fb < 0:
                raise self.refuse(node, f"division by zero in `{_snippet(node)}`")
            if fa < 0 and not fb.is_integer():
                raise self.refuse(node, f"`{_snippet(node)}` is not real (negative base, fractional power)")
            if abs(fa) not in (0.0, 1.0) and abs(fb * math.log10(abs(fa))) > 300:
                raise self.refuse(node, f"the constant `{_snippet(node)}` is out of range (limit 1e±300)")
        elif _const(b) and abs(b) > 1000:
            # x**1e9 overflows for any |x| > 1 and makes sympy's printers slow; no reward needs it.
            raise self.refuse(node, f"the exponent in `{_snippet(node)}` is too large (limit 1000)")
        return self.make(node, sympy.Pow, a, b)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> sympy.Basic:
        x = self.visit(node.operand)
        if isinstance(node.op, ast.USub):
            return self.make(node, sympy.Mul, sympy.Integer(-1), self.num(x, node.operand))
        if isinstance(node.op, ast.UAdd):
            return self.num(x, node.operand)
        if isinstance(node.op, ast.Not):
            return self.make(node, sympy.Not, self.cond(x, node.operand))
        raise self.refuse(node, "the operator `~` is not allowed (use `not`)")

    def visit_BoolOp(self, node: ast.BoolOp) -> sympy.Basic:
        parts = [self.cond(self.visit(v), v) for v in node.values]
        return self.make(node, sympy.And if isinstance(node.op, ast.And) else sympy.Or, *parts)

    def visit_Compare(self, node: ast.Compare) -> sympy.Basic:
        left = self.num(self.visit(node.left), node.left)
        parts = []
        for op, right_node in zip(node.ops, node.comparators):
            if type(op) not in _COMPARE:
                raise self.refuse(node, f"the comparison `{_COMPARE_TEXT.get(type(op), '?')}` is not allowed "
                                        f"(allowed: < <= > >= == !=)")
            right = self.num(self.visit(right_node), right_node)
            parts.append(self.make(node, _COMPARE[type(op)], left, right))
            left = right
        return parts[0] if len(parts) == 1 else self.make(node, sympy.And, *parts)

    # --- calls ----------------------------------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> sympy.Basic:
        allowed = ", ".join(FUNCTIONS)
        if not isinstance(node.func, ast.Name):
            raise self.refuse(node, f"only these functions can be called: {allowed} "
                                    f"(got `{_snippet(node.func)}(...)`)")
        name = node.func.id
        if name not in FUNCTIONS:
            raise self.refuse(node, f"calling `{name}` is not allowed; functions: {allowed}")
        if node.keywords:
            raise self.refuse(node, f"keyword arguments are not allowed (in `{_snippet(node)}`)")
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise self.refuse(arg, "unpacking with * is not allowed")
        lo, hi = FUNCTIONS[name]
        if not lo <= len(node.args) <= hi:
            count = str(lo) if lo == hi else f"{lo} to {hi}"
            raise self.refuse(node, f"{name}() takes {count} arguments, got {len(node.args)}")
        if name == "sum" and isinstance(node.args[0], ast.GeneratorExp):
            return self.tool_sum(node)
        if isinstance(node.args[0], ast.GeneratorExp):
            raise self.refuse(node.args[0], "a generator is allowed only as sum(... for t in tools)")
        if name == "where":
            c, a, b = node.args
            cond = self.cond(self.visit(c), c)
            return self.make(node, Where, cond, self.num(self.visit(a), a), self.num(self.visit(b), b))
        if name == "count":
            # count(c): c is a condition (a number counts where non-zero); counted as its 0/1 indicator.
            (c,) = node.args
            return self.group(node, name, self.num(self.cond(self.visit(c), c), c))
        args = [self.num(self.visit(a), a) for a in node.args]
        if name == "min" and len(args) > 1:
            return self.make(node, sympy.Min, *args)
        if name == "max" and len(args) > 1:
            return self.make(node, sympy.Max, *args)
        if name == "clip":
            x, lo_, hi_ = args
            return self.make(node, lambda: sympy.Min(sympy.Max(x, lo_), hi_))
        (x,) = args
        if name == "abs":
            return self.make(node, sympy.Abs, x)
        if name in _TRANSCENDENTAL:
            return self.transcendental(node, name, x)
        return self.group(node, name, x)

    def group(self, node: ast.AST, name: str, x: sympy.Expr) -> sympy.Basic:
        """A group operator; of something the same for every rollout of the group, folded now."""
        if self.per_rollout(x):
            return self.make(node, GROUP_FUNCTIONS[name], x)
        if name in ("mean", "max", "min"):
            return x
        if name in ("sum", "count"):  # count's argument is already its 0/1 indicator
            self.used.add(GROUP_SIZE)
            return self.make(node, sympy.Mul, symbol(GROUP_SIZE), x)
        return sympy.Integer(0)  # minmax, zscore, rank of a group of equal values

    def transcendental(self, node: ast.AST, name: str, x: sympy.Expr) -> sympy.Basic:
        math_fn, sympy_fn = _TRANSCENDENTAL[name]
        if _const(x):
            v = float(x)
            if name == "log" and v <= 0:
                raise self.refuse(node, f"log of a non-positive constant in `{_snippet(node)}`")
            try:
                # Folded in float64 now: no symbolic towers like exp(exp(exp(10))) for sympy to compare.
                return self.check(sympy.Float(math_fn(v)), node)
            except OverflowError:
                raise self.refuse(node, f"the constant `{_snippet(node)}` is too large") from None
        return self.make(node, sympy_fn, x)

    def tool_sum(self, node: ast.Call) -> sympy.Basic:
        gen = node.args[0]
        form = "sum(expr for t in tools)"
        if not isinstance(gen, ast.GeneratorExp):
            raise self.refuse(node, f"sum takes one generator: {form}")
        if len(gen.generators) != 1:
            raise self.refuse(gen, f"sum takes exactly one `for`: {form}")
        comp = gen.generators[0]
        if comp.is_async:
            raise self.refuse(gen, "async comprehensions are not allowed")
        if not (isinstance(comp.iter, ast.Name) and comp.iter.id == "tools"):
            raise self.refuse(comp.iter, f"comprehensions may iterate only over tools "
                                         f"(got `for ... in {_snippet(comp.iter)}`)")
        if comp.ifs:
            raise self.refuse(comp.ifs[0], "`if` in a comprehension is not allowed (use where(...))")
        if not isinstance(comp.target, ast.Name):
            raise self.refuse(comp.target, "the loop variable must be a single name")
        var = comp.target.id
        if var in RESERVED or var in self.terms or var in self.env or var.startswith("_"):
            raise self.refuse(comp.target, f"`{var}` cannot be a loop variable (reserved, a term, or in use)")
        self.has_tool_sum = True
        self.loop_vars.add(var)
        if self.tools is None:
            self.env[var] = var
            try:
                body = self.num(self.visit(gen.elt), gen.elt)
            finally:
                del self.env[var]
            return self.make(node, ToolSum, body, sympy.Symbol(var))
        terms = []
        for tool in self.tools:
            self.env[var] = tool
            try:
                terms.append(self.num(self.visit(gen.elt), gen.elt))
            finally:
                del self.env[var]
        return self.make(node, sympy.Add, *terms)
