"""What a tool did on sampled tasks, as numbers and as text: pure functions, no tool is run here.

`summarise` turns trials (one call of the tool on one task) into per-category statistics: the success
rate with its 95% Wilson score interval, mean cost (USD), mean latency (s), error rate and a few short
examples. `template_text` writes the deterministic offline description from those statistics,
`describer_prompt` the prompt a describer model reads, and `block` the card's `auto_description`.

The Wilson interval (Wilson 1927; Brown, Cai & DasGupta 2001, "Interval Estimation for a Binomial
Proportion") is used rather than p ± 1.96·se because a tool that is right on 12 of 12 tasks would
otherwise get the interval [1, 1]; Wilson's stays inside [0, 1] and is honest at small n. A difference of
two shares gets Newcombe's hybrid score interval (Newcombe 1998, "Interval estimation for the difference
between independent proportions", method 10), built from the two Wilson intervals: it stays inside
[-1, 1] where p_a − p_b ± 1.96·se would run past 1 when one share is 40 of 40.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Z95", "Trial", "CategoryStats", "ToolStats", "wilson", "newcombe", "summarise", "template_text",
           "stats_table", "describer_prompt", "block", "percent", "sig", "usd"]

Z95 = 1.959963984540054  # two-sided 95% normal quantile
EXAMPLE_CHARS = 100  # examples are reminders for a reader, not transcripts


@dataclasses.dataclass(frozen=True)
class Trial:
    """One call of the tool on one task: was it right, what it cost, how long it took."""

    task_id: str
    category: str
    right: bool
    cost_usd: float
    latency_s: float
    error: str | None
    input: str
    output: str


class CategoryStats(BaseModel):
    """How the tool did on the sampled tasks of one category (or of all of them)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    n: int = Field(ge=0, description="tasks tried")
    right: int = Field(ge=0, description="tasks the tool got right")
    success_rate: float
    ci_low: float = Field(description="95% Wilson score interval of the success rate")
    ci_high: float
    mean_cost_usd: float
    mean_latency_s: float
    error_rate: float = Field(description="share of calls that came back as an error observation")
    examples: list[dict[str, Any]] = Field(default_factory=list, description="{input, output, right}")


class ToolStats(BaseModel):
    """Everything recorded about one tool: per category, overall, and where the numbers come from."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    tool: str
    n: int
    skipped: int = Field(description="tasks offering the tool that had no arguments for it")
    categories: dict[str, CategoryStats]
    overall: CategoryStats
    date: str
    task_source: str = ""
    seed: int = 0


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion; (0, 1) when nothing was observed."""
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be within 0..n, got {successes} of {n}")
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe(hits_a: int, n_a: int, hits_b: int, n_b: int, z: float = Z95) -> tuple[float, float]:
    """Newcombe's hybrid score interval of p_a − p_b, two independent binomial shares."""
    if n_a == 0 or n_b == 0:
        raise ValueError(f"both shares need at least one trial, got n_a={n_a}, n_b={n_b}")
    pa, pb = hits_a / n_a, hits_b / n_b
    (la, ua), (lb, ub) = wilson(hits_a, n_a, z), wilson(hits_b, n_b, z)
    d = pa - pb
    return d - math.hypot(pa - la, ub - pb), d + math.hypot(ua - pa, pb - lb)


def _short(text: str) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= EXAMPLE_CHARS else flat[:EXAMPLE_CHARS - 1].rstrip() + "…"


def _examples(trials: Sequence[Trial], k: int) -> list[dict[str, Any]]:
    """Up to k examples: the first right and the first wrong one come first (the contrast is what a
    describer learns from), then the next trials in sample order."""
    first = [next((t for t in trials if t.right), None), next((t for t in trials if not t.right), None)]
    chosen = [t for t in first if t is not None]
    chosen += [t for t in trials if t not in chosen]
    return [{"input": _short(t.input), "output": _short(t.output), "right": t.right} for t in chosen[:k]]


def _stats(trials: Sequence[Trial], examples: int) -> CategoryStats:
    n = len(trials)
    right = sum(t.right for t in trials)
    lo, hi = wilson(right, n)
    return CategoryStats(n=n, right=right, success_rate=right / n if n else 0.0, ci_low=lo, ci_high=hi,
                         mean_cost_usd=sum(t.cost_usd for t in trials) / n if n else 0.0,
                         mean_latency_s=sum(t.latency_s for t in trials) / n if n else 0.0,
                         error_rate=sum(t.error is not None for t in trials) / n if n else 0.0,
                         examples=_examples(trials, examples) if examples else [])


