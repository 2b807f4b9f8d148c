"""Order drills: short supervised examples that teach a policy trained from scratch to copy a tool's name
from the price-order line, the one P asks for.

A policy that has never copied a name cannot read a configuration: given aliases that change per episode,
the ~1 M-parameter tiny policy, trained on golden trajectories in the orchestration format alone, writes
names it has seen (`tool_sugo` for the offered `tool_segu`) and makes no well-formed call on held-out
names. Copying a name is learned first on a prompt a quarter as long: the system turn holds only P's line
and the line `RolloutConfig(price_order=True)` shows (`orchlib.prompting.price_order_line`), with names
drawn fresh per drill from thousands, so none can be learned by heart. The name the drill asks for is
the one P's words decide: the cheapest under "thrifty", the dearest under "accuracy". None of it is a
task's question, so no drill shows which backend a category's P calls for.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass
from typing import Any, Callable, Collection, Literal, Sequence

from pydantic import ConfigDict, Field

from orchlib.chat import IM_END, render_assistant
from orchlib.configurations import generated_names
from orchlib.prompting import price_order_line
from orchlib.settings import Settings
from orchlib.tasks import PROFILES
from orchlib.train.sft import SFTConfig, SFTExample
from orchlib.trajectory import ToolCall

__all__ = ["OrderDrillConfig", "drill_order", "OrderDrill", "order_drills", "order_drill_prompt",
           "order_drill_examples", "order_drill_accuracy", "DRILL_PROFILES", "DRILL_SIZES", "gate_with_margin",
           "call_example", "exact_call_share", "drill_to_gate"]

DRILL_PROFILES = ("accuracy", "thrifty")  # the profiles whose words name an end of the order line
DRILL_SIZES = (2, 2, 3)  # names per drill, one drawn per drill: the orchestra worlds offer two or three tools


class OrderDrillConfig(Settings):
    """Order drills before a warm start (`RunConfig.order_drills`): SFT on `n` drills until `gate` of
    `held_out` more (on names a test never shows) are answered exactly, then `margin_steps` more."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    n: int = Field(4000, ge=1, description="drills to train on, ~85 ids each with the tiny policy's tokenizer")
    held_out: int = Field(64, ge=1, description="drills the gate measures, their names among the held-out ones")
    gate: float = Field(0.95, ge=0, le=1, description="share of held-out drills answered exactly (greedy) that ends "
                                                      "the drills; the tiny policy reached it after 1,200-1,850 steps")
    margin_steps: int = Field(50, ge=0, description="steps more after the gate: copying appears abruptly")
    check_every: int = Field(50, ge=1, description="steps between two measures of the gate")
    first_check: int | None = Field(None, ge=1, description="step of the first measure (none: `check_every`): "
                                    "a measure before the drills can pass costs as much as several steps")
    seed: int = Field(0, description="seeds the drills' draw and the SFT")
    sft: SFTConfig = Field(
        default_factory=lambda: SFTConfig(max_steps=2000, batch_size=16, learning_rate=1e-3, schedule="constant",
                                          warmup_fraction=0.02),
        description="the drills' SFT; max_steps is its budget if the gate is never met. A constant 1e-3: at 3e-3 "
                    "the tiny policy had copied no name after 1,300 steps")


@dataclass(frozen=True)
class OrderDrill:
    """P's profile name and the offered names from the cheapest per call to the dearest."""

    profile: str
    names: tuple[str, ...]

    @property
    def answer(self) -> str:
        """The name P asks for: the cheapest under "thrifty", the dearest under "accuracy"."""
        return self.names[0] if self.profile == "thrifty" else self.names[-1]


def order_drills(seed: int, n: int, exclude: Collection[str] = (),
                 sizes: Sequence[int] = DRILL_SIZES) -> list[OrderDrill]:
    """`n` drills, each under a profile of DRILL_PROFILES and offering `sizes`-many names (one drawn per
    drill), the names drawn from the generated ones (`orchlib.configurations.generated_names`) less
    `exclude` (the held-out names a test shows), so the drills never show a name the test measures."""
    if n < 0:
        raise ValueError(f"order_drills: n must be at least 0, not {n}")
    excluded = set(exclude)
    pool = [name for name in generated_names(4900) if name not in excluded]
    return _draw(random.Random(f"order-drills:{seed}"), pool, n, sizes)


