"""Evidence drills: short supervised examples that teach a policy to call the tool whose description says it
is most often right on the kind of question asked.

A policy trained on configurations learns to read the prices' order (`orchlib.train.drills`), and where the
dearest tool is also the most accurate, that order is all it needs: it never has to read what a
description says a tool is good at. Shown tools it never saw, at one price, it has nothing else to go by.
Each evidence drill is a question of the world's own (a train task's words and category) offering two or
three tools under names drawn fresh per drill, every one at the same price, each described as
`orchlib.describe` writes measured evidence (`describe_stats.template_text`: "Right on 80% of arithmetic
(n=10, 95% CI 49–94%), 10% of gsm8k (...); mean cost $0.0004, mean latency 5 s."), with success rates
drawn per drill and per category, other categories among them. The golden call is the tool most often
right on the question's category, by a clear margin, under either profile: at one price that is what P
asks for. Names, rates and positions change from drill to drill, so the only rule to learn is reading
the line of the question's kind; no drill shows a real backend, so none shows a choice a test measures.
With `decoys` the drills make sure of it: no other line is led by the right tool, and the question's line
is not always the first; with `every_kind` every kind of the questions has its line on every drill, as on
a card described on those kinds, so that reading one kind's line whatever the question cannot pass
them. `in_warm_start` carries drills on into the warm start, among its golden
trajectories.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Collection, Sequence

from pydantic import ConfigDict, Field

from orchlib.configurations import generated_names
from orchlib.describe_stats import ToolStats, Trial, summarise, template_text
from orchlib.prompting import render_prompt
from orchlib.settings import Settings
from orchlib.tasks import PROFILES, Task
from orchlib.train.drills import call_example, drill_to_gate, exact_call_share
from orchlib.train.sft import SFTConfig, SFTExample

__all__ = ["EvidenceDrillConfig", "EvidenceDrill", "evidence_drills", "evidence_drill_prompt", "shows_evidence",
           "evidence_drill_examples", "evidence_drill_accuracy", "drill_evidence", "warm_start_drills",
           "OTHER_CATEGORIES", "DECOY_CATEGORIES"]

# Categories a drill's descriptions may also report, beside the question's own and the world's: the line to
# read is the question's kind, not the one number shown.
OTHER_CATEGORIES = ("lookup", "code", "trivia", "translation", "logic")
# With `decoys`, also kinds that sort before any question's kind (the lines are in alphabetical order), so
# that an arithmetic question's line is not always the first
DECOY_CATEGORIES = OTHER_CATEGORIES + ("accounting", "algebra", "anatomy")
_PROFILES = ("accuracy", "thrifty")  # at one price both ask for the most accurate tool


class EvidenceDrillConfig(Settings):
    """Evidence drills before a warm start (`RunConfig.evidence_drills`): SFT on `n` drills until `gate` of
    `held_out` more (on names the drills never show) are answered exactly, then `margin_steps` more. The
    run's rollout must show the evidence: tools listed `brief` (the descriptions), or `evidence_order`
    (a line per kind of question, `orchlib.prompting.evidence_order_lines`), or both."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    n: int = Field(1000, ge=1, description="drills to train on")
    held_out: int = Field(64, ge=1, description="drills the gate measures, on names the drills never show")
    gate: float = Field(0.9, ge=0, le=1, description="share of held-out drills answered exactly (greedy) that ends "
                                                     "the drills")
    margin_steps: int = Field(10, ge=0, description="steps more after the gate")
    check_every: int = Field(10, ge=1, description="steps between two measures of the gate")
    first_check: int | None = Field(None, ge=1, description="step of the first measure (none: `check_every`): on "
                                    "SmolLM2 one measure of 64 drills took 57 s, three and a half steps' time")
    margin: float = Field(0.25, gt=0, lt=1, description="the right tool's success rate beats every other's by at "
                                                        "least this much: the evidence is clear, not a coin")
    balance_kinds: bool = Field(False, description="draw each drill's kind of question first, every kind of the "
                                "questions equally often, then a question of that kind, so that no one kind's line "
                                "answers most drills (without it the drills follow the questions' mix). On "
                                "SmolLM2's description test it did not make the policy match the line to the "
                                "question: docs/results.md")
    in_warm_start: int = Field(0, ge=0, description="drills more, drawn as the `n` are but past them (none trained "
                               "on), mixed among the warm start's golden trajectories: SFT on one world's prompts "
                               "alone wore the reading away on SmolLM2 (docs/results.md); 0: none")
    decoys: bool = Field(False, description="every other kind's line a decoy: the right tool leads no line but its "
                         "question's, and that line stands first on about one drill in k (k lines), so neither "
                         "'the first line' nor one kind's line passes the drills; without it 'the first name of "
                         "the first line' answered 0.92 of SmolLM2's recipe drills (docs/results.md)")
    every_kind: bool = Field(False, description="every kind of the questions on every drill's lines (with "
                             "`decoys`, the other kinds' led by other tools), as a card described on those kinds "
                             "shows them: without it 12 % of SmolLM2's recipe drills showed both of its kinds, "
                             "and 'the gsm8k line's leader' answered 0.72 of the drills with decoys "
                             "(docs/results.md)")
    seed: int = Field(0, description="seeds the drills' draw and the SFT")
    sft: SFTConfig = Field(
        default_factory=lambda: SFTConfig(max_steps=300, batch_size=8, learning_rate=1e-4, schedule="constant",
                                          warmup_fraction=0.0),
        description="the drills' SFT; max_steps is its budget if the gate is never met")


