"""Recordings of real models' answers, read and kept: what `replay` tools (`orchlib.tools.replay`) answer from.

A recording comes in one of two layouts (`ReplaySettings.layout`, found from the columns by default):

- **rows**, one row per question and model (or configuration: "gpt-5 high" and "gpt-5 low" are two);
  JSONL, CSV or Parquet. Columns: the question, the model, the response, and optionally its grade,
  token counts (input, output, reasoning, cached), latency and billed cost. One file may hold many
  models; a card picks one with `backend.model`. A column may be a dotted path into nested objects
  ("usage.prompt_tokens"), checked whole: a path that leads nowhere on a row is an error naming the
  path, the missing step, the file and the line. `write_recording` turns a table in memory (a pandas
  DataFrame, a `datasets.Dataset`, a list of dicts) into such a file.
- **wide**, one row per question with a `<model>_response` and a `<model>` (grade) column per model:
  RouteLLM's `gsm8k_responses.csv` (shipped as `orchlib:data/routellm/gsm8k_responses.csv`).

Questions are keyed after collapsing whitespace (`normalise`). Every value is checked as it is read:
a bad one raises RecordingError naming the file, line and column (or, with `on_error="skip"`, the row
is left out and listed).

Every file is read once per process and kept (no size limit, so many recordings are never re-read;
`clear_recordings()` frees them); a changed file (size or modification time) is read again.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import threading
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchlib.atomic import write_text_atomic

__all__ = ["ReplaySettings", "Recorded", "Recording", "RecordingError", "read_recording", "load_recording",
           "loaded_recording", "recording_identity", "write_recording", "clear_recordings", "parse_grade",
           "scaled_grade", "normalise", "MAX_TOKENS", "MAX_SECONDS", "MAX_USD"]

# Columns of the rows layout that are optional: used where the file has them.
_OPTIONAL = {"grade_column": "grade", "tokens_in_column": "input_tokens", "tokens_out_column": "output_tokens",
             "tokens_reasoning_column": "reasoning_tokens", "tokens_cached_column": "cached_tokens",
             "latency_column": "latency_s", "cost_column": "cost_usd"}


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
    cost_column: str = Field("cost_usd", description="rows: what the call was billed, in USD (a discounted or "
                                                     "negotiated bill); optional")
    billing: Literal["recorded", "reprice"] = Field(
        "recorded", description="'recorded': a call with a recorded cost is billed that cost; 'reprice': every "
                                "call is priced from its tokens by the card (what it would cost at the card's prices)")
    grade_scale: tuple[float, float] | None = Field(
        None, description="grades recorded as scores on [low, high] (a metric such as METEOR on [-1, 1], or 0..10 "
                          "marks), read as (grade - low) / (high - low); a score outside the scale is an error; "
                          "null: 1/0, true/false or a score in [0, 1]")
    on_error: Literal["raise", "skip"] = Field(
        "raise", description="'raise': the first bad row stops the read with its file:line; 'skip': bad rows are "
                             "left out and each is listed with its file:line in `Recording.skipped`")
    duplicates: Literal["error", "first", "last"] = Field(
        "error", description="a question recorded twice for one model with different values: an error naming "
                             "both lines, or the first or last row wins (identical repeats are always fine)")

    @field_validator("grade_scale")
    @classmethod
    def _scale(cls, value: tuple[float, float] | None) -> tuple[float, float] | None:
        if value is not None and not (math.isfinite(value[0]) and math.isfinite(value[1]) and value[0] < value[1]):
            raise ValueError(f"grade_scale must be [low, high] with low < high, finite; got {list(value)}")
        return value


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
    cost_usd: float | None = None        # what the call was billed, as recorded


@dataclasses.dataclass
class Recording:
    """A recording read once: model → normalised question → Recorded, models in order of first appearance.
    `skipped`: with `on_error="skip"`, one `"{file}:{line}: {column}: {problem}"` per row left out."""

    path: Path
    layout: str
    by_model: dict[str, dict[str, Recorded]]
    skipped: list[str] = dataclasses.field(default_factory=list)

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
# Bounds on what one recorded call can be: past them a value is a unit or column mix-up, not a call.
MAX_TOKENS = 1_000_000_000
MAX_SECONDS = 1_000_000.0
MAX_USD = 1_000_000.0


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
            raise ValueError(f"not a grade: {value!r} (use 1/0, true/false, or a score in [0, 1]; a score on "
                             "another scale needs grade_scale)") from None
    if isinstance(value, (int, float)) and math.isfinite(value) and 0.0 <= value <= 1.0:
        return float(value)
    raise ValueError(f"not a grade: {value!r} (use 1/0, true/false, or a score in [0, 1]; a score on another "
                     "scale needs grade_scale)")


def scaled_grade(scale: tuple[float, float]):
    """A grade parser for scores recorded on [low, high]: (score - low) / (high - low); empty reads None."""
    low, high = scale

    def parse(value: Any) -> float | None:
        if _missing(value):
            return None
        number = _number(value)
        if number is None or not low <= number <= high:
            raise ValueError(f"not a grade on the scale [{low:g}, {high:g}]: {value!r}")
        return (number - low) / (high - low)

    return parse


# The spellings recordings use most, read once here (parse_grade gives the same for each).
_COMMON_GRADES: dict[Any, float] = {**{v: 1.0 for v in ("1", "1.0", "true", "True", "TRUE", "yes", "correct")},
                                    **{v: 0.0 for v in ("0", "0.0", "false", "False", "FALSE", "no", "incorrect")},
                                    1: 1.0, 0: 0.0}


def _missing(value: Any) -> bool:
    """An empty cell: None or blank text. (NaN is not: a count, time or cost of NaN is an error.)"""
    return value is None or (isinstance(value, str) and not value.strip())


def _number(value: Any) -> float | None:
    """A finite number from a number or its text; None when it is neither."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value) if isinstance(value, (str, int, float)) else None
    except (ValueError, OverflowError):
        return None
    return number if number is not None and math.isfinite(number) else None


