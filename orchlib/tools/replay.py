"""`replay` tools: answers real models gave, read back from a recording instead of asking them again.

The recording (its layouts, columns and checks: `orchlib.recordings`) is named by the card's backend,
`ReplaySettings`. The question (the task prompt with `input: task`, else the argument
`backend.argument`; or the task's id with `match: task_id`) is looked up exactly after collapsing
whitespace. A question that is not in the recording, or whose response is empty, is an error
observation (`tool_failure`), never a made-up or empty answer.

Money and time: a call with a recorded cost is billed that cost (`billing: recorded`, the default);
otherwise (or with `billing: reprice`) recorded token counts are priced by the card per token class,
reasoning tokens billed as output (`Price.per_m_reasoning` where a provider bills them apart) and
cached input as input (or `per_m_cached_input`); `replay_cards(prices=load_prices())` takes every price
from a price table (`orchlib.prices`, each row with its source and date); without counts,
`approx_tokens` estimates input from the question and output from the answer. A recorded latency is
reported as it is; otherwise the card's declared latency. Nothing is waited for. A recorded grade
travels in `Observation.meta["grade"]` (the `recorded` checker of orchlib.tasks scores with it).
"""

from __future__ import annotations

import asyncio
import os
import re
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping

from orchlib.cards import Latency, Price, ToolCard
from orchlib.prices import PriceTable
from orchlib.recordings import (RecordingError, ReplaySettings, load_recording, loaded_recording, normalise,
                                recording_identity, write_recording)
from orchlib.tools.base import Tool, ToolContext, ToolError, approx_tokens, resolve_path
from orchlib.trajectory import Observation, new_observation, set_fields

# The tool, its cards and lookup, with the two names of orchlib.recordings a card's author writes next to them:
# the backend's settings and the writer of a recording.
__all__ = ["ReplayTool", "replay_cards", "replay_lookup", "ReplaySettings", "write_recording"]


def replay_lookup(card: ToolCard, question: str) -> tuple[str | None, float | None]:
    """(recorded answer, grade) for analysis; KeyError when the question was not recorded."""
    s = ReplaySettings.model_validate(card.backend)
    found = load_recording(resolve_path(s.path, card), s).answers(s.model).get(normalise(question))
    if found is None:
        raise KeyError(f"question not in the recording of {card.name}: {normalise(question)[:80]!r}")
    return found.text, found.grade


# ---------------------------------------------------------------------------------------------- tool
class ReplayTool(Tool):
    kind = "replay"
    Settings = ReplaySettings
    measured = False
    fresh_observations = True  # _run builds a new Observation per call

    def __init__(self, card: ToolCard):
        super().__init__(card)
        self.path = resolve_path(self.settings.path, card)
        if not self.path.is_file():
            raise card.error(("backend", "path"), f"no such file: {self.path}")
        self._identity = recording_identity(self.path, self.settings)

    def _question(self, arguments: dict[str, Any], context: ToolContext) -> str:
        if self.settings.match == "task_id":
            return context.task_id
        return context.prompt if self.card.input == "task" else arguments.get(self.settings.argument)

    async def _run(self, arguments: dict[str, Any], context: ToolContext) -> Observation:
        question = self._question(arguments, context)
        if not isinstance(question, str) or not question.strip():
            raise ToolError("no question to look up (empty task prompt, task id or argument)")
        try:  # a loaded recording is used at once; only a first read goes to a thread
            recording = loaded_recording(self._identity) or await asyncio.to_thread(
                load_recording, self.path, self.settings, self._identity)
            answers = recording.answers(self.settings.model)
        except OSError as e:
            raise ToolError(f"cannot read the recording {self.path}: {e}") from None
        except RecordingError as e:  # names the file, line and column itself
            raise ToolError(f"{self.name}: {e}") from None
        found = answers.get(normalise(question))
        if found is None:
            raise ToolError(f"{self.name} is a replay of recorded answers and this question is not in the "
                            f"recording ({self.path.name}); no answer can be given")
        reasoning = found.tokens_reasoning or 0
        tokens_in = found.tokens_in if found.tokens_in is not None else approx_tokens(
            context.prompt if self.settings.match == "task_id" else question)
        visible = found.tokens_out if found.tokens_out is not None else approx_tokens(found.text or "")
        tokens_out = visible + (0 if self.settings.output_includes_reasoning else reasoning)
        # Built without validation: the recording's values were checked when it was read (ints ≥ 0, floats).
        values: dict[str, Any] = {"tokens_in": tokens_in, "tokens_out": tokens_out,
                                  "tokens_reasoning": min(reasoning, tokens_out),
                                  "tokens_cached": min(found.tokens_cached or 0, tokens_in)}
        if found.latency_s is not None:  # a recorded time, reported as the call's (see Tool.__call__)
            values["latency_s"] = found.latency_s
        if found.text is None:  # the model was asked and gave nothing: a failed call, charged what it was charged
            values.update(content="", error=f"{self.name}'s recorded response to this question is empty (a failed "
                                            "call)", error_kind="tool_failure")
        else:
            values.update(content=found.text.strip(), meta={} if found.grade is None else {"grade": found.grade})
        if found.cost_usd is not None:  # billed in __call__, after the card's price is applied
            values.setdefault("meta", {})["recorded_cost_usd"] = found.cost_usd
        return new_observation(values)

    async def __call__(self, arguments: dict[str, Any] | None = None, context: ToolContext | None = None, *,
                       timeout_s: float | None = None) -> Observation:
        """Tool.__call__, then a call with a recorded cost is billed that cost (`billing: recorded`):
        the bill as it was paid (a discount, a negotiated rate), which no price per token reproduces."""
        obs = await super().__call__(arguments, context, timeout_s=timeout_s)
        recorded = obs.meta.get("recorded_cost_usd")
        if recorded is not None and self.settings.billing == "recorded" and obs.error_kind != "timeout":
            set_fields(obs, {"cost_usd": recorded})
        return obs


