"""The bill of a run, line by line: each episode's cost split by payer and by token class.

    from orchlib.ledger import ledger
    bill = ledger(report.trajectories, toolbox, policy=config)   # config: the run's RolloutConfig
    print(bill.table()); bill.reconciles                        # True: every line adds up to the totals

A payer is the orchestrator itself (`policy`: its own tokens), a tool by name, `(rejected)` for a call
refused before any tool ran, or the task's `user` (a simulated user's model), whose cost is kept apart
as the trajectory keeps it (`user_cost_usd`). A token class is what was paid for:

- `input`, `cached`, `output`, `reasoning`: tokens priced by the payer's card (an observation's
  `tokens_cached` are part of its `tokens_in`, its `tokens_reasoning` part of its `tokens_out`, as
  OpenAI's usage counts them); the policy's input is the ids it read before each turn, its output the
  ids it sampled, priced by the rollout's `policy_price_in` / `policy_price_out`;
- `call` and `time`: a card's per-call fee and its price per second of the call's latency;
- `other`: whatever the prices given do not explain — a payer with no price given, a recorded cost
  that differs from its card, a policy reached through an API (its turns do not keep their input
  tokens) — and the float rounding of the parts.

Exactly: each line's amount is a `fractions.Fraction`. The priced classes are computed from the
card's numbers, `other` is the recorded cost less them, and an episode whose reported total (a float
sum of its turns) differs from the exact sum of its turns by rounding gets a `(rounding)` line for the
difference. So the lines of an episode add up, in exact arithmetic, to its `cost_usd` and
`user_cost_usd` as reported, and the run's lines to the sum of those: `reconciles` checks it. What
does not add up is listed in `warnings` and left standing: a reported total that is not the sum of its
turns (then `reconciles` is False), a recorded cost its card's price does not explain, a policy whose
own turns cost what its given price does not.
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, ClassVar, Mapping, Sequence

from orchlib.cards import Price, ToolCard
from orchlib.configurations import episode_prices
from orchlib.evaluate import format_table
from orchlib.trajectory import Observation, Trajectory

__all__ = ["Line", "EpisodeBill", "Ledger", "LedgerError", "ledger", "CLASSES"]

CLASSES: tuple[str, ...] = ("input", "cached", "output", "reasoning", "call", "time", "other")
_MILLION = Fraction(10**6)
# An `other` amount within this share of the payer's cost (or 1e-15 USD) is float rounding, not a
# difference worth a warning: every price computation rounds at ~1e-16 of its value.
_ROUNDING = Fraction(1, 10**9)


class LedgerError(ValueError):
    """A cost that is not money (negative, NaN, infinite) or a bill too large for a float, one line:
    `"{task_id} #{group_index} turn {k}: {field}: {problem}"`."""


@dataclass(frozen=True)
class Line:
    """One amount of one episode: who was paid, for what, and how much (exact USD)."""

    turn: int            # 1-based; 0 for an episode-level line (rounding)
    payer: str
    token_class: str
    amount: Fraction
    tokens: int = 0      # tokens the amount is for (0 for call, time, other)

    @property
    def usd(self) -> float:
        return float(self.amount)


@dataclass
class EpisodeBill:
    """The lines of one trajectory and the totals it reported."""

    task_id: str
    group_index: int
    reported_cost: float       # Trajectory.cost_usd
    reported_user_cost: float  # Trajectory.user_cost_usd
    lines: list[Line] = field(default_factory=list)

    @property
    def cost(self) -> Fraction:
        """The exact sum of every line but the user's."""
        return sum((x.amount for x in self.lines if x.payer != "user"), Fraction(0))

    @property
    def user_cost(self) -> Fraction:
        return sum((x.amount for x in self.lines if x.payer == "user"), Fraction(0))

    @property
    def reconciles(self) -> bool:
        return self.cost == Fraction(self.reported_cost) and self.user_cost == Fraction(self.reported_user_cost)


