"""orchestra-read: orchestra-choice where the right tool can only be found by reading the prompt.

Every episode shows its tools under names that say nothing (`tool_kemo`), in an order drawn for it, at
prices drawn for it (the backend's list price × a factor), each with a short description that says what
it is good at, not what it is (`orchlib.configurations`: the configuration is drawn per task and
episode, recorded on the trajectory, and charged as shown). What stays the same from one episode to the
next is what the prompt says: how often a tool is right, what it costs, and P. A policy that keys on a
name or a list position finds nothing stable to learn; one that reads does.

| category     | tools a question offers (drawn per question) | right under accuracy / thrifty           |
|--------------|----------------------------------------------|------------------------------------------|
| `arithmetic` | calculator, specialist, generalist           | calculator / calculator                  |
|              | or specialist, generalist                    | generalist / specialist                  |
| `gsm8k`      | mixtral, generalist or mixtral, gpt4         | the dear one / mixtral                   |

Mixtral's and GPT-4-1106's answers are their real recorded GSM8K answers (RouteLLM, as in
orchestra-mini); the specialist and the generalist are simulated (their cards say how often each is
right). Which backends a question offers is drawn once per question (its two profile copies offer the
same); the names, order and prices are drawn per episode.

What the prompt shows, and why (a small model has to read it):

- Tools as the `brief` schema lists them: one compact line of names and arguments, then one line per
  tool with its description and prices. A full JSON schema is ~5x as long and buries the few words that
  decide; the tiny policy is trained with `compact`, and `brief` is that list plus the lines to read.
- Descriptions say how often the tool is right, in numbers (`right on about 64 % of word problems`),
  and never name the model: a name would be a stable cue that is not reading (`Mixtral` = cheap).
  Numbers, because comparing two numbers is what choosing under "accuracy" is.
- Prices as the paper's tool descriptions give them: per million input and output tokens, shown to two
  significant digits and charged as shown (`Price: $0.45 per million input tokens, ...`). Under
  "thrifty" the right tool is the one with the lower prices; no drawn factor makes the dear tool of a
  pair the cheaper one per call (their output prices stay apart by ×3 or more).
- Where each tool's price per call stands among the offered tools', in words, after its prices
  (`Cost per call: the lowest of the tools offered.`; `ConfigurationSpace(price_ranks=True)`). A
  135 M-parameter model compares two decimals unreliably (`$0.73` against `$5.9`), and a rank it can
  match to P's words; the rank is computed from the episode's drawn prices, so it is what the prices
  say, on held-out prices as on training's. The recipe adds `RolloutConfig(price_order=True)`: a line of
  the names from the cheapest per call to the dearest, a fixed place to copy a name from.
- P as its weights in the system turn (`Preference (thrifty): accuracy=1, cost=1, latency=0`), the
  profile's name included: the words and the weight on cost say the same thing twice.

Held out (the test space; `orchlib.configurations` checks it against training's): the aliases (a
disjoint set of generated names) and the prices (factors in [1.6, 3.0] on the list price; training
draws [0.5, 1.5]). The order is drawn in both: with two or three tools every order occurs in training,
so no order can be held out; what is measured is whether the choice follows the order
(`orchlib.evaluate.heldout`: the share of calls to the first-listed tool).

The warm start's golden data (the train split's golden calls, by backend; the golden trajectories run
them under each episode's aliases) never shows the measured choice: each GSM8K question appears under
both profiles, their golden tools opposite, each way on half the questions (as orchestra-choice's
`counterbalanced`), so a warm start teaches the call format and that the choice depends on P, not
which way on GSM8K; that is RL's to learn. Arithmetic teaches reading in general, by `golden`:

- "reading" (default): without the calculator the golden tool is the one P asks for — the cheaper
  shown (the specialist) under "thrifty", the more accurate shown (the generalist) under "accuracy" —
  whatever its alias and position, so the warm start has seen P and the descriptions decide a choice;
- "counterbalanced": without the calculator, counterbalanced like GSM8K (P decides nothing the warm
  start shows: the plain orchestra-choice design).

With the calculator offered it is golden under every profile (exact and free). `drills=N` adds N more
arithmetic questions (in neither split) offering the specialist and the generalist alone, under both
profiles, golden as "reading" has it (`reading_drills`): more of what teaches reading, none of it GSM8K.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Literal

from orchlib.configurations import AliasPool, ConfigurationSpace, PriceSpace, Slot, generated_names
from orchlib.env import Environment, RewardFunction
from orchlib.envs.mini import Suite, make_suite
from orchlib.tasks import PROFILES, Golden, Task, under_profiles
from orchlib.trajectory import ToolCall

__all__ = ["READ_BACKENDS", "READ_OFFERS", "READ_DESCRIPTIONS", "READ_PROFILES", "TRAIN_FACTOR", "TEST_FACTOR",
           "read_spaces", "reading_drills", "make_read_suite", "environment"]

READ_PROFILES = ("accuracy", "thrifty")
# What a question of each category may offer, drawn once per question; the first backend of a GSM8K pair is
# the cheap one. gpt4 vs generalist is left out: per call their prices are close, so "thrifty" would hinge
# on a replay's recorded token counts, which the prompt does not show.
READ_OFFERS: dict[str, tuple[tuple[str, ...], ...]] = {
    "arithmetic": (("calculator", "specialist", "generalist"), ("specialist", "generalist")),
    "gsm8k": (("mixtral", "generalist"), ("mixtral", "gpt4")),
}
READ_BACKENDS: tuple[str, ...] = ("calculator", "specialist", "mixtral", "gpt4", "generalist")
# Shown instead of the cards' own (which name the model). The rates: the simulated cards' declared
# accuracies; Mixtral's and GPT-4-1106's share right in the shipped recording (842 and 1130 of 1319).
READ_DESCRIPTIONS: dict[str, str] = {
    "calculator": "Computes an arithmetic expression exactly. Always right on arithmetic; cannot read a word "
                  "problem.",
    "specialist": "Answers the question itself. Right on about 95 % of arithmetic.",
    "mixtral": "Answers the question itself. Right on about 64 % of grade-school word problems.",
    "gpt4": "Answers the question itself. Right on about 86 % of grade-school word problems.",
    "generalist": "Answers the question itself. Right on about 97 % of arithmetic and 95 % of grade-school word "
                  "problems.",
}
TRAIN_FACTOR = (0.5, 1.5)  # × the list price, per episode
TEST_FACTOR = (1.6, 3.0)   # held out: never drawn in training
_TEST_ALIASES = slice(100, 200)  # generated names the test space draws from; training's are the others


def read_spaces(seed: int = 0, aliases: int = 100) -> tuple[ConfigurationSpace, ConfigurationSpace]:
    """(training space, held-out test space) of orchestra-read; `seed` seeds their draws. Training draws its
    names from `aliases` generated names (the first 100, then from the 201st on), the test space from
    another 100, the same whatever `aliases` is."""
    if not 3 <= aliases <= 4800:
        raise ValueError(f"orchestra-read: aliases must be between 3 and 4800 (the generated names less the test's "
                         f"100), not {aliases}")
    names = generated_names(max(aliases, 100) + 100)
    train_names = (names[:_TEST_ALIASES.start] + names[_TEST_ALIASES.stop:])[:aliases]
    # one entry per backend; a question's own tool list keeps those it offers (descriptions: its cards')
    common = dict(seed=seed, tools=tuple(Slot(backends=(b,)) for b in READ_BACKENDS), order="drawn", show_prices=True,
                  price_ranks=True)
    train = ConfigurationSpace(name="train", aliases=AliasPool(names=train_names),
                               price=PriceSpace(factor=TRAIN_FACTOR, digits=2), **common)
    test = ConfigurationSpace(name="held-out", aliases=AliasPool(names=names[_TEST_ALIASES]),
                              price=PriceSpace(factor=TEST_FACTOR, digits=2), held_out=("aliases", "prices"),
                              **common)
    return train, test


def _offer(seed: int, task: Task) -> tuple[str, ...]:
    offers = READ_OFFERS[task.category]
    return offers[random.Random(f"orchestra-read:{seed}:{task.id}").randrange(len(offers))]


def _copy(task: Task, profile: str, backend: str | None, calls: list[ToolCall] | None = None) -> Task:
    golden = Golden(calls=calls or [ToolCall(name=backend)], answer=task.answer)
    return task.model_copy(update={"id": f"{task.id}@{profile}", "preference": PROFILES[profile], "golden": golden})


def _train_tasks(base: list[Task], seed: int, golden: str) -> list[Task]:
    """Each question under both profiles with its golden tool per profile (see the module docstring)."""
    rng = random.Random(f"orchestra-read:ways:{seed}")
    out: list[Task] = []
    opposite: list[tuple[Task, tuple[str, str]]] = []  # questions whose two profiles' golden tools are opposite
    for t in base:
        offer = _offer(seed, t)
        t = t.model_copy(update={"tools": list(offer)})
        if "calculator" in offer:  # exact and free: golden under every profile
            calc = [c for c in t.golden.calls if c.name == "calculator"]
            out += [_copy(t, p, None, calc) for p in READ_PROFILES]
        elif t.category == "arithmetic" and golden == "reading":
            out += [_copy(t, "accuracy", "generalist"), _copy(t, "thrifty", "specialist")]
        else:
            opposite.append((t, (offer[1], offer[0]) if t.category == "gsm8k" else ("generalist", "specialist")))
    ways = [i % 2 for i in range(len(opposite))]
    rng.shuffle(ways)
    for (t, (dear, cheap)), way in zip(opposite, ways):
        first, second = (dear, cheap) if way else (cheap, dear)
        out += [_copy(t, "accuracy", first), _copy(t, "thrifty", second)]
    return out


def reading_drills(seed: int, n: int, exclude: set[str]) -> list[Task]:
    """`n` arithmetic questions in neither split, each offering the specialist and the generalist alone, under
    both profiles, the golden tool the one P asks for (the "reading" design): more of what teaches the warm
    start to read, none of it GSM8K."""
    from orchlib.envs.mini import arithmetic_tasks

    pool = arithmetic_tasks(random.Random(f"orchestra-read:drills:{seed}"), n + len(exclude))
    tasks = [t.model_copy(update={"id": f"drill-{t.id}", "tools": ["specialist", "generalist"]})
             for t in pool if t.prompt not in exclude][:n]
    return [c for t in tasks for c in (_copy(t, "accuracy", "generalist"), _copy(t, "thrifty", "specialist"))]


def make_read_suite(seed: int = 0, n_train: int = 120, n_test: int = 80,
                    golden: Literal["reading", "counterbalanced"] = "reading", drills: int = 0,
                    aliases: int = 100) -> Suite:
    """Build "orchestra-read" from orchestra-mini's arithmetic and GSM8K questions (`n_train` and `n_test`
    questions, half each; each split holds every question under both profiles), with its training and
    held-out test configuration spaces and the `brief` tool list. `drills`: that many more arithmetic
    questions in the train split (`reading_drills`). `aliases`: how many names training draws from
    (`read_spaces`); from a few hundred, a small policy cannot learn them by heart and has to copy them."""
    if golden not in ("reading", "counterbalanced"):
        raise ValueError(f'orchestra-read: golden must be "reading" or "counterbalanced", not {golden!r}')
    if drills < 0:
        raise ValueError(f"orchestra-read: drills must be at least 0, not {drills}")
    base = make_suite(seed, n_train=n_train, n_test=n_test, categories=tuple(READ_OFFERS), profiles=READ_PROFILES)
    cards = [c.model_copy(update={"final": True, "description": READ_DESCRIPTIONS[c.name]})
             for c in base.cards if c.name in READ_BACKENDS]
    train = _train_tasks(base.train, seed, golden)
    train += reading_drills(seed, drills, {t.prompt for t in base.train + base.test})
    test = [t.model_copy(update={"tools": list(_offer(seed, t)),
                                 "golden": Golden(calls=[ToolCall(name=_offer(seed, t)[-1])], answer=t.answer)})
            for t in base.test]
    train_space, test_space = read_spaces(seed, aliases)
    return Suite(name="orchestra-read", seed=seed, train=train, test=under_profiles(test, READ_PROFILES),
                 cards=cards, configurations=train_space, test_configurations=test_space)


def environment(seed: int = 0, reward: RewardFunction | str | Path | None = None, n_train: int = 120,
                n_test: int = 80, golden: Literal["reading", "counterbalanced"] = "reading",
                drills: int = 0, aliases: int = 100) -> Environment:
    """"orchestra-read" as an Environment: `make_read_suite(seed, n_train, n_test, golden, drills, aliases)
    .environment(reward)`. Its prompts are meant for `RolloutConfig(tool_schema="brief")`, or
    `"compact"` with `price_order=True` (examples/smollm2_read.yaml and tiny_read.yaml set that)."""
    return make_read_suite(seed, n_train=n_train, n_test=n_test, golden=golden, drills=drills,
                           aliases=aliases).environment(reward)
