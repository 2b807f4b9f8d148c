"""Per-episode tool configurations: which tools an episode offers, under which names, at which prices.

ToolOrchestra trains on diverse tool configurations (arXiv 2511.21689 §3.3: each example carries its own
`model_mapping`, `tool_pricing` and `pref_vec`, and every call is charged at that example's prices), so a
policy cannot succeed by remembering names and list positions instead of reading what it is shown.

    space = ConfigurationSpace(aliases=AliasPool(generate=40), order="drawn", sizes=(2, 3),
                               price=PriceSpace(factor=(0.5, 2.0)), show_prices=True)
    env = Environment(train=..., test=..., tools=..., configurations=space)
    c = env.configuration(env.train[0], episode=0)      # = draw(bound space, space.seed, task id, 0)

A `ConfigurationSpace` says what may vary; `draw(space, seed, task_id, episode_index)` is the concrete
`Configuration` of one episode, a pure function of exactly those four (a SHA-256 of the key seeds
numpy's generator: the same draw in every process). An `EpisodeView` (`episode_view`) is what the
rollout runs that episode with: a Toolbox whose tools are the offered backends wrapped under their
aliases (`AliasedTool`: the alias's card, prices and latency; calling it calls the backend) in the
drawn order, and the task with the drawn P. Nothing else knows the real names: the trajectory records
its configuration, and the ledger, the audit, the reward's features and `evaluate` read it from there.

Decisions, and why:

- The G rollouts of one task in one rollout call share a configuration (the group's episode index is
  the caller's `episode`, a trainer's step): GRPO's advantage compares rollouts that saw the same
  tools at the same prices, so it credits the choice, not the luck of a cheaper draw — as the
  paper's examples carry one configuration for all of their rollouts.
- `Trajectory.calls` (the reward's `calls[t]`) counts by backend, not alias: an alias means nothing
  outside its episode, while `calls[gpt4]` means the same in every episode, so the reward's tool terms
  and P's per-tool weights (keyed by backend) are comparable across episodes. The turns keep what the
  policy wrote (the aliases); observations are labelled with the alias and `meta["backend"]`.
- Prices are drawn to `digits` significant digits, shown and charged alike. At the backend's own
  prices the backend's own bill stands (a replay's recorded bill); at any other price the call is
  charged from its token counts at the alias's prices.
- A space's defaults leave each part as it is (own names, every tool, list prices, the listed order,
  the task's P): the identity configuration. An environment without a space runs exactly as before
  and its trajectories record nothing.
- Held-out parts are declared on the test space (`held_out`) and checked against the training space
  when the environment is built: a held-out alias pool that shares a name with training's, a held-out
  price range that overlaps training's, a held-out backend training offers, a held-out size training
  draws are errors, so a configuration tagged held-out really is one training never produced.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from orchlib.cards import Latency, Price, ToolCard
from orchlib.cards.costs import price_per_call
from orchlib.configuration_record import Configuration, OfferedTool
from orchlib.tasks import PROFILES, Preference, Task
from orchlib.toolnames import CARD_NAME
from orchlib.tools import Tool, ToolContext, Toolbox
from orchlib.trajectory import Observation

__all__ = ["Values", "PriceSpace", "LatencySpace", "AliasPool", "Slot", "PreferenceSpace", "ConfigurationSpace",
           "BackendInfo", "OfferedTool", "Configuration", "ConfigurationError", "draw", "bind", "bind_spaces",
           "generated_names", "AliasedTool", "EpisodeView", "for_task", "episode_view", "episode_views",
           "recorded_configurations", "backend_counts", "reward_preference", "episode_prices", "episode_toolbox",
           "price_rank_line", "call_price", "price_band", "HELD_OUT_PARTS"]

HELD_OUT_PARTS = ("aliases", "prices", "backends", "sizes")
_PRICE_CLASSES = ("per_call", "per_m_input", "per_m_output", "per_second", "per_m_reasoning", "per_m_cached_input")


class ConfigurationError(ValueError):
    """A space that does not fit its environment: `loc` is the field's path inside the space."""

    def __init__(self, loc: tuple[Any, ...], message: str):
        self.loc, self.problem = loc, message
        super().__init__(f"{_dotted(loc)}: {message}" if loc else message)