def _draw(rng: random.Random, pool: Sequence[str], n: int, sizes: Sequence[int]) -> list[OrderDrill]:
    if not sizes or min(sizes) < 2 or max(sizes) > len(pool):
        raise ValueError(f"order_drills: each size must be from 2 to {len(pool)} (the names left), not {list(sizes)}")
    return [OrderDrill(rng.choice(DRILL_PROFILES), tuple(rng.sample(pool, rng.choice(sizes)))) for _ in range(n)]


def order_drill_prompt(drill: OrderDrill, tokenizer, at: Literal["system", "user"] = "system",
                       quoted: bool = False) -> str:
    """The drill's prompt through the chat template, ready to generate: P's line and the order line in the
    system turn and a bare request in the user turn, or (`at="user"`, as `RolloutConfig(price_order_at=
    "user")` renders a task) the request, then P's line and the order line, all in the user turn; `quoted`:
    the names in quotes, as `RolloutConfig(quote_names=True)` writes them (`orchlib.prompting.name_list`)."""
    # the rollout's own line, the drill's names ranked as if priced in their order
    ranked = [{"name": name, "call_price": rank} for rank, name in enumerate(drill.names)]
    lines = PROFILES[drill.profile].render(weights=True) + "\n" + price_order_line(ranked, quoted)
    if at == "user":
        msgs = [{"role": "user", "content": "Call one tool.\n\n" + lines}]
    elif at == "system":
        msgs = [{"role": "system", "content": lines}, {"role": "user", "content": "Call one tool."}]
    else:
        raise ValueError(f'order drills: at must be "system" or "user", not {at!r}')
    return tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)


def call_example(prompt: str, name: str, tokenizer) -> SFTExample:
    """A drill's SFT example: `prompt`, then the call of `name` with no arguments, the loss on the call alone."""
    head = tokenizer.encode(prompt, add_special_tokens=False)
    reply = tokenizer.encode(render_assistant("", [ToolCall(name=name)]) + IM_END, add_special_tokens=False)
    return SFTExample(head + reply, [0] * len(head) + [1] * len(reply))


def exact_call_share(engine, prompts: Sequence[str], answers: Sequence[str], max_new_tokens: int = 32) -> float:
    """Greedy: the share of `prompts` whose reply calls exactly their answer's name (and nothing else)."""
    from orchlib.chat import parse_tool_calls
    from orchlib.engines import SamplingParams

    if not prompts:
        return float("nan")
    tok = engine.tokenizer
    ids = [tok.encode(p, add_special_tokens=False) for p in prompts]
    outs = engine.generate(ids, SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0),
                           stop_ids=[tok.convert_tokens_to_ids(IM_END)]).outputs
    right = 0
    for answer, o in zip(answers, outs):
        try:
            calls = parse_tool_calls(tok.decode(o.ids).removesuffix(IM_END))[1]
        except ValueError:
            continue
        right += [c.name for c in calls] == [answer]
    return right / len(prompts)


def order_drill_examples(drills: Sequence[OrderDrill], tokenizer, at: Literal["system", "user"] = "system",
                         quoted: bool = False) -> list:
    """SFT examples: each drill's prompt, then the call of its answer, the loss on the call alone."""
    return [call_example(order_drill_prompt(d, tokenizer, at, quoted), d.answer, tokenizer) for d in drills]


def order_drill_accuracy(engine, drills: Sequence[OrderDrill], max_new_tokens: int = 32,
                         at: Literal["system", "user"] = "system", quoted: bool = False) -> float:
    """Greedy: the share of `drills` (prompted as `order_drill_prompt(..., at, quoted)`) whose reply calls
    exactly their answer (and nothing else)."""
    return exact_call_share(engine, [order_drill_prompt(d, engine.tokenizer, at, quoted) for d in drills],
                            [d.answer for d in drills], max_new_tokens)