def _count(value: Any) -> int | None:
    if type(value) is int and 0 <= value <= MAX_TOKENS:  # the usual case, as the checks below would find it
        return value
    if _missing(value):
        return None
    number = _number(value)
    if number is None or number < 0 or number != int(number) or number > MAX_TOKENS:
        raise ValueError(f"not a token count (a whole number from 0 to {MAX_TOKENS:,}): {value!r}")
    return int(number)


def _bounded(value: Any, high: float, what: str) -> float | None:
    """A recorded amount from 0 to `high` (None where the row left it out); anything else is a ValueError."""
    if _missing(value):
        return None
    number = _number(value)
    if number is None or not 0 <= number <= high:
        raise ValueError(f"not {what} (a number from 0 to {high:g}): {value!r}")
    return number


def _seconds(value: Any) -> float | None:
    if type(value) is float and 0.0 <= value <= MAX_SECONDS:  # the usual case, as the checks below would find it
        return value
    return _bounded(value, MAX_SECONDS, "a latency in seconds")


def _usd(value: Any) -> float | None:
    return _bounded(value, MAX_USD, "a cost in USD")


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


def _model_name(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
        raise ValueError("no model named" if _missing(value) else
                         f"not a model name: {value!r} (a model is named by text)")
    return str(value)


# ---------------------------------------------------------------------------------------------- reading
class _Skip:
    """Where bad rows go: raised at once (`on_error="raise"`) or listed and left out ("skip")."""

    def __init__(self, skip: bool):
        self.skip, self.lines = skip, []

    def __call__(self, error: RecordingError) -> None:
        if not self.skip:
            raise error
        self.lines.append(str(error))


def _rows(path: Path, bad: _Skip) -> tuple[list[str], list[tuple[int, Mapping[str, Any]]]]:
    """(columns, (line, row) pairs) of a JSONL, CSV or Parquet file; line = 1-based line or row number."""
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        rows = list(_jsonl(path, bad))
        columns = list(dict.fromkeys(k for _, r in rows for k in r))
        return columns, rows
    if suffix in (".csv", ".tsv"):
        return _csv_rows(path, "\t" if suffix == ".tsv" else ",", bad)
    if suffix == ".parquet":
        return _parquet_rows(path)
    raise RecordingError(f"{path}: unknown recording format {suffix!r} (use .jsonl, .csv, .tsv or .parquet)")


_CSV_LIMIT = threading.Lock()  # csv.field_size_limit is one setting for the whole process


def _csv_rows(path: Path, delimiter: str, bad: _Skip) -> tuple[list[str], list[tuple[int, Mapping[str, Any]]]]:
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:  # the line is counted on the bytes: a text reader reads ahead
        line = data[:e.start].count(b"\n") + 1
        raise RecordingError(f"{path}:{line}: not UTF-8 (byte 0x{data[e.start]:02x})") from None
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    rows: list[tuple[int, Mapping[str, Any]]] = []
    # csv refuses a field over 128 KiB by default; a recorded answer may be longer, and no field can be
    # longer than the file, so the limit is raised to the file's size for this read and then restored.
    with _CSV_LIMIT:
        before = csv.field_size_limit(max(csv.field_size_limit(), len(text) + 1))
        try:
            header = next(reader, None)
            if header is None:
                return [], []
            twice = sorted({c for c in header if header.count(c) > 1})
            if twice:
                raise RecordingError(f"{path}:1: header: column(s) {twice} appear more than once (which is meant "
                                     "is not known)")
            while True:
                start = reader.line_num + 1
                try:
                    cells = next(reader)
                except StopIteration:
                    break
                except csv.Error as e:  # a quote never closed, or a stray one
                    raise RecordingError(f"{path}:{start}: not CSV: {e}") from None
                if not cells:
                    continue  # a blank line
                if len(cells) != len(header):
                    bad(RecordingError(f"{path}:{reader.line_num}: (row): {len(cells)} fields, the header names "
                                       f"{len(header)}"))
                    continue
                rows.append((reader.line_num, dict(zip(header, cells))))  # line_num: where the row ends
        finally:
            csv.field_size_limit(before)
    return header, rows


def _parquet_rows(path: Path) -> tuple[list[str], list[tuple[int, Mapping[str, Any]]]]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise RecordingError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow)") from None
    try:
        table = pq.read_table(path)
        rows = table.to_pylist()
    except (pa.ArrowException, OSError, ValueError) as e:  # a truncated file, a bad footer, an unsupported type
        # Parquet has no lines: 0 stands for the file as a whole
        raise RecordingError(f"{path}:0: not a readable Parquet file ({type(e).__name__}: {str(e)[:200]})") from None
    return list(table.column_names), list(enumerate(rows, 1))