def _dotted(loc: Iterable[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


# ---------------------------------------------------------------------------------------------- the space
class Values(BaseModel):
    """A number drawn per episode: uniformly in [low, high], or one of `choices`, equally likely. In YAML
    `[low, high]` is a range, a bare number a fixed value, `{choices: [a, b, c]}` a list."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    low: float | None = Field(None, ge=0, description="range: the lowest value (prices, factors and seconds "
                                                       "are never negative)")
    high: float | None = Field(None, ge=0, description="range: the highest value")
    choices: tuple[float, ...] | None = Field(None, min_length=1, description="or: the values to draw from")

    @model_validator(mode="before")
    @classmethod
    def _short_forms(cls, data: Any) -> Any:
        if isinstance(data, (int, float)) and not isinstance(data, bool):
            return {"choices": [data]}
        if isinstance(data, (list, tuple)):
            if len(data) != 2:
                raise ValueError(f"a range is [low, high], two numbers; got {len(data)} (a list of values is "
                                 "{choices: [...]})")
            return {"low": data[0], "high": data[1]}
        return data

    @model_validator(mode="after")
    def _one_form(self) -> Values:
        ranged = self.low is not None or self.high is not None
        if ranged == (self.choices is not None):
            raise ValueError("give a range [low, high] or choices, one of them")
        if ranged and (self.low is None or self.high is None or self.low > self.high):
            raise ValueError(f"a range needs low <= high; got [{self.low}, {self.high}]")
        if self.choices is not None and min(self.choices) < 0:
            raise ValueError(f"choices must not be negative; got {min(self.choices)}")
        return self

    @property
    def span(self) -> tuple[float, float]:
        """The smallest and largest value a draw may give."""
        return (self.low, self.high) if self.choices is None else (min(self.choices), max(self.choices))  # type: ignore[return-value]

    def draw(self, rng: np.random.Generator) -> float:
        if self.choices is not None:
            return float(self.choices[int(rng.integers(len(self.choices)))]) if len(self.choices) > 1 \
                else float(self.choices[0])
        return float(self.low) if self.low == self.high else float(rng.uniform(self.low, self.high))


_ONE = Values(choices=(1.0,))


class PriceSpace(BaseModel):
    """An offered tool's price: its backend's list price × `factor` (every token class alike), or, per class,
    a value drawn apart (it then replaces that class's list price)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    factor: Values = Field(_ONE, description="× the backend card's list price; 1: the list price (the paper's "
                                             "tool_pricing varies it per example)")
    per_call: Values | None = Field(None, description="USD per call, drawn instead of the list price")
    per_m_input: Values | None = Field(None, description="USD per million input tokens, drawn")
    per_m_output: Values | None = Field(None, description="USD per million output tokens, drawn")
    per_second: Values | None = Field(None, description="USD per second of run time, drawn")
    per_m_reasoning: Values | None = Field(None, description="USD per million reasoning tokens, drawn")
    per_m_cached_input: Values | None = Field(None, description="USD per million cached input tokens, drawn")
    digits: int = Field(3, ge=1, le=15, description="significant digits of a drawn price, shown and charged alike "
                                                   "(a prompt shows $2.37, not $2.3712093)")

    @property
    def identity(self) -> bool:
        return self.factor == _ONE and all(getattr(self, k) is None for k in _PRICE_CLASSES)


class LatencySpace(BaseModel):
    """An offered tool's declared latency: its backend's × `factor`, or `seconds` drawn (jitter kept)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    factor: Values = Field(_ONE, description="× the backend card's declared seconds")
    seconds: Values | None = Field(None, description="declared seconds, drawn instead")

    @property
    def identity(self) -> bool:
        return self.factor == _ONE and self.seconds is None


# Two-letter syllables: names like `tool_kemo` say nothing of the backend, its price or its rank.
_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def generated_names(n: int, prefix: str = "tool_") -> tuple[str, ...]:
    """`n` names that say nothing: `prefix` + two syllables (up to 4,900), always the same list."""
    if n > len(_SYLLABLES) ** 2:
        raise ValueError(f"at most {len(_SYLLABLES) ** 2} generated names; asked for {n}")
    # a fixed stride through the syllable pairs, so consecutive names do not share their first syllable
    total = len(_SYLLABLES) ** 2
    return tuple(prefix + _SYLLABLES[(i * 1237 % total) // len(_SYLLABLES)] + _SYLLABLES[(i * 1237 % total) %
                                                                                      len(_SYLLABLES)]
                 for i in range(n))


class AliasPool(BaseModel):
    """The names offered tools are shown under, drawn without replacement per episode: `names`, plus
    `generate` names that say nothing (`generated_names`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    names: tuple[str, ...] = Field((), description="names to draw from")
    generate: int = Field(0, ge=0, le=4900, description="plus this many generated names (prefix + two syllables)")
    prefix: str = Field("tool_", description="of the generated names; two pools with different prefixes share none")

    @field_validator("names")
    @classmethod
    def _valid(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for i, n in enumerate(names):
            if not CARD_NAME.fullmatch(n):
                raise ValueError(f"names[{i}]: {n!r} is not a tool name (letters, digits, '_', '-', '.')")
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"alias clash: {twice} listed twice")
        return names

    @model_validator(mode="after")
    def _not_empty(self) -> AliasPool:
        if not self.pool:
            raise ValueError("an alias pool needs names or generate > 0")
        clash = sorted(set(self.names) & set(generated_names(self.generate, self.prefix)))
        if clash:
            raise ValueError(f"alias clash: {clash} is both listed and generated")
        if not CARD_NAME.fullmatch(self.prefix + "ba"):
            raise ValueError(f"prefix {self.prefix!r} does not make tool names")
        return self

    @property
    def pool(self) -> tuple[str, ...]:
        return self.names + generated_names(self.generate, self.prefix)


class Slot(BaseModel):
    """One entry the tool list may hold: which backends may answer for it (one drawn per episode), and
    what it is shown with. In YAML a bare tool name is a slot with that one backend."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    backends: tuple[str, ...] = Field(min_length=1, description="tools of the environment that may stand behind "
                                                                "this entry (the paper's model_mapping)")
    required: bool = Field(False, description="offered in every episode (e.g. the tool whose answer is final)")
    description: str | None = Field(None, min_length=1, description="shown instead of the backend card's own "
                                                                    "(one that names the model would give it away)")
    price: PriceSpace | None = Field(None, description="this entry's prices; None: the space's")
    latency: LatencySpace | None = Field(None, description="this entry's latency; None: the space's")

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data: Any) -> Any:
        return {"backends": [data]} if isinstance(data, str) else data


class PreferenceSpace(BaseModel):
    """The episode's P: a named profile drawn from `profiles`, or weights drawn from ranges."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    profiles: tuple[str, ...] = Field((), description="names of orchlib.tasks.PROFILES, one drawn")
    outcome: Values | None = Field(None, description="weight on the outcome, drawn")
    cost: Values | None = Field(None, description="weight on the cost, drawn")
    latency: Values | None = Field(None, description="weight on the latency, drawn")
    name: str = Field("drawn", description="the drawn weights' profile name, shown with them")

    @model_validator(mode="after")
    def _one_form(self) -> PreferenceSpace:
        weights = any(v is not None for v in (self.outcome, self.cost, self.latency))
        if weights == bool(self.profiles):
            raise ValueError("give profiles or weights (outcome, cost, latency), one of them")
        unknown = [p for p in self.profiles if p not in PROFILES]
        if unknown:
            raise ValueError(f"unknown profiles {unknown}; known: {sorted(PROFILES)}")
        return self

    def draw(self, rng: np.random.Generator) -> Preference:
        if self.profiles:
            return PROFILES[self.profiles[int(rng.integers(len(self.profiles)))]]
        w = {k: (v.draw(rng) if v is not None else d) for k, v, d in
             (("outcome", self.outcome, 1.0), ("cost", self.cost, 0.0), ("latency", self.latency, 0.0))}
        return Preference(name=self.name, **{k: float(f"{x:.3g}") for k, x in w.items()})


class BackendInfo(BaseModel):
    """What a space knows of one backend once bound to an environment: its card's list price, declared
    latency and description (the draw scales and shows these)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    price: Price = Field(description="the card's list price")
    latency: Latency = Field(description="the card's declared latency")
    description: str = Field(description="the card's description")


class ConfigurationSpace(BaseModel):
    """What an episode's tool configuration may be. Every default leaves its part as it is: the
    default space draws the identity configuration (the environment's tools, names, prices and order)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field("train", description="reports group configurations by the space they came from")
    seed: int = Field(0, description="the draw's seed: same seed, task and episode, same configuration")
    tools: tuple[Slot, ...] = Field((), description="the entries the list may hold; empty: every tool of the "
                                                    "environment, each an entry of its own")
    sizes: tuple[int, ...] | None = Field(None, min_length=1, description="how many entries an episode offers, one "
                                          "drawn (required entries count); None: all of them")
    aliases: AliasPool | None = Field(None, description="the names entries are shown under; None: the backends' own")
    price: PriceSpace = Field(default_factory=PriceSpace, description="prices of every entry without its own")
    latency: LatencySpace = Field(default_factory=LatencySpace, description="latency of every entry without its own")
    preference: PreferenceSpace | None = Field(None, description="the episode's P; None: the task's own")
    order: Literal["listed", "drawn"] = Field("listed", description="the list's order: as `tools` lists them, or "
                                                                    "shuffled per episode")
    show_prices: bool = Field(False, description="append each tool's price and latency to its description, so the "
                                                 "policy can read what a call costs (the paper's tool descriptions "
                                                 "carry them); shown wherever the prompt style shows descriptions")
    price_ranks: bool = Field(False, description="with `show_prices`: also say which offered tool costs least and "
                                                 "which most per call (`price_rank_line`), so a policy that cannot "
                                                 "compare decimals can still read the order of the prices")
    held_out: tuple[Literal["aliases", "prices", "backends", "sizes"], ...] = Field(
        (), description="parts of this (test) space training never shows; checked against the training space")
    catalog: dict[str, BackendInfo] = Field(default_factory=dict, description="filled by `bind`: the environment's "
                                            "backends this space draws from (leave it empty)")

    @field_validator("sizes")
    @classmethod
    def _sizes(cls, sizes: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if sizes is not None and min(sizes) < 1:
            raise ValueError(f"empty subset: a size must be at least 1; got {min(sizes)}")
        return sizes

    @model_validator(mode="after")
    def _consistent(self) -> ConfigurationSpace:
        if self.tools and self.sizes is not None:
            required = sum(s.required for s in self.tools)
            bad = [k for k in self.sizes if not required <= k <= len(self.tools)]
            if bad:
                raise ValueError(f"sizes: {bad} outside {required}..{len(self.tools)} (the required entries to "
                                 "all of them)")
        if self.aliases is not None and len(self.aliases.pool) < max(self.sizes or (len(self.tools),)):
            raise ValueError(f"aliases: {len(self.aliases.pool)} names for up to "
                             f"{max(self.sizes or (len(self.tools),))} tools an episode offers")
        if len(set(self.held_out)) != len(self.held_out):
            raise ValueError("held_out lists a part twice")
        if self.price_ranks and not self.show_prices:
            raise ValueError("price_ranks: a rank follows the prices; set show_prices too")
        return self

    @property
    def slots(self) -> tuple[Slot, ...]:
        """The entries: `tools`, or one per backend of the catalog."""
        return self.tools or tuple(Slot(backends=(b,)) for b in self.catalog)

    @property
    def identity(self) -> bool:
        """Whether every draw leaves the tools as they are (names, all of them, list prices, listed order)."""
        return (self.aliases is None and self.sizes is None and self.order == "listed" and not self.tools
                and self.price.identity and self.latency.identity and self.preference is None
                and not self.show_prices and not self.price_ranks)

    def backends(self) -> set[str]:
        return {b for s in self.slots for b in s.backends}

    def configuration(self, task_id: str, episode: int) -> Configuration:
        """`draw(self, self.seed, task_id, episode)`."""
        return draw(self, self.seed, task_id, episode)


# ---------------------------------------------------------------------------------------------- binding
def bind(space: ConfigurationSpace, toolbox: Toolbox, where: str = "configurations") -> ConfigurationSpace:
    """The space with its catalog of `toolbox`'s backends; an unknown backend is a ConfigurationError
    naming its field (`configurations.tools[1].backends[0]`)."""
    known = set(toolbox.names)
    for i, slot in enumerate(space.tools):
        for j, b in enumerate(slot.backends):
            if b not in known:
                raise ConfigurationError((where, "tools", i, "backends", j),
                                         f"unknown backend {b!r}; the environment's tools are {sorted(known)}")
    names = [b for s in space.tools for b in s.backends] if space.tools else toolbox.names
    if space.aliases is None and space.tools:
        # shown under their own names, two entries may not both offer one backend
        seen = [b for s in space.tools for b in s.backends]
        twice = sorted({b for b in seen if seen.count(b) > 1})
        if twice:
            raise ConfigurationError((where, "tools"), f"alias clash: {twice} may be offered twice under its own "
                                                       "name; give `aliases`")
    catalog = {n: BackendInfo(price=toolbox[n].card.price, latency=toolbox[n].card.latency,
                              description=toolbox[n].card.description) for n in dict.fromkeys(names)}
    bound = space.model_copy(update={"catalog": catalog})
    most = max(space.sizes or (len(bound.slots),))
    if space.sizes is not None and most > len(bound.slots):  # (checked against `tools` when they are given)
        raise ConfigurationError((where, "sizes"), f"{most} tools offered, but the environment has {len(bound.slots)}")
    if space.aliases is not None and len(space.aliases.pool) < most:
        raise ConfigurationError((where, "aliases"), f"{len(space.aliases.pool)} names for up to {most} tools")
    if not bound.slots:
        raise ConfigurationError((where, "tools"), "empty subset: the environment has no tools to offer")
    return bound


def bind_spaces(train: Any, test: Any, toolbox: Toolbox, env_name: str = "custom"
                ) -> tuple[ConfigurationSpace | None, ConfigurationSpace | None]:
    """An environment's training and test spaces bound to its toolbox, the test space's declared
    held-out parts checked against the training space (see the module docstring)."""
    spaces = []
    for field, space, default in (("configurations", train, "train"), ("test_configurations", test, "test")):
        if space is None:
            spaces.append(None)
            continue
        if isinstance(space, Mapping):
            space = ConfigurationSpace.model_validate({"name": default, **space})
        if not isinstance(space, ConfigurationSpace):
            raise TypeError(f"environment {env_name!r}: {field} is a ConfigurationSpace, not {type(space).__name__}")
        spaces.append(bind(space, toolbox, field))
    train_s, test_s = spaces
    if train_s is not None and train_s.held_out:
        raise ConfigurationError(("configurations", "held_out"), "held-out parts belong to the test space "
                                 "(test_configurations): training shows everything its space holds")
    if test_s is not None and test_s.held_out:
        _check_held_out(test_s, train_s or bind(ConfigurationSpace(), toolbox))
    return train_s, test_s


def _check_held_out(test: ConfigurationSpace, train: ConfigurationSpace) -> None:
    loc = ("test_configurations", "held_out")
    for part in test.held_out:
        if part == "aliases":
            if test.aliases is None:
                raise ConfigurationError(loc, "aliases are held out but the test space shows the backends' own names")
            shared = sorted(set(test.aliases.pool) & _train_names(train))
            if shared:
                raise ConfigurationError(("test_configurations", "aliases"),
                                         f"held-out aliases {shared[:5]} are also training names")
        elif part == "backends":
            shared = sorted(test.backends() & train.backends())
            if shared:
                raise ConfigurationError(("test_configurations", "tools"),
                                         f"held-out backends {shared} are offered in training")
        elif part == "sizes":
            test_sizes = set(test.sizes or (len(test.slots),))
            shared = sorted(test_sizes & set(train.sizes or (len(train.slots),)))
            if shared:
                raise ConfigurationError(("test_configurations", "sizes"),
                                         f"held-out sizes {shared} are drawn in training")
        elif part == "prices":
            lo, hi = _price_span(test)
            tlo, thi = _price_span(train)
            if lo <= thi and tlo <= hi:
                raise ConfigurationError(("test_configurations", "price"),
                                         f"held-out price factors [{lo:g}, {hi:g}] overlap training's [{tlo:g}, "
                                         f"{thi:g}]")


def _train_names(train: ConfigurationSpace) -> set[str]:
    return set(train.aliases.pool) if train.aliases is not None else train.backends()


def _price_span(space: ConfigurationSpace) -> tuple[float, float]:
    """The factors on the list price a space may draw (its slots' and its own), as one span."""
    spans = [(s.price or space.price) for s in space.slots]
    if any(any(getattr(p, k) is not None for k in _PRICE_CLASSES) for p in spans):
        raise ConfigurationError(("test_configurations", "held_out"), "held-out prices are compared by their "
                                 "factor on the list price; drawn per-class prices have none")
    return min(p.factor.span[0] for p in spans), max(p.factor.span[1] for p in spans)


# ---------------------------------------------------------------------------------------------- the draw
def _rng(seed: int, task_id: str, episode_index: int) -> np.random.Generator:
    # SHA-256, not hash(): Python salts str hashes per process (PYTHONHASHSEED)
    key = json.dumps([int(seed), str(task_id), int(episode_index)]).encode()
    return np.random.Generator(np.random.PCG64(int.from_bytes(hashlib.sha256(key).digest()[:16], "little")))


def _significant(x: float, digits: int) -> float:
    return float(f"{x:.{digits}g}") if x else 0.0


def _price(rng: np.random.Generator, spec: PriceSpace, listed: Price) -> tuple[Price, float | None]:
    if spec.identity:
        return listed, 1.0
    factor = spec.factor.draw(rng)
    fields: dict[str, Any] = {}
    for k in _PRICE_CLASSES:
        drawn = getattr(spec, k)
        base = getattr(listed, k)
        value = drawn.draw(rng) if drawn is not None else (None if base is None else base * factor)
        fields[k] = None if value is None else _significant(value, spec.digits)
    own = all(getattr(spec, k) is None for k in _PRICE_CLASSES)
    return Price(**fields), (factor if own else None)


def _latency(rng: np.random.Generator, spec: LatencySpace, listed: Latency) -> Latency:
    if spec.identity:
        return listed
    seconds = spec.seconds.draw(rng) if spec.seconds is not None else listed.seconds * spec.factor.draw(rng)
    return Latency(seconds=_significant(seconds, 3), jitter=listed.jitter)


def draw(space: ConfigurationSpace, seed: int, task_id: str, episode_index: int) -> Configuration:
    """The configuration of one episode: a pure function of exactly these four (the space bound to its
    environment: `bind`, which an Environment does)."""
    slots = space.slots
    missing = sorted({b for s in slots for b in s.backends} - set(space.catalog))
    if missing or not slots:
        raise ValueError(f"space {space.name!r} is not bound to an environment's tools ({missing or 'no tools'}); "
                         "give it to an Environment, or `bind(space, toolbox)`")
    rng = _rng(seed, task_id, episode_index)
    n = len(slots) if space.sizes is None else int(space.sizes[int(rng.integers(len(space.sizes)))]) \
        if len(space.sizes) > 1 else space.sizes[0]
    required = [i for i, s in enumerate(slots) if s.required]
    optional = [i for i, s in enumerate(slots) if not s.required]
    chosen = sorted(required + [optional[int(i)] for i in
                                (rng.permutation(len(optional))[:n - len(required)] if n < len(slots)
                                 else range(len(optional)))])
    backends = [slots[i].backends[int(rng.integers(len(slots[i].backends)))] if len(slots[i].backends) > 1
                else slots[i].backends[0] for i in chosen]
    order = list(range(len(chosen))) if space.order == "listed" else [int(i) for i in rng.permutation(len(chosen))]
    if space.aliases is not None:
        pool = space.aliases.pool
        names = [pool[int(i)] for i in rng.choice(len(pool), size=len(chosen), replace=False)]
    else:
        names = list(backends)
        if len(set(names)) != len(names):
            raise ValueError(f"space {space.name!r}: one backend offered twice under its own name; give aliases")
    offered = []
    for k in order:
        slot, backend = slots[chosen[k]], backends[k]
        info = space.catalog[backend]
        price, factor = _price(rng, slot.price or space.price, info.price)
        offered.append(OfferedTool(alias=names[k], backend=backend, price=price, factor=factor,
                                   latency=_latency(rng, slot.latency or space.latency, info.latency),
                                   description=slot.description or info.description))
    preference = space.preference.draw(rng) if space.preference is not None else None
    return Configuration(tools=tuple(offered), preference=None if preference is None else preference.model_dump(),
                         show_prices=space.show_prices, price_ranks=space.price_ranks,
                         space=space.name, held_out=tuple(space.held_out), seed=seed, episode=episode_index)


# ---------------------------------------------------------------------------------------------- the view
class AliasedTool(Tool):
    """A backend shown under an alias: the alias's card (name, description, price, latency) for the
    prompt and the bill; calling it calls the backend, whose answer, tokens and draws are its own."""

    def __init__(self, backend: Tool, card: ToolCard):
        self.backend, self.card, self.settings = backend, card, backend.settings
        self.measured = backend.measured  # type: ignore[misc]  (per instance, as MCPTool sets it)
        self._own_price = card.price == backend.card.price
        self._own_latency = card.latency == backend.card.latency

    @property
    def stateful(self) -> bool:
        return self.backend.stateful

    def check_arguments(self, arguments: Any) -> str | None:
        return self.backend.check_arguments(arguments)

    async def __call__(self, arguments: dict[str, Any] | None = None, context: ToolContext | None = None, *,
                       timeout_s: float | None = None) -> Observation:
        context = context or ToolContext()
        obs = await self.backend(arguments, context, timeout_s=timeout_s)
        latency = obs.latency_s
        if not self.measured and not self._own_latency and obs.error_kind != "timeout" and obs.error_kind != \
                "schema_violation" and not _recorded_latency(obs, self.backend, context):
            latency = self.card.latency.sample(context.seed, self.backend.name, context.task_id)
            if timeout_s is not None and latency > timeout_s:
                return obs.model_copy(update={
                    "tool": self.name, "meta": {**obs.meta, "backend": self.backend.name}, "latency_s": timeout_s,
                    "content": f"error: {self.name} declares {latency:.3g} s, over the {timeout_s:g} s timeout",
                    "error": f"{self.name} declares {latency:.3g} s, over the {timeout_s:g} s timeout",
                    "error_kind": "timeout", "final": False,
                    "cost_usd": self.card.price.cost(obs.tokens_in, obs.tokens_out, timeout_s,
                                                     tokens_reasoning=obs.tokens_reasoning,
                                                     tokens_cached=obs.tokens_cached)})
        cost = obs.cost_usd
        if obs.error_kind == "schema_violation":  # rejected before it ran: free, as Tool.__call__ has it
            cost = 0.0
        elif not (self._own_price and latency == obs.latency_s):  # the alias's prices, from the backend's counts
            cost = self.card.price.cost(obs.tokens_in, obs.tokens_out, latency, tokens_reasoning=obs.tokens_reasoning,
                                        tokens_cached=obs.tokens_cached)
        content = obs.content.replace(self.backend.name, self.name) if obs.error else obs.content
        error = obs.error.replace(self.backend.name, self.name) if obs.error else obs.error
        return obs.model_copy(update={"tool": self.name, "cost_usd": cost, "latency_s": latency, "content": content,
                                      "error": error, "meta": {**obs.meta, "backend": self.backend.name}})


def _recorded_latency(obs: Observation, backend: Tool, context: ToolContext) -> bool:
    """Whether a stand-in reported a recorded time rather than its card's draw (a recording's own latency
    stands behind any alias, as it stands behind the backend's own name)."""
    return obs.latency_s != backend.card.latency.sample(context.seed, backend.name, context.task_id)


class EpisodeView:
    """What one episode runs with: its configuration, the toolbox of aliased tools in the drawn order,
    and the task as the policy sees it (offered aliases, the drawn P shown under the aliases)."""

    __slots__ = ("configuration", "toolbox", "task", "preference")

    def __init__(self, configuration: Configuration, toolbox: Toolbox, task: Task, preference: Preference):
        self.configuration, self.toolbox, self.task = configuration, toolbox, task
        self.preference = preference  # what the reward weighs: P's per-tool weights by backend

    def backend_of(self, name: str) -> str:
        return self.configuration.backend_of(name)


def price_rank_line(key: float, keys: Sequence[float]) -> str:
    """Where a tool's price per call (`key`) stands among the offered tools' (`keys`, its own included):
    lowest, highest or between. Said in words because a small policy reads a word more surely than it
    compares two decimals; the prices themselves stay on the line before."""
    low, high = min(keys), max(keys)
    if low == high:
        return "Cost per call: the same as every other tool offered."
    if key == low:
        return "Cost per call: the lowest of the tools offered."
    if key == high:
        return "Cost per call: the highest of the tools offered."
    return "Cost per call: between the lowest and the highest of the tools offered."


def call_price(offered: OfferedTool) -> float:
    """What `offered` charges per call at its shown prices (`orchlib.cards.costs.price_per_call`)."""
    return price_per_call(offered.price, offered.latency)


def _alias_card(card: ToolCard, offered: OfferedTool, show_prices: bool, rank: str = "") -> ToolCard:
    description = offered.description
    update = {"name": offered.alias, "price": offered.price, "latency": offered.latency}
    card = card.model_copy(update=update)  # validated fields, all of them
    if show_prices:
        description = f"{description.strip()}\n{card.describe_costs()}" + (f" {rank}" if rank else "")
    card = card.model_copy(update={"description": description})
    card._origin = None  # drawn, not read from the backend's file: findings name `<card ALIAS>`, not its lines
    return card


def episode_toolbox(configuration: Configuration, toolbox: Toolbox) -> Toolbox:
    """The offered tools of `configuration`, under their aliases, in its order (see AliasedTool)."""
    missing = [t.backend for t in configuration.tools if t.backend not in toolbox]
    if missing:
        raise ValueError(f"the configuration's backends {missing} are not in the toolbox ({toolbox.names})")
    keys = [call_price(t) for t in configuration.tools]
    ranks = [price_rank_line(k, keys) if configuration.price_ranks and len(keys) > 1 else "" for k in keys]
    return Toolbox(AliasedTool(toolbox[t.backend],
                               _alias_card(toolbox[t.backend].card, t, configuration.show_prices, rank))
                   for t, rank in zip(configuration.tools, ranks))


def for_task(configuration: Configuration, task: Task) -> Configuration:
    """`configuration` as `task` runs under it: the task's own tool list (if any) still bounds what is
    offered, so an alias whose backend the task does not offer is left out."""
    if task.tools is None:
        return configuration
    allowed = set(task.tools)
    return configuration.model_copy(update={"tools": tuple(t for t in configuration.tools if t.backend in allowed)})


def episode_view(configuration: Configuration, task: Task, toolbox: Toolbox) -> EpisodeView:
    """The view of `task` under `configuration` (`for_task`)."""
    configuration = for_task(configuration, task)
    box = episode_toolbox(configuration, toolbox)
    P = (Preference.model_validate(configuration.preference) if configuration.preference is not None
         else task.preference or Preference(name="default"))
    to_alias = {t.backend: t.alias for t in configuration.tools}
    shown = P.model_copy(update={"tools": {to_alias[b]: w for b, w in P.tools.items() if b in to_alias}}) \
        if P.tools else P
    return EpisodeView(configuration, box, task.model_copy(update={"tools": list(box.names), "preference": shown}), P)


SpaceOf = Callable[[Task], "ConfigurationSpace | Configuration | None"]


def episode_views(tasks: Sequence[Task], toolbox: Toolbox, spaces: ConfigurationSpace | SpaceOf | None,
                  episode: int = 0) -> list[EpisodeView | None]:
    """Per task, its episodes' view (None: the task and tools as they are). `spaces`: one space for every
    task, or a function task → a space (an Environment's `configuration_space`) or a recorded
    Configuration (`recorded_configurations`, to replay episodes). An identity space builds no view:
    its episodes run, and are recorded, exactly as without one."""
    if spaces is None:
        return [None] * len(tasks)
    out: list[EpisodeView | None] = []
    for task in tasks:
        space = spaces if isinstance(spaces, ConfigurationSpace) else spaces(task)
        if isinstance(space, Configuration):
            out.append(episode_view(space, task, toolbox))
            continue
        if space is None or space.identity:
            out.append(None)
            continue
        if not space.catalog:
            space = bind(space, toolbox)
        out.append(episode_view(draw(space, space.seed, task.id, episode), task, toolbox))
    return out


def recorded_configurations(trajectories: Iterable[Any]) -> Callable[[Task], Configuration | None]:
    """task → the configuration its recorded episodes ran under (for `rollout(..., configurations=...)`),
    so a replay runs each task exactly as recorded; a task whose episodes disagree is an error."""
    by_task: dict[str, Configuration | None] = {}
    for t in trajectories:
        c = getattr(t, "configuration", None)
        if t.task_id in by_task and by_task[t.task_id] != c:
            raise ValueError(f"task {t.task_id}: its recorded episodes ran under different configurations")
        by_task[t.task_id] = c
    return lambda task: by_task.get(task.id)


# ---------------------------------------------------------------------------------------------- downstream
def backend_counts(calls: Mapping[str, int], configuration: Configuration | None) -> dict[str, int]:
    """Call counts by backend (a name not offered, as written), sorted: `Trajectory.calls`."""
    if configuration is None:
        return dict(sorted(calls.items()))
    out: dict[str, int] = {}
    for name, n in calls.items():
        b = configuration.backend_of(name)
        out[b] = out.get(b, 0) + n
    return dict(sorted(out.items()))


def reward_preference(task: Task, group: Sequence[Any] = ()) -> Preference:
    """The P a group's reward weighs: its configuration's (recorded on its trajectories) where one was
    drawn, else the task's shown P (`orchlib.prompting.shown_preference`)."""
    for t in group:
        c = getattr(t, "configuration", None)
        if c is not None and c.preference is not None:
            return Preference.model_validate(c.preference)
        break
    return task.preference or Preference(name="default")


def episode_prices(trajectory: Any, prices: Mapping[str, Price]) -> Mapping[str, Price]:
    """`prices` (tool name → Price) with the episode's aliases at their episode prices."""
    c = getattr(trajectory, "configuration", None)
    if c is None:
        return prices
    return {**prices, **{t.alias: t.price for t in c.tools}}


# Price bands of a configuration: the geometric mean of its drawn factors on the list price.
_BANDS = ((0.8, "below list (×<0.8)"), (1.25, "near list (×0.8–1.25)"), (math.inf, "above list (×>1.25)"))


def price_band(configuration: Configuration | None) -> str:
    """Which price band a configuration falls in (reports group by it)."""
    if configuration is None:
        return "list prices"
    factors = [t.factor for t in configuration.tools if t.factor is not None]
    if not factors or len(factors) < len(configuration.tools):
        return "drawn prices"
    if any(f <= 0 for f in factors):
        return "free"
    g = math.exp(sum(math.log(f) for f in factors) / len(factors))
    return next(label for bound, label in _BANDS if g < bound)
