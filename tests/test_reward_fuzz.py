"""Fuzzing the parser: on any input the only exception that escapes is RewardSyntaxError.

Random token soups, random printable and unicode text, and random ASTs (valid constructs mixed with
forbidden ones, unparsed to text). The default run is ~10 000 cases in a few seconds; set
ORCHLIB_FUZZ_CASES (e.g. 200000) for a longer run with new seeds:

    ORCHLIB_FUZZ_CASES=200000 .venv/bin/pytest tests/test_reward_fuzz.py -q
"""

import ast
import os
import random

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchlib.reward import Reward, RewardSyntaxError, RewardValueError, parse

CASES = int(os.environ.get("ORCHLIB_FUZZ_CASES", "10000"))
SEED = int(os.environ.get("ORCHLIB_FUZZ_SEED", "0"))

TOKENS = [
    "outcome", "cost", "latency", "turns", "tokens", "errors", "calls", "P", "tools", "t", "x", "a",
    ".", ",", ":", "(", ")", "[", "]", "{", "}", "+", "-", "*", "/", "**", "//", "%", "@", "<", "<=", ">",
    ">=", "==", "!=", "=", ":=", "and", "or", "not", "in", "is", "if", "else", "for", "lambda", "yield",
    "sum", "min", "max", "clip", "exp", "log", "abs", "where", "minmax", "zscore", "rank", "mean", "open",
    "count", "sin", "cos", "G", "pi",
    "__import__", "__class__", "__globals__", "eval", "exec", "'os'", "'gpt-5'", '"a"', "b'x'", "f'{x}'",
    "0", "1", "2", "0.5", "1e308", "1e309", "10", "1j", "-1", "9" * 40, "True", "None", "...", "#", "\\",
    "\n", "\t", " ", "é", "∑", "\x00", "P.tools", "P.cost", "calls[t]", "for t in tools", "P.__class__",
]


def token_soup(rng: random.Random) -> str:
    return "".join(rng.choice(TOKENS) + rng.choice(["", " ", " "]) for _ in range(rng.randint(1, 25)))


def char_soup(rng: random.Random) -> str:
    alphabet = "abcPtx01234.,:()[]{}+-*/<>=!'\"#\\ _\n\té∑λ\x00\x7f"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))


# --- random ASTs --------------------------------------------------------------------------------

FEATURE_NAMES = ["outcome", "cost", "latency", "turns", "tokens", "errors"]
FUNCS = ["min", "max", "clip", "exp", "log", "abs", "where", "minmax", "zscore", "rank", "mean", "sum",
         "count", "sin", "cos",
         "open", "eval", "getattr", "__import__", "len"]


