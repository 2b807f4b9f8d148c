"""Which episodes fall under which feature of their tool configuration (orchlib.configurations), so the
metrics can be read per feature beside the aggregate: the space an episode drew from, whether its
configuration holds parts training never showed, its price band, and each backend it offered (an
episode counts under every backend behind one of its aliases)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

from orchlib.configurations import price_band

__all__ = ["configuration_groups", "FEATURES"]

FEATURES: tuple[str, ...] = ("space", "held_out", "price_band", "backend")


def configuration_groups(trajectories: Sequence[Any]) -> dict[str, dict[str, list[int]]]:
    """feature → value → indices of the trajectories with it; {} when no trajectory has a configuration
    (the metrics of a run without configurations stay as they were)."""
    if not any(getattr(t, "configuration", None) is not None for t in trajectories):
        return {}
    out: dict[str, dict[str, list[int]]] = {f: defaultdict(list) for f in FEATURES}
    for i, t in enumerate(trajectories):
        c = getattr(t, "configuration", None)
        out["space"][c.space or "unnamed" if c is not None else "none"].append(i)
        out["held_out"]["held-out: " + "+".join(c.held_out) if c is not None and c.held_out else "seen"].append(i)
        out["price_band"][price_band(c)].append(i)
        for backend in dict.fromkeys(o.backend for o in c.tools) if c is not None else ():
            out["backend"][backend].append(i)
    return {f: dict(sorted(by.items())) for f, by in out.items()}
