"""Where a policy's calls go on held-out tool configurations, per preference profile: by backend (whatever
alias it was shown under), by list position, and how many calls were well formed.

    rows = heldout_summary(report.trajectories, category="gsm8k")   # profile → HeldoutNumbers
    print(format_heldout({"after SFT": rows_sft, "after RL": rows_rl}))

A policy that reads its prompt sends "thrifty" to the cheap backend and "accuracy" to the dear one
whatever names and order an episode shows; one that learned names or positions cannot, on aliases it
never saw, and its calls follow the list instead (`first_listed` near 1, backend shares near the drawn
order's frequencies). `cheapest_shown` is how often the call went to the lowest price on the list:
under "thrifty", between tools equally right, a policy that reads prices calls it. Read from each
trajectory's configuration record (`Trajectory.configuration`): the offered aliases in the order shown,
and the backend behind each.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["HeldoutNumbers", "heldout_summary", "format_heldout", "offer_key"]


class HeldoutNumbers(BaseModel):
    """One profile's numbers over its episodes."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    episodes: int = Field(description="episodes under this profile")
    calls: int = Field(description="calls that name an offered tool (the shares' denominator)")
    backend_share: dict[str, float] = Field(description="backend → its share of those calls, whatever its alias")
    first_listed: float | None = Field(description="share of those calls to the tool listed first (None: no calls)")
    cheapest_shown: float | None = Field(None, description="share of those calls to a tool whose shown price per "
                                         "call (`orchlib.configurations.call_price`) is the lowest offered")
    well_formed: float = Field(description="share of episodes whose first turn calls, each call parsing and "
                                           "naming an offered tool")
    accuracy: float = Field(description="mean outcome per episode")
    cost_usd: float = Field(description="mean $ per episode")
    latency_s: float = Field(description="mean seconds per episode")


def _offered(t: Any) -> list[str]:
    c = getattr(t, "configuration", None)
    if c is None:
        raise ValueError(f"trajectory of task {t.task_id!r} has no configuration record: the held-out summary "
                         "reads the aliases, their backends and their order from it")
    return [o.alias for o in c.tools]


def _well_formed(t: Any, offered: set[str]) -> bool:
    if not t.turns or not t.turns[0].calls:
        return False  # no call, or one that did not parse (an error observation, no call)
    turn = t.turns[0]
    return all(c.name in offered for c in turn.calls) and not any(o.error_kind == "malformed_call"
                                                                  for o in turn.observations)


def _numbers(trajs: Sequence[Any]) -> HeldoutNumbers:
    from orchlib.configurations import call_price

    counts: dict[str, int] = {}
    first = cheapest = calls = ok = 0
    for t in trajs:
        offered = _offered(t)
        c = t.configuration
        price = {o.alias: call_price(o) for o in c.tools}
        ok += _well_formed(t, set(offered))
        for turn in t.turns:
            for call in turn.calls:
                if call.name in offered:
                    calls += 1
                    first += call.name == offered[0]
                    cheapest += price[call.name] == min(price.values())
                    b = c.backend_of(call.name)
                    counts[b] = counts.get(b, 0) + 1
    n = len(trajs)
    return HeldoutNumbers(episodes=n, calls=calls,
                          backend_share={b: k / calls for b, k in sorted(counts.items())},
                          first_listed=first / calls if calls else None,
                          cheapest_shown=cheapest / calls if calls else None, well_formed=ok / n,
                          accuracy=sum(t.outcome for t in trajs) / n, cost_usd=sum(t.cost_usd for t in trajs) / n,
                          latency_s=sum(t.latency_s for t in trajs) / n)


def offer_key(t: Any) -> str:
    """The backends an episode offered, sorted and joined by "+" (`generalist+mixtral`): episodes with one
    key faced the same choice, under whatever names, order and prices."""
    return "+".join(sorted(o.backend for o in t.configuration.tools)) if getattr(t, "configuration", None) else ""


def heldout_summary(trajectories: Sequence[Any], category: str | None = None,
                    offer: str | None = None) -> dict[str, HeldoutNumbers]:
    """profile name → HeldoutNumbers over the episodes of `trajectories` (of `category`, and offering
    exactly `offer`'s backends (`offer_key`), if given), each episode read through its configuration
    record (an episode without one is an error: its aliases' backends and its order are unknown).
    Profiles sorted by name."""
    trajs = [t for t in trajectories if (category is None or t.category == category)
             and (offer is None or offer_key(t) == offer)]
    by: dict[str, list[Any]] = {}
    for t in trajs:
        by.setdefault(str((t.preference or {}).get("name", "")), []).append(t)
    return {p: _numbers(ts) for p, ts in sorted(by.items())}


def format_heldout(summaries: Mapping[str, Mapping[str, HeldoutNumbers]], backends: Sequence[str] | None = None) -> str:
    """A markdown table, one row per policy and profile: calls per backend (%), first-listed (%), cheapest
    shown (%), well formed (%), accuracy, $ and s per episode. `backends`: the columns (default: every
    backend called)."""
    cols = list(backends) if backends is not None else sorted(
        {b for rows in summaries.values() for r in rows.values() for b in r.backend_share})
    head = ["policy", "profile", *[f"{b} %" for b in cols], "first listed %", "cheapest shown %", "well formed %",
            "accuracy", "$ / task", "s / task"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for policy, rows in summaries.items():
        for profile, r in rows.items():
            first = "—" if r.first_listed is None else f"{100 * r.first_listed:.1f}"
            cheap = "—" if r.cheapest_shown is None else f"{100 * r.cheapest_shown:.1f}"
            cells = [policy, profile, *[f"{100 * r.backend_share.get(b, 0.0):.1f}" for b in cols], first, cheap,
                     f"{100 * r.well_formed:.1f}", f"{r.accuracy:.3f}", f"{r.cost_usd:.5f}", f"{r.latency_s:.2f}"]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
