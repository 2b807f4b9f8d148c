"""The LLM judge: a model grades an answer against the reference, as the paper grades its HLE and
FRAMES answers. Any `llm` card (an OpenAI-compatible endpoint or a local transformers model) or an
endpoint given directly can judge; the prompt is a template the user can change.

    judge = Judge(base_url="https://api.openai.com/v1", model="gpt-5-mini", api_key_env="OPENAI_API_KEY",
                  price={"per_m_input": 0.25, "per_m_output": 2.0})
    with use_judge(judge):                      # tasks whose checker is "judge" are graded by it
        report = evaluate(policy, env)
    print(judge.stats)                          # grades, cache hits, errors, USD: apart from the episodes'

- The reply must end in a line `GRADE: CORRECT`, `GRADE: INCORRECT` or `GRADE: <number in [0, 1]>`
  (a custom prompt may ask for partial credit); the last such line counts.
- Grades are cached by (question, answer, reference): the G rollouts of a task that give the same
  answer cost one request. `cache` names a JSON file that keeps them across runs, per judge (model
  and prompt), written atomically by `save_cache()`.
- The judge's cost is its own (`stats`), never added to an episode's: the judge is the experimenter's
  instrument, not a tool the orchestrator chose.
- A failed request (after the llm tool's retries) or an unreadable verdict scores 0, is counted in
  `stats.errors`, listed in `errors`, warned about, and not cached (a later run asks again).

A task uses it with `checker: judge`; the judge is `task.meta["judge"]` (a JudgeConfig as a dict)
when the task names one, else the one installed by `use_judge` / `set_judge`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
import string
import threading
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from orchlib.atomic import write_text_atomic
from orchlib.cards import Price, ToolCard, load_card
from orchlib.tools.base import ToolContext, run_sync
from orchlib.tools.llm import MAX_TOKENS_PER_RESPONSE, LLMTool, http_url

__all__ = ["DEFAULT_JUDGE_PROMPT", "JudgeConfig", "Grade", "JudgeStats", "Judge", "use_judge", "set_judge",
           "judge_checker", "judge_for", "read_verdict", "JudgeCacheError"]

# After the HLE grader's instructions (Phan et al. 2025, arXiv 2501.14249, appendix), which the paper's
# HLE numbers follow; shortened, with a fixed last line that is easy to read back.
DEFAULT_JUDGE_PROMPT = """Judge whether the following response to the question is correct, based on \
the precise and unambiguous reference answer below.

[question]: {question}

[response]: {answer}

[reference answer]: {reference}

Focus only on whether the response's final answer matches the reference answer. Do not solve the \
question again and do not argue for another answer. Allow small differences of format and, for \
numbers, a small margin of rounding; anything else that differs, is ambiguous or is missing makes \
the response incorrect.

Explain in one or two sentences, then end with exactly one line: GRADE: CORRECT or GRADE: INCORRECT"""

_FIELDS = {"question", "answer", "reference"}
_VERDICT = re.compile(r"GRADE\s*:\s*\**\s*(CORRECT|INCORRECT|1(?:\.0*)?|0(?:\.\d*)?)(?![\w.])", re.I)


class JudgeConfig(BaseModel):
    """Which model judges, with what prompt. A card, or `base_url` + `model`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    card: str | None = Field(None, description="an `llm` card (either client); its backend and price are used")
    base_url: str | None = Field(None, description="an OpenAI-compatible endpoint, e.g. https://api.openai.com/v1")
    model: str | None = Field(None, description="model name at the endpoint")
    api_key_env: str | None = Field(None, description="environment variable holding the API key")
    price: Price = Field(default_factory=Price, description="USD per million tokens, from the response's usage")
    temperature: float | None = Field(None, ge=0, description="None: the server's default (some reasoning "
                                                              "models accept no other)")
    max_tokens: int | None = Field(None, gt=0, description="None: the server's default")
    timeout_s: float = Field(60.0, gt=0, description="per request, as for an llm tool")
    max_retries: int = Field(3, ge=0, description="after a 429/5xx or dropped connection")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="more request fields")
    prompt: str = Field(DEFAULT_JUDGE_PROMPT, description="template with {question}, {answer} and {reference}; "
                                                          "the reply must end in a GRADE: line")
    cache: str | None = Field(None, description="JSON file keeping grades across runs (save_cache writes it)")

    @field_validator("prompt")
    @classmethod
    def _template(cls, v: str) -> str:
        try:
            names = {f for _, f, _, _ in string.Formatter().parse(v) if f is not None}
        except ValueError as e:
            raise ValueError(f"not a valid template ({e}); write a literal brace as {{{{ or }}}}") from None
        unknown = names - _FIELDS
        if unknown:
            raise ValueError(f"unknown field(s) {sorted(unknown)}: the template may use {{question}}, {{answer}}, "
                             "{reference}")
        if not {"answer", "reference"} <= names:
            raise ValueError("the template must show {answer} and {reference}")
        return v

    @field_validator("base_url")
    @classmethod
    def _http_only(cls, v: str | None) -> str | None:
        return v if v is None else http_url(v)  # before a run, not after minutes of failed requests

    @model_validator(mode="after")
    def _card_or_endpoint(self) -> JudgeConfig:
        if self.card is not None:
            held = sorted(self.model_fields_set & {"base_url", "model", "api_key_env", "price", "temperature",
                                                   "max_tokens", "timeout_s", "max_retries", "extra_body"})
            if held:
                raise ValueError(f"give either card or {', '.join(held)}, not both (the card holds them)")
        elif not self.base_url or not self.model:
            raise ValueError("a judge needs base_url and model (or a card)")
        return self


