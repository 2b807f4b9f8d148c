"""`preference_adherence`: the same tasks rerun under each preference profile, nothing else changed, and how
far accuracy, cost, latency and the tool mix moved."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from orchlib.env import Environment
from orchlib.evaluate.run import evaluate
from orchlib.rollout import RolloutConfig
from orchlib.tasks import Preference, Task

__all__ = ["preference_adherence"]


def preference_adherence(engine, tasks: Sequence[Task], toolbox, profiles: Sequence[str | Preference] =
                         ("accuracy", "thrifty"), config: RolloutConfig | None = None, reward=None,
                         group_size: int = 1, seed: int | None = 0) -> dict[str, Any]:
    """The same tasks under each preference profile, nothing else changed: accuracy, cost, latency and
    tool mix per profile, and their differences from the first profile. `tool_mix_tv` is the total
    variation distance between call shares (0: the policy ignores P; 1: disjoint tool choices).
    A profile name is filled per task by `orchlib.envs.mini.preference_for` ("local-only" puts −1 on
    the task's paid model tools)."""
    from orchlib.envs.mini import preference_for

    cards = _cards(toolbox)
    out: dict[str, Any] = {"profiles": {}, "delta": {}, "reports": {}}
    for prof in profiles:
        pname = prof if isinstance(prof, str) else prof.name
        varied = [t.model_copy(update={"preference": preference_for(prof, t.tools or [c.name for c in cards], cards)
                                       if isinstance(prof, str) else prof}) for t in tasks]
        rep = evaluate(engine, Environment(name=pname, test=varied, tools=toolbox), reward=reward, config=config,
                       group_size=group_size, name=f"{getattr(engine, 'name', 'policy')}@{pname}", seed=seed)
        s = rep.metrics["overall"]
        out["reports"][pname] = rep
        out["profiles"][pname] = {"accuracy": s["accuracy"], "cost_usd": s["cost_usd"], "latency_s": s["latency_s"],
                                  "reward": s["reward"], "tool_share": {k: v["share"] for k, v in s["calls"].items()}}
    names = list(out["profiles"])
    base = out["profiles"][names[0]]
    for other in names[1:]:
        o = out["profiles"][other]
        tools = sorted(set(base["tool_share"]) | set(o["tool_share"]))
        shift = {k: o["tool_share"].get(k, 0.0) - base["tool_share"].get(k, 0.0) for k in tools}
        out["delta"][f"{other}-{names[0]}"] = {
            "accuracy": o["accuracy"] - base["accuracy"], "cost_usd": o["cost_usd"] - base["cost_usd"],
            "latency_s": o["latency_s"] - base["latency_s"], "tool_share": shift,
            "tool_mix_tv": 0.5 * sum(abs(v) for v in shift.values())}
    return out


def _cards(toolbox) -> list:
    cards = getattr(toolbox, "cards", None)
    if cards is None:
        raise TypeError("preference profiles by name need a toolbox with `.cards`")
    return list(cards.values()) if isinstance(cards, Mapping) else list(cards)