class AstGen:
    def __init__(self, rng: random.Random):
        self.rng = rng

    def expr(self, depth: int) -> ast.expr:
        r = self.rng
        if depth <= 0 or r.random() < 0.25:
            return self.leaf()
        kind = r.choices(
            ["binop", "unary", "compare", "boolop", "call", "where", "sum", "group", "bad"],
            weights=[20, 6, 8, 5, 10, 6, 5, 8, 6])[0]
        d = depth - 1
        if kind == "binop":
            op = r.choice([ast.Add(), ast.Sub(), ast.Mult(), ast.Div(), ast.Pow(), ast.Pow(), ast.FloorDiv(),
                           ast.Mod(), ast.BitAnd()])
            return ast.BinOp(self.expr(d), op, self.expr(d))
        if kind == "unary":
            return ast.UnaryOp(r.choice([ast.USub(), ast.UAdd(), ast.Not(), ast.Invert()]), self.expr(d))
        if kind == "compare":
            n = r.randint(1, 3)
            ops = [r.choice([ast.Lt(), ast.LtE(), ast.Gt(), ast.GtE(), ast.Eq(), ast.NotEq(), ast.In(), ast.Is()])
                   for _ in range(n)]
            return ast.Compare(self.expr(d), ops, [self.expr(d) for _ in range(n)])
        if kind == "boolop":
            return ast.BoolOp(r.choice([ast.And(), ast.Or()]), [self.expr(d) for _ in range(r.randint(2, 3))])
        if kind == "call":
            name = r.choice(FUNCS)
            return ast.Call(ast.Name(name, ast.Load()), [self.expr(d) for _ in range(r.randint(0, 4))], [])
        if kind == "where":
            return ast.Call(ast.Name("where", ast.Load()), [self.expr(d), self.expr(d), self.expr(d)], [])
        if kind == "group":
            name = r.choice(["minmax", "zscore", "rank", "mean", "max", "min", "sum", "count"])
            return ast.Call(ast.Name(name, ast.Load()), [self.expr(d)], [])
        if kind == "sum":
            var = r.choice(["t", "u", "cost", "tools"])
            body = self.expr(d)
            if r.random() < 0.6:
                body = ast.BinOp(self.indexed(var), ast.Mult(), body)
            it = ast.Name("tools", ast.Load()) if r.random() < 0.85 else self.expr(d)
            ifs = [self.expr(d)] if r.random() < 0.1 else []
            gen = ast.GeneratorExp(body, [ast.comprehension(ast.Name(var, ast.Store()), it, ifs, 0)])
            return ast.Call(ast.Name("sum", ast.Load()), [gen], [])
        return self.bad(d)

    def indexed(self, var: str) -> ast.expr:
        base = (ast.Name("calls", ast.Load()) if self.rng.random() < 0.5
                else ast.Attribute(ast.Name("P", ast.Load()), "tools", ast.Load()))
        return ast.Subscript(base, ast.Name(var, ast.Load()), ast.Load())

    def leaf(self) -> ast.expr:
        r = self.rng
        kind = r.choices(["feature", "number", "p", "calls", "ptool", "odd"], weights=[30, 25, 15, 8, 6, 4])[0]
        if kind == "feature":
            return ast.Name(r.choice([*FEATURE_NAMES, "G", "pi"]), ast.Load())
        if kind == "number":
            value = r.choice([0, 1, 2, 3, 0.5, 1e-3, 1e300, 7.25, 10, 100, 0.0, 2**62, 1e-310, True, False])
            return ast.Constant(value)
        if kind == "p":
            return ast.Attribute(ast.Name("P", ast.Load()), r.choice(["outcome", "cost", "latency", "budget",
                                                                        "w", "name", "tools", "_x"]), ast.Load())
        if kind in ("calls", "ptool"):
            base = (ast.Name("calls", ast.Load()) if kind == "calls"
                    else ast.Attribute(ast.Name("P", ast.Load()), "tools", ast.Load()))
            return ast.Subscript(base, ast.Constant(r.choice(["gpt-5", "search", "", "a b"])), ast.Load())
        return ast.Name(r.choice(["x", "P", "tools", "calls", "exp", "t", "__builtins__"]), ast.Load())

    def bad(self, d: int) -> ast.expr:
        r = self.rng
        choice = r.randint(0, 11)
        if choice == 0:
            return ast.Attribute(self.expr(d), r.choice(["__class__", "real", "system", "__globals__"]), ast.Load())
        if choice == 1:
            return ast.Lambda(ast.arguments([], [], None, [], [], None, []), self.expr(d))
        if choice == 2:
            return ast.ListComp(self.expr(d), [ast.comprehension(ast.Name("x", ast.Store()),
                                                                 ast.Name("tools", ast.Load()), [], 0)])
        if choice == 3:
            return ast.Call(ast.Attribute(ast.Call(ast.Name("__import__", ast.Load()), [ast.Constant("os")], []),
                                          "system", ast.Load()), [ast.Constant("ls")], [])
        if choice == 4:
            return ast.IfExp(self.expr(d), self.expr(d), self.expr(d))
        if choice == 5:
            return ast.Constant(r.choice(["s", None, b"b", 1j, ...]))
        if choice == 6:
            return ast.Subscript(self.expr(d), self.expr(d), ast.Load())
        if choice == 7:
            return ast.Tuple([self.expr(d), self.expr(d)], ast.Load())
        if choice == 8:
            return ast.Call(ast.Name(r.choice(FUNCS), ast.Load()), [self.expr(d)],
                            [ast.keyword("x", self.expr(d))])
        if choice == 9:
            return ast.NamedExpr(ast.Name("x", ast.Store()), self.expr(d))
        if choice == 10:
            return ast.Call(ast.Name("max", ast.Load()), [ast.Starred(self.expr(d), ast.Load())], [])
        return ast.Dict([ast.Constant("k")], [self.expr(d)])


def random_ast_text(rng: random.Random) -> str:
    tree = ast.fix_missing_locations(ast.Expression(AstGen(rng).expr(rng.randint(1, 6))))
    return ast.unparse(tree)


def only_syntax_errors(text: str) -> bool:
    """True if parsed, False if refused; anything else escapes and fails the test."""
    try:
        parse(text)
        return True
    except RewardSyntaxError as e:
        assert isinstance(e.position, tuple) and len(e.position) == 2 and e.position[0] >= 1
        return False


def test_fuzz_token_and_char_soups():
    rng = random.Random(SEED)
    n = CASES // 2
    for i in range(n):
        text = token_soup(rng) if i % 2 else char_soup(rng)
        only_syntax_errors(text)


def test_fuzz_random_asts():
    rng = random.Random(SEED + 1)
    accepted = 0
    for _ in range(CASES - CASES // 2):
        accepted += only_syntax_errors(random_ast_text(rng))
    # The generator must reach the builder, not just the syntax check.
    assert accepted > (CASES - CASES // 2) // 20


def test_fuzz_accepted_expressions_evaluate_or_report():
    """What the parser accepts compiles and evaluates; non-finite results are reported, not returned."""
    rng = random.Random(SEED + 2)
    group = [{"outcome": o, "cost": c, "latency": lt, "turns": 2, "tokens": 50, "errors": 0,
              "calls": {"gpt-5": k, "search": 1}} for o, c, lt, k in
             [(1, 0.01, 2.0, 1), (0, 0.0, 1.0, 0), (1, 0.03, 5.0, 2), (1, 0.01, 2.0, 1)]]
    P = {"outcome": 1.0, "cost": 0.5, "latency": 0.2, "tools": {"gpt-5": -0.3}, "extra": {"budget": 0.02, "w": 2}}
    evaluated = 0
    while evaluated < max(150, CASES // 60):
        text = random_ast_text(rng)
        try:
            reward = Reward(text)
        except RewardSyntaxError:
            continue
        evaluated += 1
        try:
            out = reward(group, P=P)
        except RewardValueError:
            continue
        except RewardSyntaxError as e:
            # Only the expansion over the group's tools may refuse what the generic parse accepted.
            assert "expanded over tools" in str(e)
            continue
        assert out.shape == (4,) and out.dtype == np.float64 and np.isfinite(out).all()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=80))
def test_fuzz_hypothesis_text(text):
    only_syntax_errors(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=20).map(" ".join))
def test_fuzz_hypothesis_tokens(text):
    only_syntax_errors(text)