@dataclass
class Grade:
    """One verdict. `score` is 0 when `error` is set (and then counted in the judge's stats)."""

    score: float
    reply: str = ""
    cost_usd: float = 0.0
    latency_s: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    cached: bool = False
    error: str | None = None


@dataclass
class JudgeStats:
    """What the judge did and spent, apart from the episodes' own cost."""

    grades: int = 0          # verdicts asked for (cache hits included)
    cache_hits: int = 0
    requests: int = 0        # grades that reached the model
    errors: int = 0          # failed requests and unreadable verdicts (scored 0)
    cost_usd: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    seconds: float = 0.0     # summed request time

    def __str__(self) -> str:
        return (f"{self.grades} grades ({self.cache_hits} from cache, {self.requests} requests), "
                f"{self.errors} errors, ${self.cost_usd:.4g}, {self.tokens_in}+{self.tokens_out} tokens")


def read_verdict(reply: str) -> float | None:
    """The score of the last `GRADE:` line of a reply, or None when there is none."""
    found = _VERDICT.findall(reply or "")
    if not found:
        return None
    last = found[-1].upper()
    return 1.0 if last == "CORRECT" else 0.0 if last == "INCORRECT" else float(last)


class Judge:
    """An LLM grader with a cache. Keyword arguments are JudgeConfig's fields."""

    def __init__(self, config: JudgeConfig | None = None, **fields: Any):
        if config is not None and fields:
            raise TypeError("pass a JudgeConfig or its fields, not both")
        self.config = c = config or JudgeConfig(**fields)
        if c.card is not None:
            card = load_card(c.card)
            if card.kind != "llm":
                raise ValueError(f"{card.source or c.card}: a judge needs an `llm` card, not kind {card.kind!r}")
        else:
            backend = {"client": "openai", "base_url": c.base_url, "model": c.model, "api_key_env": c.api_key_env,
                       "temperature": c.temperature, "max_tokens": c.max_tokens, "timeout_s": c.timeout_s,
                       "max_retries": c.max_retries, "extra_body": c.extra_body}
            card = ToolCard(name="judge", kind="llm", description="Grades an answer against the reference.",
                            parameters={"type": "object", "properties": {"prompt": {"type": "string"}},
                                        "required": ["prompt"]},
                            backend={k: v for k, v in backend.items() if v is not None}, price=c.price)
        self.tool = LLMTool(card)
        self.name = self.tool.settings.model
        self.stats = JudgeStats()
        self.errors: list[dict[str, Any]] = []
        self._cache: dict[tuple[str, str, str], Grade] = {}
        self._asking: dict[tuple[str, str, str], threading.Event] = {}  # grades whose request is in flight
        self._lock = threading.Lock()  # checkers run in threads (orchlib.rollout scores API episodes so)
        self.fingerprint = hashlib.sha256(json.dumps(
            [self.tool.settings.base_url, self.name, c.prompt]).encode()).hexdigest()[:16]
        if c.cache and Path(c.cache).is_file():
            self._load(Path(c.cache))

    def __repr__(self) -> str:
        return f"Judge({self.name!r}, {len(self._cache)} cached)"

    def prompt_for(self, question: str, answer: str, reference: str) -> str:
        return self.config.prompt.format(question=question, answer=answer, reference=reference)

    async def agrade(self, question: str, answer: str, reference: str) -> Grade:
        key = (question, answer, reference)
        with self._lock:
            self.stats.grades += 1
            hit = self._hit(key)
            if hit is not None:
                return hit
            asking = self._asking.get(key)
            if asking is None:
                self._asking[key] = threading.Event()
        if asking is not None:  # the same triple is being graded now (the G rollouts of one task): wait
            await asyncio.to_thread(asking.wait)
            with self._lock:
                hit = self._hit(key)
            if hit is not None:
                return hit
            return await self._ask(key)  # that request failed: ask again, as a later call would
        try:
            return await self._ask(key)
        finally:
            with self._lock:
                self._asking.pop(key).set()

    def _hit(self, key: tuple[str, str, str]) -> Grade | None:
        hit = self._cache.get(key)
        if hit is None:
            return None
        self.stats.cache_hits += 1
        return Grade(**{**asdict(hit), "cached": True})

    async def _ask(self, key: tuple[str, str, str]) -> Grade:
        question, answer, reference = key
        text = self.prompt_for(question, answer, reference)
        tool = self.tool
        args = {} if tool.card.input == "task" else {tool.settings.argument: text}
        obs = await tool(args, ToolContext(task_id="judge", prompt=text))
        score = None if obs.error else read_verdict(obs.content)
        error = obs.error or (None if score is not None else
                              f"no 'GRADE: CORRECT/INCORRECT' line in the reply: {obs.content[-200:]!r}")
        grade = Grade(score if score is not None else 0.0, obs.content if not obs.error else "", obs.cost_usd,
                      obs.latency_s, obs.tokens_in, obs.tokens_out, False, error)
        with self._lock:
            s = self.stats
            s.requests += 1
            s.cost_usd += grade.cost_usd
            s.tokens_in += grade.tokens_in
            s.tokens_out += grade.tokens_out
            s.seconds += grade.latency_s
            if error is None:
                self._cache[key] = grade
            else:
                s.errors += 1
                self.errors.append({"question": question, "answer": answer, "reference": reference, "error": error})
        if error is not None:
            warnings.warn(f"judge {self.name}: {error} (scored 0; counted in judge.stats.errors)", stacklevel=2)
        return grade

    def grade(self, question: str, answer: str, reference: str) -> Grade:
        """`agrade` from sync code (inside a running loop too)."""
        return run_sync(self.agrade(question, answer, reference))

    def grade_many(self, items: Sequence[tuple[str, str, str]], max_in_flight: int = 16) -> list[Grade]:
        """Grade (question, answer, reference) triples concurrently, at most `max_in_flight` at once."""
        async def all_() -> list[Grade]:
            gate = asyncio.Semaphore(max_in_flight)

            async def one(item: tuple[str, str, str]) -> Grade:
                async with gate:
                    return await self.agrade(*item)

            return list(await asyncio.gather(*(one(i) for i in items)))

        return run_sync(all_())

    def __call__(self, answer: str | None, task: Any, env: Any = None) -> float:
        """The checker signature (answer, task, state) -> score."""
        if answer is None:
            return 0.0
        if task.answer is None:
            raise ValueError(f"task {task.id!r}: checker 'judge' needs a reference answer")
        return self.grade(task.prompt, answer, task.answer).score

    # ------------------------------------------------------------------------------ the cache file
    def save_cache(self, path: str | Path | None = None) -> Path:
        """Write this judge's grades into the cache file (other judges' entries are kept)."""
        target = Path(path or self.config.cache or "")
        if not str(target):
            raise ValueError("no cache file: pass a path or set JudgeConfig.cache")
        data = _read_cache(target) if target.is_file() else {}
        with self._lock:
            data[self.fingerprint] = {"model": self.name, "grades": [
                [q, a, r, g.score, g.reply, g.cost_usd, g.tokens_in, g.tokens_out]
                for (q, a, r), g in self._cache.items()]}
        return write_text_atomic(target, json.dumps(data, ensure_ascii=False) + "\n")

    def _load(self, path: Path) -> None:
        where = f"{path}: {self.fingerprint}"
        entry = _read_cache(path).get(self.fingerprint)
        if entry is None:
            return
        if not isinstance(entry, dict) or not isinstance(entry.get("grades", []), list):
            raise JudgeCacheError(f"{where}: expected an object whose grades are a list")
        for i, row in enumerate(entry.get("grades", [])):
            self._cache.update([_cached_grade(row, f"{where}.grades[{i}]")])


