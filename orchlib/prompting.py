"""How a task becomes the orchestrator's prompt: the system turn (instructions, the tools, the user's
preference P), then the task, rendered with the tokenizer's chat template, ready to generate.

What is rendered is the run's `RolloutConfig` (`orchlib.rollout`): `system_prompt`, `tool_schema`
(how the tools are listed), `show_preference`, `preference_style` and `preference_at` (whether, how and
where P is shown), `price_order` and `price_order_at` (a line of the tools' names by price, and where),
`evidence_order` (a line per kind of question naming the tools from most often right to least).
The rollout encodes `render_prompt`'s text once per task; the API policies, which take messages, get the
same system text and user message (`preference_line`, `user_message`).
This module sits below the loop: it reads a config object and knows no engine.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from orchlib.chat import IM_END, template_renders_tools, tools_block
from orchlib.tasks import Preference, Task

__all__ = ["DEFAULT_SYSTEM_PROMPT", "render_prompt", "tool_schemas", "shown_preference", "preference_line",
           "user_message", "assistant_prefix", "name_list", "price_order_line", "evidence_order_lines", "kind_line",
           "PRICE_ORDER_OPENING", "EVIDENCE_ORDER_OPENING", "KIND_OPENING"]

DEFAULT_SYSTEM_PROMPT = ("You are an orchestrator. Solve the task by calling tools, or answer directly. "
                         "Weigh accuracy, cost and latency as the user prefers.")


def shown_preference(task: Task) -> Preference:
    """The P the policy reads in its prompt. A task without one is shown the "default" profile, and its
    rewards (training and evaluation alike) weigh that P, not the reward file's own default."""
    return task.preference or Preference(name="default")


def preference_line(task: Task, config: Any) -> str:
    """P as the policy reads it: `shown_preference`'s line in `config.preference_style`."""
    p = shown_preference(task)
    style, words = config.preference_style, config.preference_words.get(p.name)
    # "words" drops the weights only where words were written for the profile: a P without them (a sweep's
    # grid point) keeps its weights, which the generated sentences (one per sign) cannot say
    return p.render(weights=style != "name", instruction=style in ("instruction", "words"), words=words,
                    vector=style != "words" or words is None)


def user_message(task: Task, config: Any, tools: list[dict] | None = None) -> str:
    """The user turn: the task, then its kind when `show_kind`, then P when `preference_at="user"`, then the
    price-order line of `tools` when `price_order_at="user"`."""
    text = task.prompt
    if config.show_kind:
        text += "\n" + kind_line(task)
    if config.show_preference and config.preference_at == "user":
        text += "\n\n" + preference_line(task, config)
    if _order_line_at(config, tools) == "user":
        text += "\n" + price_order_line(tools, config.quote_names)
    return text


KIND_OPENING = "Kind of question: "


def kind_line(task: Task) -> str:
    """The task's kind, as the evidence lines name it ("Kind of question: gsm8k.", `evidence_order_lines`)."""
    return f"{KIND_OPENING}{task.category}."


def _order_line_at(config: Any, tools: list[dict] | None) -> str | None:
    """Where the price-order line is rendered ("system" or "user"), or None when there is none."""
    if not config.price_order or not tools or len(tools) < 2:
        return None
    return config.price_order_at


def render_prompt(task: Task, tools: list[dict], tokenizer, config: Any) -> str:
    """The first prompt: system turn (instructions, tools, the task's P) + the task, ready to generate
    (`preference_at="user"`: P follows the task instead; `"assistant"`: P opens the orchestrator's turn,
    a prefix it continues, as a prefilled reply is continued)."""
    system = config.system_prompt
    if config.show_preference and config.preference_at == "system":
        system += "\n" + preference_line(task, config)
    notes = ""
    if config.tool_schema == "brief" and tools:
        # listed as 'compact' lists them, the descriptions below the list, one line each: a policy that learned
        # its calls from 'compact' lines copies a line whole, a description inside it too
        notes = "\nWhat the tools are:" + "".join(f"\n{t['name']}: {' '.join(str(t.get('description', '')).split())}"
                                                  for t in tools)
    if config.evidence_order:  # after the descriptions, before the price line
        notes += "".join("\n" + line for line in evidence_order_lines(tools, config.quote_names))
    if _order_line_at(config, tools) == "system":  # after the list (and the descriptions), the turn's last line
        notes += "\n" + price_order_line(tools, config.quote_names)
    user = user_message(task, config, tools)
    tools = [{k: v for k, v in t.items() if k not in ("description", "call_price", "evidence")} for t in tools]
    if tools and not template_renders_tools(tokenizer):  # the template would drop them: list them ourselves
        system, tools = system + tools_block(tools), []
    system += notes
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    text = tokenizer.apply_chat_template(msgs, tools=tools or None, tokenize=False, add_generation_prompt=True)
    if config.show_preference and config.preference_at == "system_end":
        end = text.find(IM_END)
        if end < 0:
            raise ValueError(f'preference_at="system_end" needs a chat template whose system turn ends in {IM_END}')
        text = text[:end] + "\n" + preference_line(task, config) + text[end:]
    return text + assistant_prefix(task, config)


