"""`replay` tools: answers real models gave, read back from a recording instead of asking them again.

A recording comes in one of two layouts (`backend.layout`, found from the columns by default):

- **rows**, one row per question and model (or configuration: "gpt-5 high" and "gpt-5 low" are two);
  JSONL, CSV or Parquet. Columns: the question, the model, the response, and optionally its grade,
  token counts (input, output, reasoning, cached) and latency. One file may hold many models; a
  card picks one with `backend.model`. `write_recording` turns a table in memory (a pandas
  DataFrame, a `datasets.Dataset`, a list of dicts) into such a file.
- **wide**, one row per question with a `<model>_response` and a `<model>` (grade) column per model:
  RouteLLM's `gsm8k_responses.csv` (shipped as `orchlib:data/routellm/gsm8k_responses.csv`).

The question (the task prompt with `input: task`, else the argument `backend.argument`; or the task's
id with `match: task_id`) is looked up exactly after collapsing whitespace. A question that is not in
the recording, or whose response is empty, is an error observation (`tool_failure`), never a made-up
or empty answer.

Money and time: recorded token counts are priced by the card per token class, reasoning tokens billed
as output (`Price.per_m_reasoning` where a provider bills them apart) and cached input as input (or
`per_m_cached_input`); `replay_cards(prices=load_prices())` takes every price from a price table
(`orchlib.prices`, each row with its source and date); without counts, `approx_tokens` estimates input
from the question and output from the answer. A recorded latency is reported as it is; otherwise the
card's declared latency. Nothing is waited for. A recorded grade travels in `Observation.meta["grade"]` (the `recorded`
checker of orchlib.tasks scores with it).

Every file is read once per process and kept (no size limit, so many recordings are never re-read;
`clear_recordings()` frees them); a changed file (size or modification time) is read again.
"""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import io
import json
import math
import os
import re
import threading
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field

from orchlib.atomic import write_text_atomic
from orchlib.cards import Latency, Price, ToolCard
from orchlib.prices import PriceTable
from orchlib.tools.base import Tool, ToolContext, ToolError, approx_tokens, resolve_path
from orchlib.trajectory import Observation, new_observation

__all__ = ["ReplaySettings", "ReplayTool", "Recorded", "Recording", "RecordingError", "read_recording",
           "load_recording", "replay_lookup", "replay_cards", "write_recording", "clear_recordings",
           "parse_grade", "normalise"]

# Columns of the rows layout that are optional: used where the file has them.
_OPTIONAL = {"grade_column": "grade", "tokens_in_column": "input_tokens", "tokens_out_column": "output_tokens",
             "tokens_reasoning_column": "reasoning_tokens", "tokens_cached_column": "cached_tokens",
             "latency_column": "latency_s"}


class ReplaySettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    path: str = Field(description="the recording (.jsonl, .csv or .parquet); 'orchlib:data/...' is inside the package")
    model: str = Field(description="which model or configuration: its value in `model_column` (rows), or the "
                                   "prefix of its `<model>_response` column (wide)")
    layout: Literal["auto", "rows", "wide"] = Field(
        "auto", description="'rows': one row per question and model; 'wide': one row per question, columns per "
                            "model; 'auto': rows when the file has `model_column`, else wide")
    match: Literal["prompt", "task_id"] = Field(
        "prompt", description="look questions up by their text, or by the task's id (`prompt_column` then holds ids)")
    prompt_column: str = Field("prompt", description="column holding the question (or its id)")
    model_column: str = Field("model", description="rows: column naming the model or configuration")
    response_column: str | None = Field(None, description="column holding the answer; default 'response' (rows) "
                                                          "or '<model>_response' (wide)")
    grade_column: str | None = Field(None, description="the grade: 1/0, true/false, or a score in [0, 1]; default "
                                                       "'grade' (rows) or '<model>' (wide); optional")
    tokens_in_column: str = Field("input_tokens", description="rows: input (prompt) tokens; optional")
    tokens_out_column: str = Field("output_tokens", description="rows: output tokens; optional")
    tokens_reasoning_column: str = Field("reasoning_tokens", description="rows: reasoning tokens (billed as "
                                                                         "output); optional")
    tokens_cached_column: str = Field("cached_tokens", description="rows: input tokens served from a cache "
                                                                   "(part of the input count); optional")
    latency_column: str = Field("latency_s", description="rows: seconds the call took; optional")
    output_includes_reasoning: bool = Field(
        False, description="true when the output count already holds the reasoning tokens (OpenAI's "
                           "completion_tokens does); false when they are counted apart")
    argument: str = Field("question", description="input: arguments — which argument holds the question")