@dataclass(frozen=True)
class EvidenceDrill:
    """A question (its words and category) under a profile, and the offered tools' names and evidence, in
    list order."""

    question: str
    category: str
    profile: str
    names: tuple[str, ...]
    stats: tuple[ToolStats, ...]

    @property
    def answer(self) -> str:
        """The tool most often right on the question's category."""
        return _leader(self, self.category)


def _stats(rng: random.Random, name: str, categories: Sequence[str], rates: dict[str, float], cost: float,
           latency: float) -> ToolStats:
    """ToolStats as `orchlib.describe` would measure them: n trials per category at the drawn rate."""
    trials = []
    for cat in categories:
        n = rng.randint(8, 20)
        right = round(rates[cat] * n)
        trials += [Trial(task_id=f"{cat}-{i}", category=cat, right=i < right, cost_usd=cost, latency_s=latency,
                         error=None, input="", output="") for i in range(n)]
    return summarise(name, trials, examples=0)


def _draw(rng: random.Random, pool: Sequence[str], questions: Sequence[Task], categories: Sequence[str],
          n: int, margin: float, balance: bool = False, decoys: bool = False,
          every_kind: bool = False) -> list[EvidenceDrill]:
    by_kind: dict[str, list[Task]] = {}
    for q in questions:
        by_kind.setdefault(q.category, []).append(q)
    kinds = sorted(by_kind)
    out = []
    while len(out) < n:
        q = rng.choice(by_kind[rng.choice(kinds)]) if balance else rng.choice(questions)
        k = rng.choice((2, 3, 3))
        if every_kind:  # the questions' other kinds, then none or one more
            others = [c for c in kinds if c != q.category]
            others += _others(rng, q.category, [c for c in categories if c not in others], rng.randint(0, 1), decoys)
        else:
            others = _others(rng, q.category, categories, rng.randint(1, 2), decoys)
        shown = sorted({q.category, *others})
        names = tuple(rng.sample(pool, k))
        rates = [{c: rng.randint(0, 10) / 10 for c in shown} for _ in names]
        cost, latency = rng.choice((0.00005, 0.0002, 0.0009, 0.004)), rng.choice((1, 2, 5, 12))
        stats = tuple(_stats(rng, nm, shown, r, cost, latency) for nm, r in zip(names, rates))
        own = sorted(s.categories[q.category].success_rate for s in stats)  # as shown, whole trials
        if own[-1] - own[-2] < margin - 1e-9:  # the evidence must decide
            continue
        drill = EvidenceDrill(q.prompt, q.category, rng.choice(_PROFILES), names, stats)
        if decoys and any(_leader(drill, c) == drill.answer for c in others):
            continue
        out.append(drill)
    return out


def _others(rng: random.Random, kind: str, categories: Sequence[str], m: int, decoys: bool) -> list[str]:
    """`m` kinds beside the question's `kind`; with `decoys`, as many sorting before it as a uniform draw of
    its line's place among the m + 1 says (where there are that many)."""
    rest = [c for c in categories if c != kind]
    if not decoys:
        return rng.sample(rest, m)
    before, after = [c for c in rest if c < kind], [c for c in rest if c > kind]
    ahead = min(rng.randint(0, m), len(before))
    ahead = max(ahead, m - len(after))
    return rng.sample(before, ahead) + rng.sample(after, m - ahead)


def _leader(drill: EvidenceDrill, kind: str) -> str:
    """The first name on `kind`'s evidence line (`orchlib.prompting.evidence_order_lines`: ties keep the list's
    order)."""
    rates = [s.categories[kind].success_rate for s in drill.stats]
    return drill.names[rates.index(max(rates))]


def evidence_drills(seed: int, n: int, questions: Sequence[Task], exclude: Collection[str] = (),
                    margin: float = 0.25, balance: bool = False, decoys: bool = False,
                    every_kind: bool = False) -> list[EvidenceDrill]:
    """`n` drills over `questions` (their words and categories), the names drawn from the generated ones
    without their `tool_` prefix (`orchlib.configurations.generated_names`) less `exclude`; with `balance`,
    every kind of question equally often (EvidenceDrillConfig.balance_kinds); with `decoys`, the other
    kinds' lines led by other tools and the question's line not always first (EvidenceDrillConfig.decoys);
    with `every_kind`, every kind of the questions on every drill's lines (EvidenceDrillConfig.every_kind)."""
    if n < 0:
        raise ValueError(f"evidence_drills: n must be at least 0, not {n}")
    if not questions:
        raise ValueError("evidence_drills: no questions to drill on")
    excluded = set(exclude)
    pool = [name for name in generated_names(4900, prefix="") if name not in excluded]
    return _draw(random.Random(f"evidence-drills:{seed}"), pool, list(questions), _categories(questions, decoys), n,
                 margin, balance, decoys, every_kind)


