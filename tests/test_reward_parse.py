"""The whitelist parser: what each construct becomes in sympy, and what is refused, where and why."""

import pytest
import sympy

from orchlib.reward import RewardSyntaxError, parse
from orchlib.reward.names import symbol
from orchlib.reward.forms import Where
from orchlib.reward.parse import GROUP_FUNCTIONS, ToolSum

cost, latency, outcome = symbol("cost"), symbol("latency"), symbol("outcome")


def expr(text, **kw):
    return parse(text, **kw).expr


def test_arithmetic_and_functions():
    assert expr("outcome - 0.5 * cost") == outcome - sympy.Float(0.5) * cost
    assert expr("cost ** 2 / latency") == cost**2 / latency
    assert expr("clip(cost, 0, 1)") == sympy.Min(sympy.Max(cost, 0), 1)
    assert expr("min(cost, latency, 3)") == sympy.Min(cost, latency, 3)
    assert expr("max(cost, latency)") == sympy.Max(cost, latency)
    assert expr("exp(-cost) + log(latency) + abs(cost)") == sympy.exp(-cost) + sympy.log(latency) + sympy.Abs(cost)


def test_conditions():
    assert expr("where(outcome >= 1, cost, 0)") == Where(outcome >= 1, cost, 0)
    chained = expr("where(0 < cost <= 1, 1, 2)")
    assert chained == Where(sympy.And(sympy.Lt(0, cost), cost <= 1), 1, 2)
    # A condition used as a number is 1/0 and a number used as a condition is "non-zero", as in Python.
    assert expr("2 * (cost > 1)") == 2 * Where(cost > 1, 1, 0)
    assert expr("where(outcome, 1, 0)") == Where(sympy.Ne(outcome, 0), 1, 0)
    assert expr("where(not (cost > 1) and latency < 2 or outcome == 1, 1, 0)") == Where(
        sympy.Or(sympy.And(cost <= 1, latency < 2), sympy.Eq(outcome, 1)), 1, 0)
    # Decided conditions pick their branch at parse time.
    assert expr("where(2 > 1, cost, latency)") == cost and expr("where(0, cost, latency)") == latency
    assert not expr("where(outcome > 0, mean(cost > 1), 0)").has(sympy.Piecewise)


def test_group_operators_stay_whole_under_conditions():
    # sympy's Piecewise would push `mean` into the branches: where(c, mean(1), mean(0)).
    mean = GROUP_FUNCTIONS["mean"]
    assert expr("where(mean(where(cost > 1.5, 1, 0)) > 0.5, 1, 0)") == Where(
        mean(Where(cost > 1.5, 1, 0)) > 0.5, 1, 0)
    assert str(expr("max(cost > 1) + min(cost)")) == "max(where(cost > 1, 1, 0)) + min(cost)"


def test_group_max_min_sum_count_and_G():
    G = symbol("G")
    assert expr("max(cost)") == GROUP_FUNCTIONS["max"](cost)
    assert expr("max(cost, latency)") == sympy.Max(cost, latency)  # two or more: elementwise
    assert expr("sum(cost)") == GROUP_FUNCTIONS["sum"](cost)
    assert expr("count(cost > 1)") == GROUP_FUNCTIONS["count"](Where(cost > 1, 1, 0))
    assert expr("count(cost)") == GROUP_FUNCTIONS["count"](Where(sympy.Ne(cost, 0), 1, 0))
    # Of a per-group value: max/min are the value, sum is G times it, count G or 0.
    assert expr("max(P.cost) + min(P.cost)") == 2 * symbol("P.cost")
    assert expr("sum(P.cost)") == G * symbol("P.cost")
    p = parse("count(P.cost > 1) / G")
    assert p.expr == Where(symbol("P.cost") > 1, 1, 0)
    assert parse("G - 1").symbols == {"G"}
    assert float(expr("pi")) == pytest.approx(3.141592653589793)


def test_constants_fold():
    assert expr("2 ** 10") == 1024
    assert expr("True + 1") == 2
    assert float(expr("exp(0)")) == 1.0
    assert expr("log(exp(2))") == pytest.approx(2.0)


def test_preference_and_calls():
    p = parse("P.cost * cost + P.budget + P.tools['gpt-5'] * calls['gpt-5']")
    assert p.symbols == {"P.cost", "cost", "P.budget", "P.tools[gpt-5]", "calls[gpt-5]"}


def test_tool_sum_generic_and_expanded():
    text = "sum(P.tools[t] * minmax(calls[t]) for t in tools)"
    generic = parse(text)
    assert isinstance(generic.expr, ToolSum)
    assert generic.has_tool_sum and generic.symbols == {"P.tools[t]", "calls[t]"}
    mm = GROUP_FUNCTIONS["minmax"]
    expanded = expr(text, tools=("a", "b"))
    assert expanded == (symbol("P.tools[a]") * mm(symbol("calls[a]")) + symbol("P.tools[b]") * mm(symbol("calls[b]")))
    assert expr(text, tools=()) == 0


def test_group_operators_of_per_group_values_fold():
    # P is the same for every rollout of a group: normalising it gives 0, its mean is itself.
    assert expr("minmax(P.cost) + zscore(3) + rank(P.latency)") == 0
    assert expr("mean(P.cost + 1)") == symbol("P.cost") + 1
    assert expr("minmax(cost)") == GROUP_FUNCTIONS["minmax"](cost)


def test_terms_are_names():
    assert expr("a + cost", terms=["a"]) == symbol("a") + cost
    assert parse("a * 2", terms=["a", "b"]).terms == {"a"}


def test_multiline_text_positions_refer_to_the_original():
    with pytest.raises(RewardSyntaxError) as e:
        parse("outcome +\n  P.__class__")
    assert e.value.position == (2, 3)
    assert "names starting with _" in str(e.value) and "at 2:3" in str(e.value)