class RecordingError(ValueError):
    """A malformed recording: `"{file}:{line}: {field}: {problem}"`."""


@dataclasses.dataclass(frozen=True, slots=True)
class Recorded:
    """One recorded answer. None: not in the recording (estimated, or declared, where it matters)."""

    text: str | None                     # None: an empty response, replayed as a tool failure
    grade: float | None = None           # in [0, 1]
    tokens_in: int | None = None
    tokens_out: int | None = None        # as recorded; see ReplaySettings.output_includes_reasoning
    tokens_reasoning: int | None = None
    tokens_cached: int | None = None
    latency_s: float | None = None


@dataclasses.dataclass
class Recording:
    """A recording read once: model → normalised question → Recorded, models in order of first appearance."""

    path: Path
    layout: str
    by_model: dict[str, dict[str, Recorded]]

    @property
    def models(self) -> list[str]:
        return list(self.by_model)

    def answers(self, model: str) -> dict[str, Recorded]:
        found = self.by_model.get(model)
        if found is None:
            shown = ", ".join(map(repr, self.models[:12])) + (" …" if len(self.models) > 12 else "")
            raise RecordingError(f"{self.path}: no model {model!r} in this recording; it records {shown or 'none'}")
        return found


def normalise(text: str) -> str:
    """Whitespace collapsed: the lookup key of a question."""
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------------- values
_TRUE = {"true", "yes", "correct", "t", "y"}
_FALSE = {"false", "no", "incorrect", "f", "n"}


def parse_grade(value: Any) -> float | None:
    """A recorded grade as a score in [0, 1]: 1, "1", "1.0", True, "true" all read 1.0; empty or None
    reads None (ungraded). Anything else raises ValueError — a grade is never silently dropped."""
    if type(value) in (str, int, bool) and value in _COMMON_GRADES:  # 1, "1", True, "true", 0, ...: as below
        return _COMMON_GRADES[value]
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if not text:
            return None
        if text in _TRUE or text in _FALSE:
            return float(text in _TRUE)
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"not a grade: {value!r} (use 1/0, true/false, or a score in [0, 1])") from None
    if isinstance(value, (int, float)) and math.isfinite(value) and 0.0 <= value <= 1.0:
        return float(value)
    raise ValueError(f"not a grade: {value!r} (use 1/0, true/false, or a score in [0, 1])")


# The spellings recordings use most, read once here (parse_grade gives the same for each).
_COMMON_GRADES: dict[Any, float] = {**{v: 1.0 for v in ("1", "1.0", "true", "True", "TRUE", "yes", "correct")},
                                    **{v: 0.0 for v in ("0", "0.0", "false", "False", "FALSE", "no", "incorrect")},
                                    1: 1.0, 0: 0.0}


def _missing(value: Any) -> bool:
    """An empty cell: None, blank text, or NaN (pandas' missing value)."""
    return value is None or (isinstance(value, str) and not value.strip()) or (
        isinstance(value, float) and math.isnan(value))


def _count(value: Any) -> int | None:
    if type(value) is int and value >= 0:  # the usual case, as the checks below would find it
        return value
    if _missing(value):
        return None
    if isinstance(value, bool):
        raise ValueError(f"not a token count: {value!r}")
    try:
        number = float(value) if isinstance(value, str) else value
    except ValueError:
        raise ValueError(f"not a token count: {value!r}") from None
    if not isinstance(number, (int, float)) or not math.isfinite(number) or number < 0 or number != int(number):
        raise ValueError(f"not a token count (a whole number ≥ 0): {value!r}")
    return int(number)