@dataclass
class Ledger:
    """Every episode's bill, and what did not add up."""

    CLASSES: ClassVar[tuple[str, ...]] = CLASSES
    episodes: list[EpisodeBill]
    warnings: list[str] = field(default_factory=list)

    @property
    def reconciles(self) -> bool:
        """Every episode's lines sum exactly to its reported totals (and so the run's to the run's)."""
        return all(e.reconciles for e in self.episodes)

    @property
    def total(self) -> Fraction:
        return sum((e.cost for e in self.episodes), Fraction(0))

    @property
    def user_total(self) -> Fraction:
        return sum((e.user_cost for e in self.episodes), Fraction(0))

    @property
    def reported_total(self) -> Fraction:
        """The exact sum of the episodes' reported `cost_usd`."""
        return sum((Fraction(e.reported_cost) for e in self.episodes), Fraction(0))

    @property
    def reported_user_total(self) -> Fraction:
        return sum((Fraction(e.reported_user_cost) for e in self.episodes), Fraction(0))

    def by_payer_and_class(self) -> dict[str, dict[str, float]]:
        """payer → token class → USD over all episodes (payers in order of first appearance)."""
        sums: dict[str, dict[str, Fraction]] = defaultdict(lambda: defaultdict(Fraction))
        for e in self.episodes:
            for x in e.lines:
                sums[x.payer][x.token_class] += x.amount
        return {p: {c: float(v) for c, v in by.items()} for p, by in sums.items()}

    def rows(self) -> list[dict[str, Any]]:
        """Long format, one row per line: episode index, task, turn, payer, class, tokens, USD."""
        return [{"episode": i, "task_id": e.task_id, "group_index": e.group_index, "turn": x.turn,
                 "payer": x.payer, "token_class": x.token_class, "tokens": x.tokens, "usd": x.usd}
                for i, e in enumerate(self.episodes) for x in e.lines]

    def table(self) -> str:
        """One row per payer, one column per token class (USD over the run), each row's total; then the
        run's total against the reported one, and the warnings."""
        sums = self.by_payer_and_class()
        classes = [c for c in CLASSES if any(c in by for by in sums.values())]
        rows = [[payer, *[_usd(by.get(c, 0.0)) for c in classes], _usd(sum(by.values()))] for payer, by in sums.items()]
        text = format_table(["payer", *classes, "total $"], rows)
        check = "exactly" if self.reconciles else "NOT"
        lines = [text, "",
                 f"{len(self.episodes)} episodes: ${float(self.total):.6g} (orchestrator and tools) + "
                 f"${float(self.user_total):.6g} (user, apart); the lines add up {check} to the reported "
                 f"${float(self.reported_total):.6g} + ${float(self.reported_user_total):.6g}"]
        return "\n".join(lines + [f"warning: {w}" for w in self.warnings])


def _usd(x: float) -> str:
    # below 1e-15 USD an amount is float rounding (the lines keep it exactly); printed as 0
    return "0" if abs(x) < 1e-15 else f"{x:.6g}"


# ---------------------------------------------------------------------------------------------- building
def _prices(prices: Any) -> dict[str, Price]:
    """name → Price from a Toolbox, a list of ToolCards, or a mapping of names to Prices or cards."""
    if prices is None:
        return {}
    if isinstance(prices, Mapping):
        return {str(k): v.price if isinstance(v, ToolCard) else v for k, v in prices.items()}
    cards = getattr(prices, "cards", prices)
    cards = cards.values() if isinstance(cards, Mapping) else cards
    return {c.name: c.price for c in cards}


def _policy_price(policy: Any) -> tuple[Fraction, Fraction] | None:
    """(USD per input id, USD per output id) of the orchestrator's own tokens, or None."""
    if policy is None:
        return None
    if isinstance(policy, Price):
        return Fraction(policy.per_m_input) / _MILLION, Fraction(policy.per_m_output) / _MILLION
    return Fraction(policy.policy_price_in) / _MILLION, Fraction(policy.policy_price_out) / _MILLION


def _turn_inputs(t: Trajectory) -> list[int | None]:
    """The ids the policy read before each turn: where the turn's sampled ids (mask 1) start. None for
    every turn of a trajectory without ids (an API policy) or whose mask does not hold the turns."""
    if not t.ids or len(t.mask) != len(t.ids):
        return [None] * len(t.turns)
    out: list[int | None] = []
    pos = t.prompt_len
    for turn in t.turns:
        start = next((i for i in range(pos, len(t.mask)) if t.mask[i] == 1), None)
        if start is None or turn.tokens_out == 0:
            return out + [None] * (len(t.turns) - len(out))
        out.append(start)
        pos = start + turn.tokens_out
    return out