def gate_with_margin(measure: Callable[[], float], gate: float, margin_steps: int, every: int) -> Callable[[], bool]:
    """An `sft_train(until=...)` check, called every `every` steps: False until `measure()` first reaches
    `gate`, then True once `margin_steps` more steps have run. Ending at the gate itself left the phases
    after it on the edge of an abrupt transition, and where that edge fell turned on float rounding."""
    state = {"calls": 0, "met_at": None}

    def until() -> bool:
        state["calls"] += 1
        if state["met_at"] is None and measure() >= gate:
            state["met_at"] = state["calls"]
        return state["met_at"] is not None and (state["calls"] - state["met_at"]) * every >= margin_steps

    return until


def drill_order(model, tokenizer, config: OrderDrillConfig, exclude: Collection[str] = (),
                progress: bool = True, at: Literal["system", "user"] = "system",
                quoted: bool = False) -> dict[str, Any]:
    """Train `model` in place on `config.n` order drills until the gate (see OrderDrillConfig); `exclude`:
    names the drills must not show (a test's held-out aliases), which the held-out drills are drawn from
    instead; `at`: where the drills' lines go (`order_drill_prompt`), as the run's rollout places the order
    line, and `quoted`: whether they quote the names, as the rollout's `quote_names` does. Returns {"steps",
    "accuracy" (held-out, at the end), "checks", "seconds"} (`drill_to_gate`)."""
    import time

    from orchlib.engines import TransformersEngine

    t0 = time.perf_counter()
    exclude = set(exclude)
    drills = order_drills(config.seed, config.n, exclude)
    if len(exclude) >= 3:  # the gate measures names training never showed, as a held-out test does
        held = _draw(random.Random(f"order-drills:held-out:{config.seed}"), sorted(exclude), config.held_out,
                     DRILL_SIZES)
    else:
        held = order_drills(config.seed + 1, config.held_out)
    engine = TransformersEngine(model, tokenizer, seed=config.seed)
    return drill_to_gate(model, tokenizer, order_drill_examples(drills, tokenizer, at, quoted), config,
                         lambda: order_drill_accuracy(engine, held, at=at, quoted=quoted), "order drills", progress, t0)


def drill_to_gate(model, tokenizer, examples: Sequence[SFTExample], config, measure: Callable[[], float], desc: str,
                  progress: bool, t0: float) -> dict[str, Any]:
    """SFT on a drill's `examples` (`config.sft`, seeded by `config.seed`) until `measure()` reaches
    `config.gate`, then exactly `config.margin_steps` more, measured at step `config.first_check` (none:
    `config.check_every`) and every `config.check_every` steps after it. Returns {"steps", "accuracy"
    (`measure()` at the end), "checks" ([step, measure()] of every measure, the last at the end: the drills'
    learning curve), "seconds" (since `t0`)}. A measure greedy-decodes every held-out drill, as dear as
    several steps on a real model, so none is taken after the gate but the one at the end, and that one
    only if a step ran after the last."""
    import time

    from orchlib.train.sft import sft_train

    checks: list[list[float]] = []
    first = config.first_check or config.check_every
    steps_run = itertools.count(1)

    def measured() -> float:  # asked after every step until the gate is met; measures on the check steps only
        step = next(steps_run)
        if step < first or (step - first) % config.check_every:
            return -math.inf
        checks.append([float(step), measure()])
        return checks[-1][1]

    until = gate_with_margin(measured, config.gate, config.margin_steps, every=1)  # exact margin, in steps
    report = sft_train(model, tokenizer, examples, config.sft.model_copy(update={"seed": config.seed}),
                       progress=progress, until=until, check_every=1, desc=desc)  # ends in eval mode
    steps = float(len(report.losses))
    if not checks or checks[-1][0] != steps:
        checks.append([steps, measure()])
    return {"steps": steps, "accuracy": checks[-1][1], "checks": checks, "seconds": time.perf_counter() - t0}
