"""The default suite, "orchestra-mini": five categories where the best tool differs, so routing pays.

| category     | best tool                      | the others                                               |
|--------------|--------------------------------|----------------------------------------------------------|
| `arithmetic` | calculator / python: exact, free | specialist (cheap, 95 %), generalist (dear, 97 %)       |
| `lookup`     | search over the shipped corpus | specialist (15 %), generalist (dear, 95 %)               |
| `gsm8k`      | mixtral (cheap) vs gpt4 (dear) | real recorded answers (RouteLLM), not simulated          |
| `shop`       | the shop_* functions           | a database task: only its own function tools change it   |
| `hard`       | generalist (dear, 85 %)        | specialist (cheap, 10 %)                                 |

(Accuracies of the simulated tools are declared in their cards, toolcards/*.yaml.) Every task carries
a preference P from the named profiles, assigned round-robin within each category so every category
sees every profile; "local-only" puts −1 on the paid model tools the task offers. Train and test splits
are disjoint (distinct prompts); the same seed always gives the same suite.

GSM8K questions of both splits come from the GSM8K *test* set, because only those have recorded
Mixtral / GPT-4 answers; `hard` draws on GSM8K *training* problems with six or more worked steps.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from fractions import Fraction
from importlib import resources
from pathlib import Path
from typing import Callable, Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from orchlib.cards import ToolCard, load_cards
from orchlib.configurations import ConfigurationSpace
from orchlib.env import Environment, RewardFunction
from orchlib.envs import shop
from orchlib.shipped import shipped_dir
from orchlib.tasks import PROFILES, Golden, Preference, Task, save_tasks
from orchlib.trajectory import ToolCall

__all__ = ["CATEGORIES", "CATEGORY_TOOLS", "PAID_KINDS", "Suite", "make_suite", "environment", "shop_cards",
           "paid_api_tools", "preference_for", "default_toolcards", "arithmetic_tasks", "lookup_tasks", "gsm8k_tasks",
           "hard_tasks"]

CATEGORIES: tuple[str, ...] = ("arithmetic", "lookup", "gsm8k", "shop", "hard")

# Tools each category offers. Few per task: their schemas sit in the prompt of a 4096-token policy.
# gsm8k offers only the two recorded models: the simulated specialist (85 % on gsm8k, cheap) would
# make the real answers pointless, and this is the strong/weak pair RouteLLM's APGR is defined on.
CATEGORY_TOOLS: dict[str, list[str]] = {
    "arithmetic": ["calculator", "python", "specialist", "generalist"],
    "lookup": ["search", "specialist", "generalist"],
    "gsm8k": ["mixtral", "gpt4"],
    "shop": sorted(shop.SHOP_TOOLS),
    "hard": ["specialist", "generalist"],
}

# Card kinds that stand for a hosted model API ("local-only" users do not want them).
PAID_KINDS = ("llm", "replay", "simulated")


def _id(category: str, prompt: str) -> str:
    # From the prompt, so a question keeps its id (and its simulated tools' draws) across splits and sizes.
    return f"{category}-{hashlib.sha1(prompt.encode('utf-8')).hexdigest()[:10]}"


def _data(path: str) -> str:
    return resources.files("orchlib").joinpath("data", path).read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------- categories
def arithmetic_tasks(rng: random.Random, n: int) -> list[Task]:
    """`n` distinct expressions: a op b, a / b with an exact quotient, and (a op b) op c."""
    seen: dict[str, Task] = {}
    while len(seen) < n:
        form = rng.choice(["mul", "add", "sub", "div", "paren"])
        if form == "mul":
            expr = f"{rng.randint(12, 999)} * {rng.randint(3, 99)}"
        elif form == "add":
            expr = f"{rng.randint(100, 9999)} + {rng.randint(100, 9999)}"
        elif form == "sub":
            expr = f"{rng.randint(1000, 9999)} - {rng.randint(100, 999)}"
        elif form == "div":
            b = rng.randint(3, 49)
            expr = f"{b * rng.randint(12, 400)} / {b}"
        else:
            expr = f"({rng.randint(10, 99)} + {rng.randint(10, 99)}) * {rng.randint(3, 29)}"
        value = _exact_value(expr)
        prompt = f"What is {expr}?"
        seen.setdefault(prompt, Task(
            id=_id("arithmetic", prompt), prompt=prompt, category="arithmetic", checker="numeric",
            answer=str(value), tools=CATEGORY_TOOLS["arithmetic"],
            golden=Golden(calls=[ToolCall(name="calculator", arguments={"expression": expr})], answer=str(value),
                          alternatives=[[ToolCall(name="python", arguments={"code": f"print({expr})"})]])))
    return list(seen.values())


def _exact_value(expr: str) -> int:
    """The integer value of a generated expression, computed with fractions (not with the tool under test)."""
    a, op, b = expr.replace("(", "").replace(")", "").split()[:3]
    x, y = Fraction(int(a)), Fraction(int(b))
    value = {"+": x + y, "-": x - y, "*": x * y, "/": x / y}[op]
    if expr.startswith("("):
        value *= int(expr.split()[-1])
    if value.denominator != 1:
        raise AssertionError(f"{expr} is not an integer")  # the generator only makes exact quotients
    return int(value)


@functools.lru_cache(maxsize=1)
def _corpus_questions() -> tuple[tuple[str, str, str, str], ...]:
    """(question, answer, document id, document title) of every `qa` entry of the shipped corpus."""
    out = []
    for line in _data("search_corpus/facts.jsonl").splitlines():
        if line.strip():
            doc = json.loads(line)
            out += [(qa["question"], qa["answer"], doc["id"], doc["title"]) for qa in doc.get("qa", [])]
    return tuple(out)


def lookup_tasks(rng: random.Random, n: int, retrieve: Callable[[str], list[str]] | None = None) -> list[Task]:
    """Questions the shipped search corpus answers. The golden query is the question itself, or the
    document's title when the question does not bring up its document; with `retrieve` (query → ids of
    the documents the search tool returns) a question neither brings up is left out. Numbers are checked
    numerically, names as whole words (`mentions`)."""
    qas = list(_corpus_questions())
    rng.shuffle(qas)
    out = []
    for question, answer, doc_id, title in qas:
        if len(out) == n:
            break
        query = question
        if retrieve is not None and doc_id not in retrieve(question):
            if doc_id not in retrieve(title):
                continue
            query = title
        out.append(Task(id=_id("lookup", question), prompt=question, category="lookup", answer=answer,
                        checker="numeric" if _is_number(answer) else "mentions", tools=CATEGORY_TOOLS["lookup"],
                        golden=Golden(calls=[ToolCall(name="search", arguments={"query": query})], answer=answer),
                        meta={"doc": doc_id}))
    return out


def _retriever(cards: list[ToolCard]) -> Callable[[str], list[str]]:
    """query → ids of the documents the suite's `search` tool returns for it."""
    from orchlib.tools import build_tool

    tool = build_tool(next(c for c in cards if c.name == "search"))
    return lambda q: [doc["id"] for doc, _ in tool.corpus.search(q, tool.settings.top_k)]


