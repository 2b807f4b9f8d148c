"""`replay` tools: answers a real model gave, read back from a recording instead of asking it again.

A recording is a CSV with a prompt column, a `<model>_response` column with the model's full answer
and a `<model>` column with its grade (True/False), as RouteLLM's `gsm8k_responses.csv` (shipped as
`orchlib:data/routellm/gsm8k_responses.csv`). The question (the task prompt with `input: task`, else
the argument `backend.argument`) is looked up exactly after collapsing whitespace; a question that is
not in the recording is an error observation, never a made-up answer.

Tokens are not in the recording, so `approx_tokens` (orchlib.tools.base) estimates them from the
question (input) and the answer (output); the card's price turns them into USD. Latency is the card's
declared latency: nothing is waited for.
"""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import functools
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchlib.cards import ToolCard
from orchlib.tools.base import Tool, ToolContext, ToolError, approx_tokens, resolve_path
from orchlib.trajectory import Observation

__all__ = ["ReplaySettings", "ReplayTool", "Recorded", "load_recording", "replay_lookup", "normalise"]


class ReplaySettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    path: str = Field(description="CSV recording; 'orchlib:data/...' is inside the package")
    model: str = Field(description="the model's column name, e.g. mistralai/Mixtral-8x7B-Instruct-v0.1")
    prompt_column: str = Field("prompt", description="column holding the question")
    response_column: str | None = Field(None, description="column holding the answer; default '<model>_response'")
    grade_column: str | None = Field(None, description="column holding True/False; default '<model>'")
    argument: str = Field("question", description="input: arguments — which argument holds the question")


@dataclasses.dataclass(frozen=True)
class Recorded:
    text: str
    correct: bool | None  # the recording's grade; None when it has no grade column


def normalise(text: str) -> str:
    """Whitespace collapsed: the lookup key of a question."""
    return " ".join(text.split())


@functools.lru_cache(maxsize=16)
def load_recording(path: Path, model: str, prompt_column: str = "prompt", response_column: str | None = None,
                   grade_column: str | None = None) -> dict[str, Recorded]:
    """{normalised question: Recorded} of one model in a CSV recording (read once per process)."""
    response_column = response_column or f"{model}_response"
    grade_column = grade_column or model
    out: dict[str, Recorded] = {}
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        missing = {prompt_column, response_column} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path}: no column(s) {sorted(missing)}; columns are {reader.fieldnames}")
        graded = grade_column in (reader.fieldnames or ())
        for row in reader:
            grade = row[grade_column].strip().lower() if graded else ""
            # The first answer wins should a question be recorded twice.
            out.setdefault(normalise(row[prompt_column]), Recorded(
                text=row[response_column], correct={"true": True, "false": False}.get(grade)))
    return out


def _recording(card: ToolCard) -> dict[str, Recorded]:
    s = ReplaySettings.model_validate(card.backend)
    return load_recording(resolve_path(s.path, card), s.model, s.prompt_column, s.response_column, s.grade_column)


def replay_lookup(card: ToolCard, question: str) -> tuple[str, bool | None]:
    """(recorded answer, graded correct) for analysis; KeyError when the question was not recorded."""
    found = _recording(card).get(normalise(question))
    if found is None:
        raise KeyError(f"question not in the recording of {card.name}: {normalise(question)[:80]!r}")
    return found.text, found.correct


class ReplayTool(Tool):
    kind = "replay"
    Settings = ReplaySettings
    measured = False

    def __init__(self, card: ToolCard):
        super().__init__(card)
        self.path = resolve_path(self.settings.path, card)
        if not self.path.is_file():
            raise card.error(("backend", "path"), f"no such file: {self.path}")

    async def _run(self, arguments: dict[str, Any], context: ToolContext) -> Observation:
        question = context.prompt if self.card.input == "task" else arguments.get(self.settings.argument)
        if not isinstance(question, str) or not question.strip():
            raise ToolError("no question to look up (empty task prompt or argument)")
        try:
            recording = await asyncio.to_thread(_recording, self.card)  # first read parses the CSV
        except (OSError, ValueError) as e:
            raise ToolError(f"cannot read the recording {self.path}: {e}") from None
        found = recording.get(normalise(question))
        if found is None:
            raise ToolError(f"{self.name} is a replay of recorded answers and this question is not in the "
                            f"recording ({self.path.name}); no answer can be given")
        return Observation(content=found.text.strip(), tokens_in=approx_tokens(question),
                           tokens_out=approx_tokens(found.text))