# ---------------------------------------------------------------------------------------------- building
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


def replay_cards(path: str | os.PathLike, models: Iterable[str] | None = None, *,
                 prices: Mapping[str, Price | Mapping[str, float]] | PriceTable | None = None,
                 latency: Latency | Mapping[str, Any] | None = None, description: str | None = None,
                 output_includes_reasoning: bool | Mapping[str, bool] = False, **settings: Any) -> list[ToolCard]:
    """One `final`, `input: task` replay card per model of a recording (default: every model in it).

    Names are the model names with characters a tool name cannot hold replaced by `_`. `prices` maps
    every chosen model to its Price (a model it leaves out is an error, never silently free: give a free
    one `Price()`; without `prices` every card is free), or is a price table
    (`orchlib.prices.load_prices()`), which must price every chosen model too (a configuration such as
    "gpt-5/high" takes the row of "gpt-5"). Recordings that mix providers mix conventions, so two settings
    may be given per model: `latency` is one Latency (or its fields, `{"seconds": 2}`) for every model, or
    `{model: Latency | {"seconds": ...} | seconds}`; `output_includes_reasoning` one bool, or `{model:
    bool}` (a model left out: False). `settings` are ReplaySettings columns. With `on_error="skip"`, the
    rows left out are warned about and listed in `load_recording(...).skipped`. Cards made here have no
    file: pass an absolute `path`."""
    path = Path(path)
    s = ReplaySettings(path=str(path), model="", **settings)
    recording = load_recording(path, s)
    if recording.skipped:
        shown = "\n  ".join(recording.skipped[:20])
        more = f"\n  … and {len(recording.skipped) - 20} more" if len(recording.skipped) > 20 else ""
        warnings.warn(f"{path}: {len(recording.skipped)} bad row(s) left out (on_error='skip'; "
                      f"load_recording(...).skipped lists every one):\n  {shown}{more}", stacklevel=2)
    chosen = list(models) if models is not None else recording.models
    table = prices if isinstance(prices, PriceTable) else None
    priced = table is None and prices is not None
    prices = {} if table is not None else dict(prices or {})
    unpriced = [m for m in chosen if m not in prices] if priced else []
    if unpriced:  # a typo, or a model forgotten: billed $0 without a word otherwise
        raise ValueError(f"prices names no price for model(s) {unpriced} (it prices {sorted(prices)}); give each "
                         "chosen model its Price (Price() for a free one)")
    latencies = _per_model(latency, chosen, "latency", _latency)
    reasoning = _per_model(output_includes_reasoning, chosen, "output_includes_reasoning", _flag)
    cards, names = [], {}
    for model in chosen:
        recording.answers(model)  # an unknown model is an error here, not at the first call
        name = _NOT_IN_NAME.sub("_", model).strip("_")[:128] or "model"
        if name in names:
            raise ValueError(f"models {names[name]!r} and {model!r} both become the tool name {name!r}")
        names[name] = model
        if table is not None:
            try:
                price: Any = Price(**table.row(model).price_fields())
            except KeyError as e:
                raise ValueError(e.args[0]) from None
        else:
            price = prices.get(model, Price())
        backend = {**settings, "path": str(path.resolve()), "model": model}
        if reasoning(model):
            backend["output_includes_reasoning"] = True
        cards.append(ToolCard(
            name=name, kind="replay", final=True, input="task", tags=["model", "replay"],
            description=description or f"{model}: solves the task itself (recorded answers); its answer is final.",
            backend=backend, price=price if isinstance(price, Price) else Price(**price),
            latency=latencies(model)))
    return cards


_LATENCY_FIELDS = frozenset(Latency.model_fields)


def _latency(value: Any) -> Latency:
    if isinstance(value, Latency):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Latency(seconds=value)
    return Latency(**(value or {}))


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, not {value!r}")
    return value


def _per_model(value: Any, models: list[str], what: str, convert):
    """`model -> setting` from one setting for every model or a mapping model → setting (a model it
    leaves out gets the default); a mapping naming a model not chosen is an error (a typo would
    otherwise be lost)."""
    per_model = isinstance(value, Mapping) and not (what == "latency" and set(value) <= _LATENCY_FIELDS)
    if not per_model:
        one = convert(value)
        return lambda model: one
    unknown = sorted(set(value) - set(models))
    if unknown:
        raise ValueError(f"{what} names models {unknown} that are not among the recording's chosen models {models}")
    converted = {m: convert(v) for m, v in value.items()}
    default = convert(None if what == "latency" else False)
    return lambda model: converted.get(model, default)