def _observation_lines(k: int, o: Observation, price: Price | None) -> list[Line]:
    payer = o.tool or "(rejected)"
    if o.meta.get("backend"):  # a tool under an episode's alias: both names
        payer = f"{payer} ({o.meta['backend']})"
    cost = Fraction(o.cost_usd)
    if price is None:
        return [Line(k, payer, "other", cost)] if cost else []
    cached_price = price.per_m_input if price.per_m_cached_input is None else price.per_m_cached_input
    reasoning_price = price.per_m_output if price.per_m_reasoning is None else price.per_m_reasoning
    parts = [("input", o.tokens_in - o.tokens_cached, price.per_m_input),
             ("cached", o.tokens_cached, cached_price),
             ("output", o.tokens_out - o.tokens_reasoning, price.per_m_output),
             ("reasoning", o.tokens_reasoning, reasoning_price)]
    lines = [Line(k, payer, cls, n * Fraction(p) / _MILLION, n) for cls, n, p in parts if n and p]
    if price.per_call and cost:  # a call rejected before it ran (schema) costs nothing, fee included
        lines.append(Line(k, payer, "call", Fraction(price.per_call)))
    if price.per_second and o.latency_s:
        lines.append(Line(k, payer, "time", Fraction(o.latency_s) * Fraction(price.per_second)))
    rest = cost - sum((x.amount for x in lines), Fraction(0))
    if rest:
        lines.append(Line(k, payer, "other", rest))
    return lines


def _user_lines(k: int, turn, price: Price | None) -> list[Line]:
    u = turn.user
    cost = Fraction(u.cost_usd)
    if price is None:
        return [Line(k, "user", "other", cost)] if cost else []
    lines = [Line(k, "user", cls, n * Fraction(p) / _MILLION, n)
             for cls, n, p in (("input", u.tokens_in, price.per_m_input), ("output", u.tokens_out, price.per_m_output))
             if n and p]
    rest = cost - sum((x.amount for x in lines), Fraction(0))
    return lines + ([Line(k, "user", "other", rest)] if rest else [])


def _beyond_rounding(rest: Fraction, cost: Fraction) -> bool:
    return abs(rest) > max(abs(cost) * _ROUNDING, Fraction(1, 10**15))


def _bill(t: Trajectory, prices: Mapping[str, Price], own: tuple[Fraction, Fraction] | None,
          user_price: Price | None, warnings: list[str]) -> EpisodeBill:
    bill = EpisodeBill(t.task_id, t.group_index, t.cost_usd, t.user_cost_usd)
    prices = episode_prices(t, prices)  # an episode's aliases at the prices it showed and charged
    inputs = _turn_inputs(t)
    for k, (turn, read) in enumerate(zip(t.turns, inputs), 1):
        tool_lines: list[Line] = []
        for o in turn.observations:
            lines = _observation_lines(k, o, prices.get(o.tool))
            other = sum((x.amount for x in lines if x.token_class == "other"), Fraction(0))
            if o.tool in prices and _beyond_rounding(other, Fraction(o.cost_usd)):
                warnings.append(f"{t.task_id} #{t.group_index} turn {k}: {o.tool} recorded ${o.cost_usd:.6g}, "
                                f"its card's price explains ${float(Fraction(o.cost_usd) - other):.6g}")
            tool_lines += lines
        mine = Fraction(turn.cost_usd) - sum((Fraction(o.cost_usd) for o in turn.observations), Fraction(0))
        own_lines: list[Line] = []
        if own is not None and read is not None:
            own_lines = [Line(k, "policy", "input", read * own[0], read),
                         Line(k, "policy", "output", turn.tokens_out * own[1], turn.tokens_out)]
            own_lines = [x for x in own_lines if x.amount]
        rest = mine - sum((x.amount for x in own_lines), Fraction(0))
        if rest:
            own_lines.append(Line(k, "policy", "other", rest))
        if own is not None and read is not None and _beyond_rounding(rest, mine):
            warnings.append(f"{t.task_id} #{t.group_index} turn {k}: the policy's own tokens cost "
                            f"${float(mine):.6g}, its price explains ${float(mine - rest):.6g} (another price?)")
        bill.lines += own_lines + tool_lines
        if turn.user is not None:
            bill.lines += _user_lines(k, turn, user_price)
    # The reported totals are float sums of the turns: the exact sum of the turns may differ from them by
    # rounding, which a line records. A larger gap is a total that is not its turns' sum: left standing.
    for what, payer, reported, exact in (
            ("cost_usd", "(rounding)", t.cost_usd, sum((Fraction(x.cost_usd) for x in t.turns), Fraction(0))),
            ("user_cost_usd", "user", t.user_cost_usd,
             sum((Fraction(x.user.cost_usd) for x in t.turns if x.user is not None), Fraction(0)))):
        gap = Fraction(reported) - exact
        if gap and not _beyond_rounding(gap, exact):
            bill.lines.append(Line(0, payer, "other", gap))
        elif gap:
            warnings.append(f"{t.task_id} #{t.group_index}: {what} is ${reported:.6g} but its turns add up to "
                            f"${float(exact):.6g}")
    return bill


