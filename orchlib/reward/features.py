"""What a reward reads: per-rollout numbers from a group, and per-group numbers from P.

A group is the G rollouts of one task, given as `orchlib.trajectory.Trajectory` objects or as plain
mappings with keys `outcome, cost, latency, turns, tokens, calls, errors`. From a Trajectory:

    outcome = t.outcome      cost = t.cost_usd      latency = t.latency_s      turns = t.num_turns
    tokens = t.num_tokens    calls[x] = t.calls.get(x, 0)      errors = t.num_errors

In a mapping `errors` may be a count or a {kind: count} mapping (summed); `calls` is {tool: count}.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from orchlib.reward.errors import RewardValueError
from orchlib.reward.names import FEATURES, P_FIELDS, calls_name, tool_of
from orchlib.tasks import Preference
from orchlib.trajectory import Trajectory

__all__ = ["features", "group_tools", "as_preference", "preference_value", "preference_table", "PreferenceLike"]

PreferenceLike = Preference | Mapping[str, Any] | None


# Where each feature lives on a Trajectory.
_FROM_TRAJECTORY: dict[str, Callable[[Trajectory], float]] = {
    "outcome": lambda t: t.outcome, "cost": lambda t: t.cost_usd, "latency": lambda t: t.latency_s,
    "turns": lambda t: t.num_turns, "tokens": lambda t: t.num_tokens, "errors": lambda t: t.num_errors,
}


def _scalar(rollout: Any, name: str, index: int) -> float:
    if isinstance(rollout, Trajectory):
        return float(_FROM_TRAJECTORY[name](rollout))
    if not isinstance(rollout, Mapping):
        raise RewardValueError(f"rollout {index} of the group is a {type(rollout).__name__}, "
                               f"not a Trajectory or a mapping")
    if name not in rollout:
        raise RewardValueError(f"rollout {index} of the group has no `{name}` (the reward reads it)")
    value = rollout[name]
    if name == "errors" and isinstance(value, Mapping):
        return float(sum(value.values()))
    try:
        return float(value)
    except (TypeError, ValueError) as e:
        raise RewardValueError(f"rollout {index}: `{name}` is not a number ({value!r})") from e


def _calls(rollout: Any, index: int) -> Mapping[str, Any]:
    if isinstance(rollout, Trajectory):
        return rollout.calls
    if not isinstance(rollout, Mapping):
        raise RewardValueError(f"rollout {index} of the group is a {type(rollout).__name__}, "
                               f"not a Trajectory or a mapping")
    calls = rollout.get("calls", {})
    if not isinstance(calls, Mapping):
        raise RewardValueError(f"rollout {index}: `calls` must map tool names to counts, got {calls!r}")
    return calls


def group_tools(group: Sequence[Any]) -> set[str]:
    """Every tool called in some rollout of the group."""
    return {str(tool) for i, r in enumerate(group) for tool in _calls(r, i)}


def features(group: Sequence[Any], names: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """The named per-rollout numbers as float64 arrays of shape (G,).

    `names` are feature names as a reward writes them (`cost`, `calls[gpt-5]`); None gives all six
    scalar features plus `calls[x]` for every tool called in the group.
    """
    group = list(group)
    if names is None:
        names = [*FEATURES, *(calls_name(t) for t in sorted(group_tools(group)))]
    out: dict[str, np.ndarray] = {}
    for name in names:
        tool = tool_of(name)
        if tool is not None:
            column = []
            for i, r in enumerate(group):
                count = _calls(r, i).get(tool, 0)
                try:
                    column.append(float(count))
                except (TypeError, ValueError) as e:
                    raise RewardValueError(f"rollout {i}: calls[{tool}] is not a number ({count!r})") from e
            out[name] = np.array(column, dtype=np.float64)
        elif name in FEATURES:
            out[name] = np.array([_scalar(r, name, i) for i, r in enumerate(group)], dtype=np.float64)
        else:
            raise RewardValueError(f"`{name}` is not a feature (features: {', '.join(FEATURES)}, calls[x])")
    return out


def as_preference(P: PreferenceLike, default: Preference) -> Preference:
    """A Preference from a Preference, a dict of the same shape, or None (the default).

    An empty dict counts as None: `Trajectory.preference` is `{}` when the task carried no P.
    """
    if P is None or (isinstance(P, Mapping) and not P):
        return default
    if isinstance(P, Preference):
        return P
    if isinstance(P, Mapping):
        try:
            return Preference.model_validate(dict(P))
        except ValueError as e:
            raise RewardValueError(f"P is not a preference (outcome, cost, latency, tools, extra): {e}") from e
    raise RewardValueError(f"P must be a Preference, a mapping or None, not {type(P).__name__}")


def preference_value(P: Preference, name: str, default: Preference) -> float:
    """The value of `P.<field>`, `P.tools[x]` (0 when absent) or a user-named `P.<entry>`.

    A user-named entry missing from P is taken from the reward's default preference; missing from
    both it is an error rather than a silent 0 (a budget of 0 would zero every reward).
    """
    field = name[2:]
    tool = tool_of(name)
    if tool is not None:
        return float(P.tools.get(tool, 0.0))
    if field in P_FIELDS:
        return float(getattr(P, field))
    if field in P.extra:
        return float(P.extra[field])
    if field in default.extra:
        return float(default.extra[field])
    raise RewardValueError(f"the reward reads {name} but neither P nor the reward's default preference "
                           f"has an entry `{field}` (set it in P.extra)")


def _getter(name: str, default: Preference) -> Callable[[Preference], float]:
    tool, field = tool_of(name), name[2:]
    if tool is not None:
        return lambda p: p.tools.get(tool, 0.0)
    if field in P_FIELDS:
        return lambda p: getattr(p, field)
    return lambda p: p.extra[field] if field in p.extra else preference_value(p, name, default)


def preference_table(prefs: Sequence[Preference], names: Sequence[str], default: Preference) -> np.ndarray:
    """`preference_value` for every (preference, name): float64 array (len(prefs), len(names))."""
    getters = [_getter(n, default) for n in names]
    return np.array([[g(p) for g in getters] for p in prefs], dtype=np.float64).reshape(len(prefs), len(names))