def _seconds(value: Any) -> float | None:
    if type(value) is float and 0.0 <= value < math.inf:  # the usual case, as the checks below would find it
        return value
    if _missing(value):
        return None
    try:
        number = float(value) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else None
    except ValueError:
        number = None
    if number is None or not math.isfinite(number) or number < 0:
        raise ValueError(f"not a latency in seconds (a number ≥ 0): {value!r}")
    return number


def _text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, (dict, list)):
        raise ValueError(f"a response must be text, got {type(value).__name__}")
    text = str(value)
    try:
        text.encode("utf-8")  # a lone surrogate ("\\ud800" in JSON) could never be written back out
    except UnicodeEncodeError:
        raise ValueError("the response holds a lone surrogate (not text UTF-8 can carry)") from None
    return text if text.strip() else None


# ---------------------------------------------------------------------------------------------- reading
def _rows(path: Path) -> tuple[list[str], Iterator[tuple[int, Mapping[str, Any]]]]:
    """(columns, (line, row) pairs) of a JSONL, CSV or Parquet file; line = 1-based line or row number."""
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        rows = list(_jsonl(path))
        columns = list(dict.fromkeys(k for _, r in rows for k in r))
        return columns, iter(rows)
    if suffix in (".csv", ".tsv"):
        data = path.read_bytes()
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as e:  # the line is counted on the bytes: a text reader reads ahead
            line = data[:e.start].count(b"\n") + 1
            raise RecordingError(f"{path}:{line}: not UTF-8 (byte 0x{data[e.start]:02x})") from None
        reader = csv.DictReader(io.StringIO(text, newline=""), delimiter="\t" if suffix == ".tsv" else ",")
        columns = list(reader.fieldnames or ())
        return columns, iter([(reader.line_num, row) for row in reader])  # line_num: where the row ends
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise RecordingError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow)") from None
        table = pq.read_table(path)
        return list(table.column_names), iter(enumerate(table.to_pylist(), 1))
    raise RecordingError(f"{path}: unknown recording format {suffix!r} (use .jsonl, .csv, .tsv or .parquet)")


def _jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise RecordingError(f"{path}:{lineno}: not UTF-8 (byte 0x{raw[e.start]:02x})") from None
            if not line.strip():
                continue
            try:  # json.loads, not safejson: only the scalar fields are read, and each is checked
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise RecordingError(f"{path}:{lineno}: not JSON: {e.msg} (column {e.colno})") from None
            except ValueError as e:  # an integer too long to convert
                raise RecordingError(f"{path}:{lineno}: {e}") from None
            if not isinstance(row, dict):
                raise RecordingError(f"{path}:{lineno}: a row must be a JSON object, got {type(row).__name__}")
            yield lineno, row


def _layout(s: ReplaySettings, columns: list[str]) -> str:
    if s.layout != "auto":
        return s.layout
    return "rows" if s.model_column in columns else "wide"


def read_recording(path: str | os.PathLike, settings: ReplaySettings | None = None, **columns: Any) -> Recording:
    """Parse a recording file (no cache; `load_recording` caches). `settings` or keyword columns as in
    ReplaySettings (`model` is not needed: every model of the file is read). Raises RecordingError naming
    the file, line and column of the first bad value."""
    path = Path(path)
    s = settings or ReplaySettings(path=str(path), model=columns.pop("model", ""), **columns)
    names, rows = _rows(path)
    layout = _layout(s, names)
    if layout == "rows":
        return Recording(path, layout, _read_rows(path, s, names, rows))
    return Recording(path, layout, _read_wide(path, s, names, rows))


def _need(path: Path, names: list[str], wanted: Iterable[str]) -> None:
    missing = [c for c in wanted if c not in names]
    if missing:
        raise RecordingError(f"{path}: no column(s) {missing}; columns are {names}")


def _parse(path: Path, line: int, column: str, fn, value: Any) -> Any:
    try:
        return fn(value)
    except ValueError as e:
        raise RecordingError(f"{path}:{line}: {column}: {e}") from None


