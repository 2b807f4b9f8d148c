"""`simulated` tools: a stand-in for a model, with declared per-category accuracy, price and latency.

It reads the task's reference answer (`context.answer`) and returns it with the probability its card
declares for the task's category, otherwise a plausible wrong answer: a perturbed number, or another
value of the same kind from the shipped search corpus ("Madrid" for "Paris"), or one of the card's
`distractors`. The draw depends only on (seed, tool name, task id), so a run is reproducible; nothing
sleeps (latency is the card's declared one). Every answer says "simulated" in its text and label.
"""

from __future__ import annotations

import functools
import json
import random
import re
from decimal import Decimal, InvalidOperation
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchlib.tools.base import Tool, ToolContext, ToolError, approx_tokens, task_text
from orchlib.trajectory import Observation

__all__ = ["SimulatedSettings", "SimulatedTool", "wrong_answer"]


class SimulatedSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    accuracy: dict[str, float] = Field(description="probability of a correct answer per task category; "
                                       "'default' for the others")
    tokens_out: int = Field(200, ge=0, description="output tokens charged per answer")
    distractors: list[str] = Field(default_factory=list, description="wrong answers for non-numeric tasks")

    @field_validator("accuracy")
    @classmethod
    def _probabilities(cls, acc: dict[str, float]) -> dict[str, float]:
        if "default" not in acc:
            raise ValueError("needs a 'default' entry, used for categories not listed")
        bad = {k: v for k, v in acc.items() if not 0.0 <= v <= 1.0}
        if bad:
            raise ValueError(f"accuracies are probabilities in [0, 1]: {bad}")
        return acc


class SimulatedTool(Tool):
    kind = "simulated"
    Settings = SimulatedSettings
    measured = False

    def accuracy(self, category: str) -> float:
        return self.settings.accuracy.get(category, self.settings.accuracy["default"])

    async def _run(self, arguments: dict[str, Any], context: ToolContext) -> Observation:
        if context.answer is None:
            raise ToolError(f"{self.name} is simulated and needs the task's reference answer (context.answer)")
        rng = random.Random(f"{context.seed}:{self.name}:{context.task_id}")
        correct = rng.random() < self.accuracy(context.category)
        answer = context.answer if correct else wrong_answer(context.answer, rng, self.settings.distractors)
        asked = task_text(context) if self.card.input == "task" else json.dumps(arguments, ensure_ascii=False)
        return Observation(content=f"[simulated {self.name}] The answer is {answer}.",
                           tokens_in=approx_tokens(asked), tokens_out=self.settings.tokens_out, label="simulated")


_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")


def wrong_answer(answer: str, rng: random.Random, distractors: list[str] = ()) -> str:
    """A plausible answer different from `answer` (compared after trimming, case-insensitively)."""
    plain = answer.strip().replace(",", "")
    if _NUMBER.match(plain):
        return _perturb(plain, rng)
    key = answer.strip().lower()
    pool = [d for d in distractors if d.strip().lower() != key] or \
           [v for v in _siblings().get(key, ()) if v.lower() != key]
    return rng.choice(pool) if pool else "unknown"


def _perturb(number: str, rng: random.Random) -> str:
    try:
        value = Decimal(number)
    except InvalidOperation:  # cannot happen after _NUMBER matched; kept for a clear failure
        raise ValueError(f"not a number: {number!r}") from None
    places = -value.as_tuple().exponent if value.as_tuple().exponent < 0 else 0
    step = Decimal(1).scaleb(-places)  # one unit of the last digit written
    # Off by up to 20% (at least one unit), in either direction: a slip, not a wild guess.
    span = max(1, int(abs(value) * Decimal("0.2") / step))
    delta = rng.randint(1, span) * step * rng.choice((-1, 1))
    return str(value + delta)


@functools.lru_cache(maxsize=1)
def _siblings() -> dict[str, list[str]]:
    """{value (lower case): other values of the same fact key} from the shipped search corpus."""
    by_key: dict[str, set[str]] = {}
    text = resources.files("orchlib").joinpath("data/search_corpus/facts.jsonl").read_text(encoding="utf-8")
    for line in text.splitlines():
        if line.strip():
            for k, v in json.loads(line).get("facts", {}).items():
                by_key.setdefault(k, set()).add(v)
    out: dict[str, list[str]] = {}
    for values in by_key.values():
        for v in values:
            out.setdefault(v.lower(), [])
            out[v.lower()] += sorted(values - {v})
    return out