def summarise(tool: str, trials: Iterable[Trial], *, skipped: int = 0, date: str = "", task_source: str = "",
              seed: int = 0, examples: int = 2) -> ToolStats:
    """Statistics of `trials`, per category (sorted by name) and overall."""
    trials = list(trials)
    by_cat: dict[str, list[Trial]] = {}
    for t in trials:
        by_cat.setdefault(t.category, []).append(t)
    return ToolStats(tool=tool, n=len(trials), skipped=skipped, date=date, task_source=task_source, seed=seed,
                     categories={c: _stats(by_cat[c], examples) for c in sorted(by_cat)},
                     overall=_stats(trials, 0))


# ---------------------------------------------------------------------------------------------- numbers as text
def sig(x: float, digits: int = 2) -> str:
    """At most `digits` significant digits in positional notation (0.000073, 1.2, 30, 0.00007), never
    7.3e-05: the text is read by people and by small models."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    places = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    text = f"{x:.{places}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def usd(x: float) -> str:
    return "$" + sig(x)


def percent(x: float) -> str:
    return f"{100 * x:.0f}%"


def _ci(s: CategoryStats) -> str:
    return f"{100 * s.ci_low:.0f}–{100 * s.ci_high:.0f}%"


def template_text(stats: ToolStats) -> str:
    """The offline description of the measurements, deterministic: e.g. "Right on 92% of arithmetic
    (n=12, 95% CI 65–99%), 40% of lookup (n=10, 95% CI 17–69%); mean cost $0.00007, mean latency 1.2 s."""
    parts = [f"{percent(s.success_rate)} of {cat} (n={s.n}, 95% CI {_ci(s)})" for cat, s in stats.categories.items()]
    o = stats.overall
    cost = f"mean cost {usd(o.mean_cost_usd)}" if o.mean_cost_usd else "free"
    text = f"Right on {', '.join(parts)}; {cost}, mean latency {sig(o.mean_latency_s)} s"
    if o.error_rate:
        text += f"; errors on {percent(o.error_rate)} of calls"
    return text + "."


def stats_table(stats: ToolStats) -> str:
    """The statistics as a plain-text table (what the describer reads and the command prints)."""
    rows = [("category", "n", "right", "95% CI", "mean cost", "mean latency", "errors")]
    for cat, s in [*stats.categories.items(), ("all", stats.overall)]:
        rows.append((cat, str(s.n), percent(s.success_rate), _ci(s), usd(s.mean_cost_usd),
                     f"{sig(s.mean_latency_s)} s", percent(s.error_rate)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def describer_prompt(name: str, base: str, price: str, stats: ToolStats) -> str:
    """What the describer model reads: the tool, its current text, the statistics and examples."""
    examples = [f"- [{cat}] {e['input']} -> {e['output']} ({'right' if e['right'] else 'wrong'})"
                for cat, s in stats.categories.items() for e in s.examples]
    skipped = f" ({stats.skipped} more offered it but had no arguments for it)" if stats.skipped else ""
    return "\n".join([
        "You write the description of a tool. An orchestrator model reads it to decide when to call the "
        "tool, weighing how often it is right against what it costs and how long it takes.",
        "Write two to four plain sentences: what the tool does, where it is reliable and where it is not "
        "(give the success rates), its mean cost in USD and its mean latency in seconds. Use only the "
        "evidence below. Answer with the description alone.",
        "",
        f"Tool: {name}",
        f"Current description: {' '.join(base.split())}",
        f"Price: {price}",
        "",
        f"Tried on {stats.n} sampled tasks{skipped}:",
        stats_table(stats),
        "",
        "Examples (input -> output):",
        *examples,
    ])


def _rounded(s: CategoryStats) -> dict[str, Any]:
    out: dict[str, Any] = {"n": s.n, "right": s.right, "success_rate": round(s.success_rate, 4),
                           "ci95": [round(s.ci_low, 4), round(s.ci_high, 4)],
                           "mean_cost_usd": float(f"{s.mean_cost_usd:.3g}"),
                           "mean_latency_s": float(f"{s.mean_latency_s:.4g}"), "error_rate": round(s.error_rate, 4)}
    if s.examples:
        out["examples"] = [dict(e) for e in s.examples]
    return out


def block(stats: ToolStats, *, method: str, base: str, digest: str, history: list[dict[str, Any]]) -> dict[str, Any]:
    """The card's `auto_description`: how and when the text was made, the numbers, and what it replaced.
    `base` is the text the tool had before any generated description (the template keeps it in front);
    `digest` identifies the generated text, so a later hand edit is noticed and becomes the new base."""
    return {"method": method, "date": stats.date, "task_source": stats.task_source, "seed": stats.seed,
            "n": stats.n, "skipped": stats.skipped, "overall": _rounded(stats.overall),
            "categories": {c: _rounded(s) for c, s in stats.categories.items()},
            "base": base, "digest": digest, "history": history}