def _read_rows(path: Path, s: ReplaySettings, names: list[str], rows) -> dict[str, dict[str, Recorded]]:
    response = s.response_column or "response"
    explicit = {f: getattr(s, f) for f in _OPTIONAL if f in s.model_fields_set and getattr(s, f) is not None}
    _need(path, names, [s.prompt_column, s.model_column, response, *explicit.values()])
    cols = {f: getattr(s, f) or default for f, default in _OPTIONAL.items()}
    cols = {f: c for f, c in cols.items() if c in names}  # optional columns the file does not have: not recorded
    parsers = {"grade_column": parse_grade, "tokens_in_column": _count, "tokens_out_column": _count,
               "tokens_reasoning_column": _count, "tokens_cached_column": _count, "latency_column": _seconds}
    out: dict[str, dict[str, Recorded]] = {}
    keys: dict[str, str] = {}  # question → its normalised key: each question is asked of many models
    for line, row in rows:
        question = row.get(s.prompt_column)
        if not isinstance(question, (str, int)) or isinstance(question, bool) or not str(question).strip():
            raise RecordingError(f"{path}:{line}: {s.prompt_column}: no question (empty or not text)")
        model = row.get(s.model_column)
        if model is None or not str(model).strip():
            raise RecordingError(f"{path}:{line}: {s.model_column}: no model named")
        values = {f: _parse(path, line, c, parsers[f], row.get(c)) for f, c in cols.items()}
        rec = Recorded(text=_parse(path, line, response, _text, row.get(response)),
                       grade=values.get("grade_column"), tokens_in=values.get("tokens_in_column"),
                       tokens_out=values.get("tokens_out_column"),
                       tokens_reasoning=values.get("tokens_reasoning_column"),
                       tokens_cached=values.get("tokens_cached_column"), latency_s=values.get("latency_column"))
        # The first answer wins should a question be recorded twice for one model.
        text = str(question)
        key = keys.get(text)
        if key is None:
            key = keys[text] = normalise(text)
        out.setdefault(str(model), {}).setdefault(key, rec)
    return out


def _read_wide(path: Path, s: ReplaySettings, names: list[str], rows) -> dict[str, dict[str, Recorded]]:
    if s.response_column:  # named explicitly: that column is the card's model
        models = {s.model: (s.response_column, s.grade_column or s.model)}
        _need(path, names, [s.prompt_column, s.response_column] + ([s.grade_column] if s.grade_column else []))
    else:
        models = {c.removesuffix("_response"): (c, c.removesuffix("_response")) for c in names
                  if c.endswith("_response")}
        if s.grade_column:
            models = {m: (r, s.grade_column) for m, (r, _) in models.items()}
        _need(path, names, [s.prompt_column])
    out: dict[str, dict[str, Recorded]] = {m: {} for m in models}
    for line, row in rows:
        question = row.get(s.prompt_column)
        if not isinstance(question, str) or not question.strip():
            raise RecordingError(f"{path}:{line}: {s.prompt_column}: no question (empty or not text)")
        key = normalise(question)
        for model, (response, grade) in models.items():
            rec = Recorded(text=_parse(path, line, response, _text, row.get(response)),
                           grade=_parse(path, line, grade, parse_grade, row.get(grade)) if grade in names else None)
            out[model].setdefault(key, rec)
    return out


# ---------------------------------------------------------------------------------------------- cache
_CACHE: dict[tuple, Recording] = {}
_LOCK = threading.Lock()  # one reader per file at a time; lookups of a loaded file take no lock


def _identity(path: Path, s: ReplaySettings) -> tuple:
    """What the parse depends on besides the file's version: its real path and the column settings. The
    model is part of it only where it changes the parse (wide, with a named response column)."""
    parse = s.model_dump(exclude={"path", "argument", "match", "output_includes_reasoning", "model"})
    model = s.model if s.response_column and s.layout != "rows" else ""
    return str(path.resolve()), model, tuple(sorted(parse.items()))


def _key(identity: tuple) -> tuple:
    st = os.stat(identity[0])  # a rewritten file (new size or time) is read again
    return identity[0], st.st_mtime_ns, st.st_size, *identity[1:]