def _jsonl(path: Path, bad: _Skip) -> Iterator[tuple[int, dict[str, Any]]]:
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as e:
                bad(RecordingError(f"{path}:{lineno}: not UTF-8 (byte 0x{raw[e.start]:02x})"))
                continue
            if not line.strip():
                continue
            try:  # json.loads, not safejson: only the scalar fields are read, and each is checked
                row = json.loads(line)
            except json.JSONDecodeError as e:
                bad(RecordingError(f"{path}:{lineno}: not JSON: {e.msg} (column {e.colno})"))
                continue
            except RecursionError:
                bad(RecordingError(f"{path}:{lineno}: not readable: JSON nested too deeply"))
                continue
            except ValueError as e:  # an integer too long to convert
                bad(RecordingError(f"{path}:{lineno}: {e}"))
                continue
            if not isinstance(row, dict):
                bad(RecordingError(f"{path}:{lineno}: a row must be a JSON object, got {type(row).__name__}"))
                continue
            yield lineno, row


def _layout(s: ReplaySettings, columns: list[str]) -> str:
    if s.layout != "auto":
        return s.layout
    return "rows" if s.model_column in columns else "wide"


def read_recording(path: str | os.PathLike, settings: ReplaySettings | None = None, **columns: Any) -> Recording:
    """Parse a recording file (no cache; `load_recording` caches). `settings` or keyword columns as in
    ReplaySettings (`model` is not needed: every model of the file is read). Raises RecordingError naming
    the file, line and column of the first bad value (or, with `on_error="skip"`, lists every bad row in
    `Recording.skipped` and reads the rest)."""
    path = Path(path)
    s = settings or ReplaySettings(path=str(path), model=columns.pop("model", ""), **columns)
    bad = _Skip(s.on_error == "skip")
    names, rows = _rows(path, bad)
    layout = _layout(s, names)
    read = _read_rows if layout == "rows" else _read_wide
    return Recording(path, layout, read(path, s, names, rows, bad), bad.lines)


def _present(column: str, names: list[str], rows: list[tuple[int, Mapping[str, Any]]]) -> bool:
    """A column of the file, or a dotted path ("usage.prompt_tokens") that leads to a value on some row:
    every step is checked, not only the first (a typo in a later step would otherwise read None on
    every row, and the grades, costs and tokens it names would be silently estimated)."""
    if column in names:
        return True
    if "." not in column or column.split(".", 1)[0] not in names:
        return False
    return any(_walk(row, column)[1] is None for _, row in rows)