def _is_number(text: str) -> bool:
    try:
        float(text.replace(",", ""))
    except ValueError:
        return False
    return True


def _gsm8k_answer(worked: str) -> str:
    return worked.rsplit("####", 1)[1].strip().replace(",", "")


@functools.lru_cache(maxsize=None)
def _gsm8k_rows(name: str) -> tuple[tuple[str, str], ...]:
    rows = [json.loads(line) for line in _data(f"gsm8k/{name}.jsonl").splitlines() if line.strip()]
    return tuple((r["question"], _gsm8k_answer(r["answer"])) for r in rows)


def _question_tasks(category: str, rows: Sequence[tuple[str, str]], rng: random.Random, n: int,
                    golden_tools: Sequence[str]) -> list[Task]:
    """`n` of `rows` (question, answer) drawn by `rng`; each of `golden_tools` is a golden alternative."""
    rows = list(rows)
    rng.shuffle(rows)
    calls = [[ToolCall(name=t)] for t in golden_tools]
    return [Task(id=_id(category, q), prompt=q, category=category, checker="numeric", answer=a,
                 tools=CATEGORY_TOOLS[category], golden=Golden(calls=calls[0], answer=a, alternatives=calls[1:]))
            for q, a in rows[:n]]


def gsm8k_tasks(rng: random.Random, n: int) -> list[Task]:
    """GSM8K test questions, the prompt being the exact question text so the replay tools find it.
    Golden: either recorded model (alternatives), so a warm start does not teach the choice."""
    return _question_tasks("gsm8k", _gsm8k_rows("test"), rng, n, ["mixtral", "gpt4"])


def hard_tasks(rng: random.Random, n: int) -> list[Task]:
    """Long multi-step problems (GSM8K training problems with six or more worked steps) that only the
    dear simulated generalist answers reliably. Golden: generalist or specialist (alternatives)."""
    return _question_tasks("hard", _gsm8k_rows("train_hard"), rng, n, ["generalist", "specialist"])


def _shop(seed: int) -> Callable[[random.Random, int], list[Task]]:
    return lambda rng, n: shop.shop_tasks(seed, rng)[:n]


# ---------------------------------------------------------------------------------------------- cards, P
def default_toolcards() -> Path:
    """The shipped toolcards/ folder (package data: there in a wheel as in a checkout)."""
    return shipped_dir("toolcards")


def shop_cards() -> list[ToolCard]:
    """The shop's function cards, derived from the typed, documented functions (never written twice)."""
    return [ToolCard.from_function(fn, tags=["shop", "local", "free"]) for _, fn in sorted(shop.SHOP_TOOLS.items())]


def paid_api_tools(cards: Iterable[ToolCard]) -> list[str]:
    """Names of the tools that stand for a priced hosted model."""
    return sorted(c.name for c in cards if c.kind in PAID_KINDS and
                  (c.price.per_call or c.price.per_m_input or c.price.per_m_output or c.price.per_second))