def load_recording(path: str | os.PathLike, settings: ReplaySettings, identity: tuple | None = None) -> Recording:
    """The recording at `path`, read once per process and version of the file (thread-safe)."""
    path = Path(path)
    key = _key(identity or _identity(path, settings))
    found = _CACHE.get(key)
    if found is not None:
        return found
    with _LOCK:
        found = _CACHE.get(key)
        if found is None:
            found = read_recording(path, settings)
            for old in [k for k in _CACHE if k[0] == key[0] and k[1:3] != key[1:3]]:
                del _CACHE[old]  # an older version of the same file
            _CACHE[key] = found
    return found


def clear_recordings() -> None:
    """Forget every recording read so far (they are read again when next used)."""
    with _LOCK:
        _CACHE.clear()


def _cached(identity: tuple) -> Recording | None:
    try:
        return _CACHE.get(_key(identity))
    except OSError:
        return None


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
        self._identity = _identity(self.path, self.settings)

    def _question(self, arguments: dict[str, Any], context: ToolContext) -> str:
        if self.settings.match == "task_id":
            return context.task_id
        return context.prompt if self.card.input == "task" else arguments.get(self.settings.argument)

    async def _run(self, arguments: dict[str, Any], context: ToolContext) -> Observation:
        question = self._question(arguments, context)
        if not isinstance(question, str) or not question.strip():
            raise ToolError("no question to look up (empty task prompt, task id or argument)")
        try:  # a loaded recording is used at once; only a first read goes to a thread
            recording = _cached(self._identity) or await asyncio.to_thread(
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
        return new_observation(values)


# ---------------------------------------------------------------------------------------------- building
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


def replay_cards(path: str | os.PathLike, models: Iterable[str] | None = None, *,
                 prices: Mapping[str, Price | Mapping[str, float]] | PriceTable | None = None,
                 latency: Latency | Mapping[str, float] | None = None, description: str | None = None,
                 **settings: Any) -> list[ToolCard]:
    """One `final`, `input: task` replay card per model of a recording (default: every model in it).

    Names are the model names with characters a tool name cannot hold replaced by `_`. `prices` maps a
    model to its Price (a model without one is free: say so explicitly with `Price()`), or is a price
    table (`orchlib.prices.load_prices()`), which must price every chosen model (a configuration such as
    "gpt-5/high" takes the row of "gpt-5"); `settings` are ReplaySettings columns. Cards made here have
    no file: pass an absolute `path`."""
    path = Path(path)
    s = ReplaySettings(path=str(path), model="", **settings)
    recording = load_recording(path, s)
    chosen = list(models) if models is not None else recording.models
    table = prices if isinstance(prices, PriceTable) else None
    prices = {} if table is not None else dict(prices or {})
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
        cards.append(ToolCard(
            name=name, kind="replay", final=True, input="task", tags=["model", "replay"],
            description=description or f"{model}: solves the task itself (recorded answers); its answer is final.",
            backend={**settings, "path": str(path.resolve()), "model": model},
            price=price if isinstance(price, Price) else Price(**price),
            latency=latency if isinstance(latency, Latency) else Latency(**(latency or {}))))
    return cards


def write_recording(table: Any, path: str | os.PathLike) -> Path:
    """Write a table of recorded outputs as a JSONL recording, atomically: a pandas DataFrame
    (`to_dict("records")`), a `datasets.Dataset` or any iterable of mappings, one row per question and
    model. Values are written as they are; reading them back checks them."""
    # A DataFrame iterates over its column names, so it is asked for records; a datasets.Dataset (its
    # to_dict gives columns) and a list iterate over rows as they are.
    rows = table.to_dict(orient="records") if hasattr(table, "iterrows") else table
    lines = []
    for i, row in enumerate(rows, 1):
        if not isinstance(row, Mapping):
            raise TypeError(f"row {i}: expected a mapping of column → value, got {type(row).__name__}")
        clean = {str(k): None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}  # pandas' NA
        lines.append(json.dumps(clean, ensure_ascii=False, allow_nan=False, default=_plain) + "\n")
    return write_text_atomic(path, "".join(lines))


def _plain(value: Any) -> Any:
    """numpy scalars (what pandas rows hold) as Python numbers."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"cannot write a {type(value).__name__} into a recording")