def _walk(row: Mapping[str, Any], column: str) -> tuple[Any, int | None]:
    """(value, None) where the dotted path leads (a null on the way reads None); (the value reached,
    the index of the first step it lacks) where it stops."""
    value: Any = row
    for i, step in enumerate(column.split(".")):
        if value is None:
            return None, None
        if not isinstance(value, Mapping) or step not in value:
            return value, i
        value = value[step]
    return value, None


def _get(row: Mapping[str, Any], column: str, path: Path, line: int) -> Any:
    """The row's value of a column, or of a dotted path into nested objects (a column named with the
    dots as written wins). A row without the column, or whose path meets a null or an object without
    the next step, reads None (not recorded on that row, as a column a JSONL row leaves out); a path
    that meets a value other than an object is an error naming the step."""
    if column in row or "." not in column:
        return row.get(column)
    found, i = _walk(row, column)
    if i is None or isinstance(found, Mapping):
        return found if i is None else None
    steps = column.split(".")
    raise RecordingError(f"{path}:{line}: {column}: the path stops at step {steps[i]!r}: {'.'.join(steps[:i])!r} "
                         f"holds {type(found).__name__}, not an object")


def _need(path: Path, names: list[str], wanted: Iterable[str], rows: list[tuple[int, Mapping[str, Any]]]) -> None:
    missing = [c for c in wanted if not _present(c, names, rows)]
    for column in missing:  # a dotted path whose first step is a column: say where it breaks, on which row
        steps = column.split(".")
        if len(steps) > 1 and steps[0] in names:
            line, row = next((line, row) for line, row in rows if steps[0] in row)
            found, i = _walk(row, column)
            held = sorted(map(str, found))[:12] if isinstance(found, Mapping) else type(found).__name__
            raise RecordingError(f"{path}:{line}: {column}: no row has this path: step {steps[i]!r} is missing "
                                 f"under {'.'.join(steps[:i])!r} (which holds {held}; shown: the first row "
                                 f"with {steps[0]!r})")
    if missing:
        raise RecordingError(f"{path}: no column(s) {missing}; columns are {names}")


def _parse(path: Path, line: int, column: str, fn, value: Any) -> Any:
    try:
        return fn(value)
    except ValueError as e:
        raise RecordingError(f"{path}:{line}: {column}: {e}") from None


def _conflict(path: Path, s: ReplaySettings, answers: dict[str, Recorded], lines: dict[str, int], key: str,
              rec: Recorded, line: int, model: str) -> RecordingError | None:
    """The error of filing `rec` under `key` where the same question holds other values for the model,
    unless `duplicates` says which wins."""
    known = answers.get(key)
    if known is None or known == rec or s.duplicates != "error":
        return None
    return RecordingError(f"{path}:{line}: {s.prompt_column}: this question is recorded for {model!r} at line "
                          f"{lines[key]} too, with other values (say which wins: duplicates='first' or 'last')")


def _keep(s: ReplaySettings, answers: dict[str, Recorded], lines: dict[str, int], key: str, rec: Recorded,
          line: int) -> None:
    if key not in answers or s.duplicates == "last":
        answers[key], lines[key] = rec, line


def _read_rows(path: Path, s: ReplaySettings, names: list[str], rows, bad: _Skip) -> dict[str, dict[str, Recorded]]:
    response = s.response_column or "response"
    explicit = {f: getattr(s, f) for f in _OPTIONAL if f in s.model_fields_set and getattr(s, f) is not None}
    _need(path, names, [s.prompt_column, s.model_column, response, *explicit.values()], rows)
    cols = {f: getattr(s, f) or default for f, default in _OPTIONAL.items()}
    cols = {f: c for f, c in cols.items() if _present(c, names, rows)}  # optional columns the file lacks: unrecorded
    parsers = {"grade_column": parse_grade if s.grade_scale is None else scaled_grade(s.grade_scale),
               "tokens_in_column": _count, "tokens_out_column": _count, "tokens_reasoning_column": _count,
               "tokens_cached_column": _count, "latency_column": _seconds, "cost_column": _usd}
    out: dict[str, dict[str, Recorded]] = {}
    where: dict[str, dict[str, int]] = {}  # model → key → the line it was read from
    keys: dict[str, str] = {}  # question → its normalised key: each question is asked of many models
    for line, row in rows:
        try:
            question = _get(row, s.prompt_column, path, line)
            if not isinstance(question, (str, int)) or isinstance(question, bool) or not str(question).strip():
                raise RecordingError(f"{path}:{line}: {s.prompt_column}: no question (empty or not text)")
            model = _parse(path, line, s.model_column, _model_name, _get(row, s.model_column, path, line))
            values = {f: _parse(path, line, c, parsers[f], _get(row, c, path, line)) for f, c in cols.items()}
            rec = Recorded(text=_parse(path, line, response, _text, _get(row, response, path, line)),
                           grade=values.get("grade_column"), tokens_in=values.get("tokens_in_column"),
                           tokens_out=values.get("tokens_out_column"),
                           tokens_reasoning=values.get("tokens_reasoning_column"),
                           tokens_cached=values.get("tokens_cached_column"), latency_s=values.get("latency_column"),
                           cost_usd=values.get("cost_column"))
            text = str(question)
            key = keys.get(text)
            if key is None:
                key = keys[text] = normalise(text)
            answers, lines = out.setdefault(model, {}), where.setdefault(model, {})
            error = _conflict(path, s, answers, lines, key, rec, line, model)
            if error is not None:
                raise error
            _keep(s, answers, lines, key, rec, line)
        except RecordingError as e:
            bad(e)
    return out