PRICE_ORDER_OPENING = "From the cheapest per call to the dearest: "


def name_list(names: Iterable[str], quoted: bool = False) -> str:
    """Names for an order line, comma-separated: as they are (`atlas, lyra`), or (`quoted`) each in quotes as
    a call writes it (`"atlas", "lyra"`).

    Why quotes: a tokenizer may cut a name after a space differently from after a quote (SmolLM2 has
    " atlas" as one token, where a call's `"atlas"` is "at" + "las"), and a policy that copies the name from
    a plain line then starts a piece no call of that name uses; in quotes the line and the call share their
    pieces."""
    return ", ".join(json.dumps(n, ensure_ascii=False) if quoted else n for n in names)  # as render_call writes it


def price_order_line(tools: list[dict], quoted: bool = False) -> str:
    """The offered tools' names from the cheapest per call to the dearest (`tool_schemas`' compact and brief
    entries carry each one's `call_price`; equal prices keep the list's order).

    Why a line of names: a small policy copies a name from a fixed place in its prompt (the first name
    after this line's opening, or the last) far more surely than it compares `$0.73` with `$5.9`; the
    order is the prices', so copying from it is reading them, whatever names and list order an episode
    draws."""
    ranked = sorted(tools, key=lambda t: t["call_price"])  # stable: ties keep the list's order
    return PRICE_ORDER_OPENING + name_list((t["name"] for t in ranked), quoted) + "."


EVIDENCE_ORDER_OPENING = "Most often right on "


def evidence_order_lines(tools: list[dict], quoted: bool = False) -> list[str]:
    """A line per kind of question that two or more of the offered tools were measured on, naming them from
    the most often right to the least (`tool_schemas`' compact and brief entries carry each one's measured
    success per category as `evidence`, from its card's `auto_description`; equal rates keep the list's
    order): "Most often right on gsm8k: atlas, lyra, vega." Kinds in alphabetical order.

    Why lines of names: as with the prices (`price_order_line`), a small policy copies the first name after
    a fixed opening far more surely than it finds its question's kind in each tool's description and
    compares `80%` with `45%` across them; the order is the evidence's, so copying from the line of the
    question's kind is reading the evidence, whatever names and list order an episode draws. A tool with no
    evidence for a kind is left out of that kind's line: nothing is said of it."""
    kinds = sorted({k for t in tools for k in (t.get("evidence") or {})})
    lines = []
    for kind in kinds:
        measured = [t for t in tools if kind in (t.get("evidence") or {})]
        if len(measured) < 2:  # one tool's rate orders nothing
            continue
        ranked = sorted(measured, key=lambda t: -t["evidence"][kind])  # stable: ties keep the list's order
        lines.append(f"{EVIDENCE_ORDER_OPENING}{kind}: " + name_list((t["name"] for t in ranked), quoted) + ".")
    return lines


def assistant_prefix(task: Task, config: Any) -> str:
    """What the first prompt holds of the orchestrator's own turn: the P line when
    `preference_at="assistant"`, else nothing."""
    if config.show_preference and config.preference_at == "assistant":
        return preference_line(task, config) + "\n"
    return ""


def tool_schemas(toolbox, task: Task, style: str = "full") -> list[dict]:
    """The tools a task offers, as listed to the policy (see RolloutConfig.tool_schema)."""
    schemas = toolbox.schemas()
    if task.tools is not None:
        allowed = set(task.tools)
        schemas = [s for s in schemas if s["function"]["name"] in allowed]
    if style in ("compact", "brief"):
        return [{"name": s["function"]["name"],
                 "arguments": list(s["function"].get("parameters", {}).get("properties", {})),
                 # for `price_order_line`; render_prompt shows neither key as such
                 "call_price": _call_price(toolbox, s["function"]["name"]),
                 **({"description": s["function"].get("description", "")} if style == "brief" else {}),
                 **_evidence(toolbox, s["function"]["name"])}
                for s in schemas]
    return schemas


def _evidence(toolbox, name: str) -> dict:
    """{"evidence": {category: success rate}} from the card's `auto_description` (`orchlib.describe`), for
    `evidence_order_lines`; {} for a card never described."""
    auto = toolbox[name].card.auto_description or {}
    rates = {c: float(s["success_rate"]) for c, s in (auto.get("categories") or {}).items()
             if isinstance(s, dict) and isinstance(s.get("success_rate"), (int, float))}
    return {"evidence": rates} if rates else {}


def _call_price(toolbox, name: str) -> float:
    from orchlib.cards.costs import price_per_call

    card = toolbox[name].card
    return price_per_call(card.price, card.latency)