def ledger(trajectories: Sequence[Trajectory], prices: Any = None, policy: Any = None,
           user_price: Price | None = None) -> Ledger:
    """The bill of `trajectories` (see the module docstring).

    `prices`: the tools' prices — a Toolbox, a list of ToolCards, or name → Price (or card); a tool
    not there is billed whole as `other`. `policy`: the rollout's `RolloutConfig` (its
    `policy_price_in` / `policy_price_out`) or a `Price` for the orchestrator's own ids; None bills
    them as `other`. `user_price`: the simulated user's price, to split its tokens."""
    table = _prices(prices)
    own = _policy_price(policy)
    warnings: list[str] = []
    sums = [_check_money(t) for t in trajectories]
    for k in (0, 1):  # the reported totals, and the turns' costs, each summed over the run
        _check_size(sum((s[k] for s in sums), Fraction(0)), len(sums))
    bills = [_bill(t, table, own, user_price, warnings) for t in trajectories]
    _check_size(sum((abs(x.amount) for e in bills for x in e.lines), Fraction(0)), len(bills))
    return Ledger(bills, warnings)


def _check_money(t: Trajectory) -> tuple[Fraction, Fraction]:
    """The exact sums of `t`'s reported totals and of its turns' costs (what the bill shows as floats),
    every cost checked finite and >= 0. Trajectories validate
    this when built or read, but the rollout's fast paths (and `model_construct`) skip validation: a
    bill is where money is summed, so it checks again rather than add up to less than was paid, or
    raise from deep inside `Fraction`."""
    where = f"{t.task_id} #{t.group_index}"
    costs = [(where, "cost_usd", t.cost_usd), (where, "user_cost_usd", t.user_cost_usd)]
    for k, turn in enumerate(t.turns, 1):
        costs.append((f"{where} turn {k}", "cost_usd", turn.cost_usd))
        costs += [(f"{where} turn {k}", f"observations[{i}].cost_usd", o.cost_usd)
                  for i, o in enumerate(turn.observations)]
        if turn.user is not None:
            costs.append((f"{where} turn {k}", "user.cost_usd", turn.user.cost_usd))
    for at, name, value in costs:
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
            raise LedgerError(f"{at}: {name}: {value!r} is not a cost (USD, finite and >= 0)")
    reported = Fraction(t.cost_usd) + Fraction(t.user_cost_usd)
    turns = sum((Fraction(x.cost_usd) + (Fraction(x.user.cost_usd) if x.user is not None else 0) for x in t.turns),
                Fraction(0))
    return reported, turns


def _check_size(bound: Fraction, episodes: int) -> None:
    """Every sum the ledger shows as a float (a payer's, a class's, the run's, the reported totals) is at
    most the sum of the recorded costs, or of the lines' absolute amounts: when one is beyond the
    largest float, the bill cannot be shown, so it is refused, in one line."""
    if bound > Fraction(sys.float_info.max):
        raise LedgerError(f"(run): total: {episodes} episodes' costs add up to more than the largest float "
                          f"({sys.float_info.max:.3g} USD): not a bill that can be summed")