def _categories(questions: Sequence[Task], decoys: bool = False) -> list[str]:
    """The categories a drill's descriptions draw from: the questions' own and OTHER_CATEGORIES (with `decoys`,
    DECOY_CATEGORIES)."""
    return sorted({q.category for q in questions} | set(DECOY_CATEGORIES if decoys else OTHER_CATEGORIES))


def _tools(drill: EvidenceDrill) -> list[dict]:
    """The drill's tools as `orchlib.prompting.tool_schemas` lists them `brief`, each with its evidence as a
    described card carries it: one price for all."""
    return [{"name": name, "arguments": [], "call_price": 0.0,
             "description": f"{name.capitalize()}: answers the question itself; its answer is final. "
                            f"{template_text(stats)}",
             "evidence": {c: s.success_rate for c, s in stats.categories.items()}}
            for name, stats in zip(drill.names, drill.stats)]


def shows_evidence(rollout) -> bool:
    """Whether `rollout` (a RolloutConfig) shows the evidence the drills ask to read: the descriptions of a
    `brief` list, or the evidence-order lines."""
    return rollout.tool_schema == "brief" or rollout.evidence_order


def evidence_drill_prompt(drill: EvidenceDrill, tokenizer, rollout) -> str:
    """The drill's prompt, rendered as `rollout` (a RolloutConfig listing tools `brief`, or with
    `evidence_order`) renders a task."""
    if not shows_evidence(rollout):
        raise ValueError(f"evidence drills: the prompt shows no evidence to read: the rollout lists tools "
                         f"{rollout.tool_schema!r} without evidence_order; list them 'brief' or set "
                         f"evidence_order")
    task = Task(id="evidence-drill", prompt=drill.question, category=drill.category,
                preference=PROFILES[drill.profile])
    return render_prompt(task, _tools(drill), tokenizer, rollout)


def evidence_drill_examples(drills: Sequence[EvidenceDrill], tokenizer, rollout) -> list[SFTExample]:
    """SFT examples: each drill's prompt, then the call of its answer, the loss on the call alone."""
    return [call_example(evidence_drill_prompt(d, tokenizer, rollout), d.answer, tokenizer) for d in drills]


def evidence_drill_accuracy(engine, drills: Sequence[EvidenceDrill], rollout, max_new_tokens: int = 32) -> float:
    """Greedy: the share of `drills` whose reply calls exactly their answer (and nothing else)."""
    return exact_call_share(engine, [evidence_drill_prompt(d, engine.tokenizer, rollout) for d in drills],
                            [d.answer for d in drills], max_new_tokens)


def drill_evidence(model, tokenizer, config: EvidenceDrillConfig, questions: Sequence[Task], rollout,
                   held_out_questions: Sequence[Task] = (), progress: bool = True) -> dict[str, Any]:
    """Train `model` in place on `config.n` evidence drills over `questions` until the gate (see
    EvidenceDrillConfig). The gate's drills take their names from a set the training drills never draw and
    their questions from `held_out_questions` (else from `questions`). Returns {"steps", "accuracy"
    (held-out, at the end), "checks", "seconds"} (`orchlib.train.drills.drill_to_gate`)."""
    import time

    from orchlib.engines import TransformersEngine

    t0 = time.perf_counter()
    gate_names = _gate_names()
    drills = _drills(config, config.n, questions)
    held = _draw(random.Random(f"evidence-drills:held-out:{config.seed}"), gate_names,
                 list(held_out_questions or questions), _categories(questions, config.decoys), config.held_out,
                 config.margin, config.balance_kinds, config.decoys, config.every_kind)
    engine = TransformersEngine(model, tokenizer, seed=config.seed)
    return drill_to_gate(model, tokenizer, evidence_drill_examples(drills, tokenizer, rollout), config,
                         lambda: evidence_drill_accuracy(engine, held, rollout), "evidence drills", progress, t0)


def _drills(config: EvidenceDrillConfig, n: int, questions: Sequence[Task]) -> list[EvidenceDrill]:
    """The first `n` training drills `config` draws: none on the gate's names."""
    return evidence_drills(config.seed, n, questions, exclude=_gate_names(), margin=config.margin,
                           balance=config.balance_kinds, decoys=config.decoys, every_kind=config.every_kind)


def _gate_names() -> list[str]:
    """The last 300 generated names: the gate's alone, never drawn by a drill that trains."""
    return generated_names(4900, prefix="")[-300:]


def warm_start_drills(config: EvidenceDrillConfig, questions: Sequence[Task], tokenizer, rollout) -> list[SFTExample]:
    """The `config.in_warm_start` drills a warm start mixes in (EvidenceDrillConfig.in_warm_start), as SFT
    examples: the draw `drill_evidence` trains on, carried on past its `config.n`, so none is a drill already
    trained on and none shows a name the gate measures."""
    if config.in_warm_start == 0:
        return []
    drills = _drills(config, config.n + config.in_warm_start, questions)[config.n:]
    return evidence_drill_examples(drills, tokenizer, rollout)