def preference_for(profile: str, tools: Iterable[str], cards: Iterable[ToolCard]) -> Preference:
    """The named profile for a task offering `tools`; "local-only" weighs each paid model tool −1."""
    if profile not in PROFILES:
        raise KeyError(f"unknown preference profile {profile!r}; known: {sorted(PROFILES)}")
    base = PROFILES[profile]
    if profile != "local-only":
        return base
    paid = sorted(set(paid_api_tools(cards)) & set(tools))
    return base.model_copy(update={"tools": {**base.tools, **{t: -1.0 for t in paid}}})


# ---------------------------------------------------------------------------------------------- suite
class Suite(BaseModel):
    """Tasks of a suite, split, and the cards of every tool they name."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    seed: int
    train: list[Task]
    test: list[Task]
    cards: list[ToolCard] = Field(description="shipped cards plus the shop's function cards")
    configurations: ConfigurationSpace | None = Field(None, description="the train tasks' tool configurations; "
                                                                        "None: the tools as they are")
    test_configurations: ConfigurationSpace | None = Field(None, description="the test tasks' (held-out parts); "
                                                                             "None: `configurations`")

    def toolbox(self):
        """A Toolbox of the suite's cards."""
        from orchlib.tools import Toolbox

        return Toolbox.from_cards(self.cards)

    def environment(self, reward: RewardFunction | str | Path | None = None) -> Environment:
        """The suite as an Environment: its splits, a toolbox of its cards, `reward` (a reward file's
        path or any reward function; None: rollouts and evaluations without one) and its configuration
        spaces, if any."""
        return Environment(name=self.name, train=self.train, test=self.test, tools=self.toolbox(), reward=reward,
                           configurations=self.configurations, test_configurations=self.test_configurations)

    def save(self, folder: str | Path) -> Path:
        """train.jsonl and test.jsonl in `folder` (the cards stay where they are shipped)."""
        folder = Path(folder)
        save_tasks(self.train, folder / "train.jsonl")
        save_tasks(self.test, folder / "test.jsonl")
        return folder


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (i < total % parts) for i in range(parts)]


def make_suite(seed: int = 0, n_train: int = 250, n_test: int = 100, categories: Sequence[str] = CATEGORIES,
               profiles: Sequence[str] = tuple(PROFILES), toolcards: str | Path | None = None) -> Suite:
    """Build "orchestra-mini". Counts are split evenly over `categories`; defaults are laptop-sized
    (a baseline pass over the 100 test tasks takes seconds)."""
    unknown = set(categories) - set(CATEGORIES)
    if unknown or not categories:
        raise ValueError(f"unknown categories {sorted(unknown)}; choose from {CATEGORIES}")
    if not profiles or set(profiles) - set(PROFILES):
        raise ValueError(f"profiles must be a non-empty subset of {sorted(PROFILES)}")
    cards = load_cards(toolcards or default_toolcards())
    cards += [c for c in shop_cards() if c.name not in {k.name for k in cards}]
    missing = {t for c in categories for t in CATEGORY_TOOLS[c]} - {c.name for c in cards}
    if missing:
        raise ValueError(f"no tool cards for {sorted(missing)} in {toolcards or default_toolcards()}")
    makers: dict[str, Callable[[random.Random, int], list[Task]]] = {
        "arithmetic": arithmetic_tasks, "lookup": lookup_tasks, "gsm8k": gsm8k_tasks, "shop": _shop(seed),
        "hard": hard_tasks}
    if "lookup" in categories:  # golden queries must bring up their document with the suite's own search tool
        makers["lookup"] = functools.partial(lookup_tasks, retrieve=_retriever(cards))
    train: list[Task] = []
    test: list[Task] = []
    for cat, k_train, k_test in zip(categories, _split(n_train, len(categories)), _split(n_test, len(categories))):
        rng = random.Random(f"orchestra-mini:{seed}:{cat}")
        pool = makers[cat](rng, k_train + k_test)
        if len(pool) < k_train + k_test:
            raise ValueError(f"category {cat!r} has {len(pool)} distinct tasks; {k_train + k_test} were asked")
        offset = rng.randrange(len(profiles))
        pool = [t.model_copy(update={"preference": preference_for(profiles[(i + offset) % len(profiles)],
                                                                  t.tools or [], cards)})
                for i, t in enumerate(pool)]
        train += pool[:k_train]
        test += pool[k_train:k_train + k_test]
    return Suite(name="orchestra-mini", seed=seed, train=train, test=test, cards=cards)


def environment(seed: int = 0, reward: RewardFunction | str | Path | None = None, n_train: int = 250,
                n_test: int = 100, categories: Sequence[str] = CATEGORIES, profiles: Sequence[str] = tuple(PROFILES),
                toolcards: str | Path | None = None) -> Environment:
    """"orchestra-mini" as an Environment: `make_suite(seed, ...).environment(reward)`."""
    return make_suite(seed, n_train, n_test, categories, profiles, toolcards).environment(reward)