def test_position_counts_characters_not_bytes():
    with pytest.raises(RewardSyntaxError) as e:
        parse("P.é + x.y")
    assert e.value.position == (1, 7)


REFUSED = [
    ("__import__('os').system('ls')", "only these functions can be called", (1, 1)),
    ("open('x')", "calling `open` is not allowed", (1, 1)),
    ("eval('1')", "calling `eval` is not allowed", (1, 1)),
    ("x.__class__", "names starting with _ are not allowed (got `x.__class__`)", (1, 1)),
    ("x.y", "attribute access is allowed only on P (got `x.y`)", (1, 1)),
    ("cost + outcome.real", "attribute access is allowed only on P", (1, 8)),
    ("P.__dict__", "names starting with _ are not allowed", (1, 1)),
    ("P.tools.__class__", "names starting with _", (1, 1)),
    ("().__class__.__bases__[0]", "indexing is allowed only on calls", (1, 1)),
    ("lambda: 1", "a lambda is not allowed", (1, 1)),
    ("[x for x in tools]", "a list comprehension is not allowed", (1, 1)),
    ("sum(x for x in range(3))", "comprehensions may iterate only over tools", (1, 16)),
    ("sum(calls[t] for t in tools if t)", "`if` in a comprehension", (1, 32)),
    ("sum(calls[t] for t in tools for u in tools)", "exactly one `for`", (1, 4)),
    ("sum(cost, 1)", "sum() takes 1 arguments", (1, 1)),
    ("sum(calls)", "calls needs a tool", (1, 5)),
    ("min(calls[t] for t in tools)", "a generator is allowed only as sum(... for t in tools)", (1, 4)),
    ("G = 1", "invalid syntax", (1, 3)),
    ("(x := 1)", "assignment expression", (1, 2)),
    ("f'{cost}'", "f-string", (1, 1)),
    ("cost if outcome else 0", "where(c, a, b)", (1, 1)),
    ("cost // 2", "operator `//` is not allowed", (1, 1)),
    ("cost % 2", "operator `%` is not allowed", (1, 1)),
    ("~cost", "`~` is not allowed", (1, 1)),
    ("cost in tools", "comparison `in` is not allowed", (1, 1)),
    ("cost is None", "comparison `is` is not allowed", (1, 1)),
    ("'abc'", "a string is allowed only as a tool name", (1, 1)),
    ("None", "only numbers", (1, 1)),
    ("1j", "only numbers", (1, 1)),
    ("foo + 1", "unknown name `foo`", (1, 1)),
    ("P", "P needs a field", (1, 1)),
    ("P.name", "P.name is not a number", (1, 1)),
    ("P.tools", "P.tools needs a tool", (1, 1)),
    ("calls", "calls needs a tool", (1, 1)),
    ("calls[0]", "a tool index must be", (1, 7)),
    ("calls[t]", "a tool index must be", (1, 7)),
    ("sum(t for t in tools)", "loop variable `t` can only index", (1, 5)),
    ("sum(calls[cost] for cost in tools)", "cannot be a loop variable", (1, 21)),
    ("exp", "is a function: call it", (1, 1)),
    ("exp(cost, 2)", "exp() takes 1 arguments", (1, 1)),
    ("where(cost > 1, x=1)", "keyword arguments", (1, 1)),
    ("max(*tools)", "unpacking with *", (1, 5)),
    ("1/0", "division by zero", (1, 1)),
    ("cost / (1 - 1)", "division by zero", (1, 1)),
    ("log(0)", "log of a non-positive constant", (1, 1)),
    ("(-8) ** 0.5", "is not real", (1, 1)),
    ("2 ** 10 ** 10", "out of range", (1, 1)),
    ("10 ** 400", "out of range", (1, 1)),
    ("exp(1000)", "too large", (1, 1)),
    ("1e999", "not a finite number", (1, 1)),
    ("cost ** 5000", "exponent", (1, 1)),
    ("outcome # - cost", "comments (#)", (1, 9)),
    ("", "empty", (1, 1)),
]


@pytest.mark.parametrize("text,message,position", REFUSED)
def test_refused(text, message, position):
    with pytest.raises(RewardSyntaxError) as e:
        parse(text)
    assert message in str(e.value)
    assert e.value.position == position
    assert f"at {position[0]}:{position[1]}" in str(e.value)


@pytest.mark.parametrize("text", ["cost +", "outcome\0", "(cost", "cost cost", "1 +* 2", "\\"])
def test_python_syntax_errors_are_reward_syntax_errors(text):
    with pytest.raises(RewardSyntaxError, match=r"invalid syntax.* at 1:\d+$"):
        parse(text)


@pytest.mark.parametrize("text, position", [("cost +", (1, 7)), ("  cost *  ", (1, 9)),
                                             ("outcome -\n  cost *", (2, 9)), ("cost cost", (1, 6))])
def test_syntax_error_points_where_the_text_goes_wrong(text, position):
    # Python reports offset 0 for text that ends too early; the error points past its last character.
    with pytest.raises(RewardSyntaxError) as e:
        parse(text)
    assert e.value.position == position


def test_guards_on_size():
    with pytest.raises(RewardSyntaxError, match="longer than"):
        parse("cost + " * 1000 + "1")
    with pytest.raises(RewardSyntaxError, match="nested deeper"):
        parse("exp(" * 60 + "cost" + ")" * 60)
    with pytest.raises(RewardSyntaxError):
        parse("(" * 300 + "cost" + ")" * 300)
    with pytest.raises(RewardSyntaxError):
        parse("-" * 3999 + "1")


def test_non_string_is_refused():
    with pytest.raises(RewardSyntaxError, match="must be a string"):
        parse(3)