def _read_wide(path: Path, s: ReplaySettings, names: list[str], rows, bad: _Skip) -> dict[str, dict[str, Recorded]]:
    if s.response_column:  # named explicitly: that column is the card's model
        models = {s.model: (s.response_column, s.grade_column or s.model)}
        _need(path, names, [s.prompt_column, s.response_column] + ([s.grade_column] if s.grade_column else []), rows)
    else:
        models = {c.removesuffix("_response"): (c, c.removesuffix("_response")) for c in names
                  if c.endswith("_response")}
        if s.grade_column:
            models = {m: (r, s.grade_column) for m, (r, _) in models.items()}
        _need(path, names, [s.prompt_column], rows)
    grades = parse_grade if s.grade_scale is None else scaled_grade(s.grade_scale)
    graded = {m for m, (_, grade) in models.items() if _present(grade, names, rows)}  # a grade column is optional
    out: dict[str, dict[str, Recorded]] = {m: {} for m in models}
    where: dict[str, dict[str, int]] = {m: {} for m in models}
    for line, row in rows:
        try:
            question = _get(row, s.prompt_column, path, line)
            if not isinstance(question, str) or not question.strip():
                raise RecordingError(f"{path}:{line}: {s.prompt_column}: no question (empty or not text)")
            key = normalise(question)
            found = {model: Recorded(
                text=_parse(path, line, response, _text, _get(row, response, path, line)),
                grade=_parse(path, line, grade, grades, _get(row, grade, path, line)) if model in graded else None)
                for model, (response, grade) in models.items()}
            for model, rec in found.items():  # the whole row is checked before any of it is kept
                error = _conflict(path, s, out[model], where[model], key, rec, line, model)
                if error is not None:
                    raise error
            for model, rec in found.items():
                _keep(s, out[model], where[model], key, rec, line)
        except RecordingError as e:
            bad(e)
    return out


# ---------------------------------------------------------------------------------------------- cache
_CACHE: dict[tuple, Recording] = {}
_LOCK = threading.Lock()  # one reader per file at a time; lookups of a loaded file take no lock


def recording_identity(path: Path, s: ReplaySettings) -> tuple:
    """What the parse depends on besides the file's version: its real path and the column settings. The
    model is part of it only where it changes the parse (wide, with a named response column)."""
    parse = s.model_dump(exclude={"path", "argument", "match", "output_includes_reasoning", "model", "billing"})
    model = s.model if s.response_column and s.layout != "rows" else ""
    return str(path.resolve()), model, tuple(sorted(parse.items()))


def _key(identity: tuple) -> tuple:
    st = os.stat(identity[0])  # a rewritten file (new size or time) is read again
    return identity[0], st.st_mtime_ns, st.st_size, *identity[1:]


def load_recording(path: str | os.PathLike, settings: ReplaySettings, identity: tuple | None = None) -> Recording:
    """The recording at `path`, read once per process and version of the file (thread-safe)."""
    path = Path(path)
    key = _key(identity or recording_identity(path, settings))
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


def loaded_recording(identity: tuple) -> Recording | None:
    """The recording of `identity` if it is loaded and current, else None (no read, no lock)."""
    try:
        return _CACHE.get(_key(identity))
    except OSError:
        return None


# ---------------------------------------------------------------------------------------------- writing
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