class JudgeCacheError(ValueError):
    """A judge cache file that cannot be read back; the message names the file and the field."""


# A grade is one request: its cost is cents. A cached cost past this was not paid, it was written.
_MAX_GRADE_USD = 10_000.0
_ROW = ("question", "answer", "reference", "score", "reply", "cost", "tokens_in", "tokens_out")


def _cached_grade(row: Any, where: str) -> tuple[tuple[str, str, str], Grade]:
    """One row of the cache file, every field checked: a score in [0, 1], a finite cost ≥ 0 and
    bounded, whole token counts ≥ 0 and bounded."""
    if not isinstance(row, list) or len(row) != len(_ROW):
        raise JudgeCacheError(f"{where}: expected [{', '.join(_ROW)}]")
    q, a, r, score, reply, cost, t_in, t_out = row
    for name, value in zip(_ROW, row):
        if name in ("question", "answer", "reference", "reply") and not isinstance(value, str):
            raise JudgeCacheError(f"{where}: {name}: expected text, got {type(value).__name__}")
    for name, value, top in (("score", score, 1.0), ("cost", cost, _MAX_GRADE_USD)):
        # `not 0 <= value <= top` is True for NaN too
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= top:
            raise JudgeCacheError(f"{where}: {name}: expected a number from 0 to {top:g}, got {str(value)[:40]}")
    for name, value in (("tokens_in", t_in), ("tokens_out", t_out)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS_PER_RESPONSE:
            raise JudgeCacheError(f"{where}: {name}: expected a whole number from 0 to {MAX_TOKENS_PER_RESPONSE:,}, "
                                  f"got {str(value)[:40]}")
    return (q, a, r), Grade(float(score), reply, float(cost), 0.0, t_in, t_out)


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise JudgeCacheError(f"{path}:{e.lineno}: not a judge cache: {e.msg}") from None
    except UnicodeDecodeError as e:
        raise JudgeCacheError(f"{path}: not a judge cache: not UTF-8 text (byte {e.start})") from None
    except RecursionError:
        raise JudgeCacheError(f"{path}: not a judge cache: nested too deeply") from None
    except OSError as e:
        raise JudgeCacheError(f"{path}: cannot read the judge cache ({e.strerror or e})") from None
    if not isinstance(data, dict):
        raise JudgeCacheError(f"{path}:1: not a judge cache: expected an object of judges")
    return data


# ---------------------------------------------------------------------------------- the `judge` checker
_DEFAULT: list[Judge] = []             # the installed judge (a stack: use_judge nests)
_FROM_META: dict[str, Judge] = {}      # judges named by tasks, one per config, so they share a cache
_REGISTRY_LOCK = threading.Lock()


def set_judge(judge: Judge | None) -> None:
    """Install the judge of checker "judge" for this process (None removes it)."""
    with _REGISTRY_LOCK:
        _DEFAULT[:] = [judge] if judge is not None else []


@contextlib.contextmanager
def use_judge(judge: Judge) -> Iterator[Judge]:
    """Install `judge` for the `with` block. Process-wide, not per thread: rollouts score in threads."""
    with _REGISTRY_LOCK:
        _DEFAULT.append(judge)
    try:
        yield judge
    finally:
        with _REGISTRY_LOCK:
            _DEFAULT.remove(judge)


def judge_for(task: Any) -> Judge:
    """The judge that grades `task`: the one its meta names, else the installed one."""
    spec = (task.meta or {}).get("judge")
    if spec is not None:
        config = JudgeConfig.model_validate(spec)
        key = config.model_dump_json()
        with _REGISTRY_LOCK:
            if key not in _FROM_META:
                _FROM_META[key] = Judge(config)
            return _FROM_META[key]
    with _REGISTRY_LOCK:
        if _DEFAULT:
            return _DEFAULT[-1]
    raise ValueError(f"task {task.id!r} has checker 'judge' but no judge is set: name one in its meta "
                     "(\"judge\": {\"base_url\": ..., \"model\": ...}) or install one with orchlib.judge.use_judge")


def judge_checker(answer: str | None, task: Any, env: Any = None) -> float:
    """Checker "judge": the task's judge grades `answer` against `task.answer`."""
    if answer is None:
        return 0.0
    return judge_for(task)(answer, task, env)
