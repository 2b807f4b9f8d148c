"""Group operators and the elementwise functions compiled rewards call, for numpy and for torch.

A group is the G rollouts of one task; arrays are shaped (n_groups, G) and every group operator acts
along the last axis. A group operator sees only its own group, so groups are independent.

Definitions (x is one group's values, G of them):

- `minmax(x)` = (x − min x) / (max x − min x); 0 for every rollout when max x == min x.
- `zscore(x)` = (x − mean x) / std x with the population std (ddof=0); 0 when max x == min x.
  (Equality is tested on max/min, not std == 0: the mean of eight copies of 0.1 is not exactly 0.1,
  so the std of a constant group can come out as 1e-17 and would turn rounding noise into ±1.)
- `rank(x)` = minmax of the average ranks: rank 1 is the smallest value, tied values share the mean
  of their ranks, then the ranks are min-max normalised. Without ties this is (r − 1)/(G − 1) ∈ [0, 1];
  the smallest value always gets 0, the largest 1, and a group of equal values gets 0.
- `mean(x)` = the group's mean, the same for every rollout.
- `max(x)`, `min(x)`, `sum(x)` = the group's largest value, smallest value and total, the same for
  every rollout; `count(c)` = how many rollouts of the group have c non-zero (c true).

A group holding NaN or ±inf gives NaN for all its rollouts (never a made-up finite value), so the
reward's final check reports it instead of training on it.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

__all__ = ["GROUP_OPERATORS", "NUMPY_NAMESPACE", "torch_namespace",
           "minmax", "zscore", "rank", "mean", "group_max", "group_min", "group_sum", "count"]


def _group(x: Any) -> np.ndarray:
    # Constants and per-group values (shape (n, 1) or ()) are groups of equal values.
    return np.atleast_1d(np.asarray(x, dtype=np.float64))


def _poison(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    bad = ~np.isfinite(x).all(axis=-1, keepdims=True)
    return np.where(bad, np.nan, out) if bad.any() else out


def minmax(x: Any) -> np.ndarray:
    x = _group(x)
    lo, hi = x.min(axis=-1, keepdims=True), x.max(axis=-1, keepdims=True)
    spread = hi - lo
    # Where max == min every x - lo is exactly 0, so dividing by 1 there gives the 0 we want.
    out = (x - lo) / np.where(spread > 0, spread, 1.0)  # divided, not times 1/spread: max maps to 1 exactly
    # min/max carry a NaN or an infinity of the group into `spread`: a check on (n, 1), not on (n, G).
    finite = np.isfinite(spread)
    return out if finite.all() else np.where(finite, out, np.nan)


def zscore(x: Any) -> np.ndarray:
    x = _group(x)
    sd = x.std(axis=-1, keepdims=True)
    ok = (x.max(axis=-1, keepdims=True) > x.min(axis=-1, keepdims=True)) & (sd > 0)
    return _poison(x, np.where(ok, (x - x.mean(axis=-1, keepdims=True)) / np.where(ok, sd, 1.0), 0.0))


def _average_ranks(x: np.ndarray) -> np.ndarray:
    # Pairwise comparison, O(G²) per group: G is small (8–64) and this stays fully vectorised.
    below = (x[..., None, :] < x[..., :, None]).sum(axis=-1)
    ties = (x[..., None, :] == x[..., :, None]).sum(axis=-1)  # counts the element itself
    return below + (ties + 1) / 2.0


def rank(x: Any) -> np.ndarray:
    x = _group(x)
    return _poison(x, minmax(_average_ranks(x)))


def mean(x: Any) -> np.ndarray:
    x = _group(x)
    return x.mean(axis=-1, keepdims=True)


def group_max(x: Any) -> np.ndarray:
    return _group(x).max(axis=-1, keepdims=True)  # NaN propagates through max/min/sum


def group_min(x: Any) -> np.ndarray:
    return _group(x).min(axis=-1, keepdims=True)


# `sum` and `count` depend on how many rollouts share a value. A value the same for the whole group
# arrives with a last axis of 1 ((n, 1), e.g. `mean(x) > 0`), so the group size G is passed in.

def group_sum(x: Any, G: float | None = None) -> np.ndarray:
    x = _group(x)
    if G is not None and x.shape[-1] == 1:
        return x * G
    return x.sum(axis=-1, keepdims=True)


def count(x: Any, G: float | None = None) -> np.ndarray:
    x = _group(x)
    width = G if G is not None and x.shape[-1] == 1 else 1.0
    return _poison(x, (x != 0).sum(axis=-1, keepdims=True) * float(width))


# --- conditions ---------------------------------------------------------------------------------
# A condition is a float array: 1 true, 0 false, NaN when it compares a NaN or an infinity. A NaN
# condition makes `where` NaN, so the final check reports it: with plain booleans `nan >= 1` would
# be False and `where(outcome >= 1, ..., 0)` would score a NaN outcome 0 without a word.

def _comparison(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], np.ndarray]:
    def compare(a: Any, b: Any) -> np.ndarray:
        return np.where(np.isfinite(a) & np.isfinite(b), op(a, b), np.nan)
    return compare


def _where(c: Any, a: Any, b: Any) -> np.ndarray:
    out = np.where(np.asarray(c) != 0, a, b)
    return np.where(np.isnan(c), np.nan, out) if np.isnan(c).any() else out


def _and(a: Any, b: Any) -> Any:
    return a * b            # 1·1 = 1, anything with 0 is 0, NaN stays NaN


def _or(a: Any, b: Any) -> Any:
    return np.maximum(a, b)  # np.maximum propagates NaN


def _not(a: Any) -> Any:
    return 1.0 - a


def _toolsum(body: Callable[..., Any], *per_tool: Any) -> Any:
    """sum over tools: `body` called on each tool's values (numpy or torch alike); 0 for no tools."""
    total: Any = 0.0
    for values in zip(*per_tool):
        total = total + body(*values)
    return total


# --- torch --------------------------------------------------------------------------------------

def torch_namespace() -> dict[str, Any]:
    """The same operators for torch tensors (float64), imported only when a torch reward is asked for."""
    import torch

    def t(x: Any) -> "torch.Tensor":
        return x if isinstance(x, torch.Tensor) else torch.as_tensor(x, dtype=torch.float64)

    def group(x: Any) -> "torch.Tensor":
        x = t(x).to(torch.float64)
        return x.reshape(1) if x.dim() == 0 else x

    def poison(x: "torch.Tensor", out: "torch.Tensor") -> "torch.Tensor":
        bad = ~torch.isfinite(x).all(dim=-1, keepdim=True)
        return torch.where(bad, torch.full_like(out, float("nan")), out)

    def t_minmax(x: Any) -> "torch.Tensor":
        x = group(x)
        lo, hi = x.amin(dim=-1, keepdim=True), x.amax(dim=-1, keepdim=True)
        spread = hi - lo
        ok = spread > 0
        out = torch.where(ok, (x - lo) / torch.where(ok, spread, torch.ones_like(spread)), torch.zeros_like(x))
        return poison(x, out)

    def t_zscore(x: Any) -> "torch.Tensor":
        x = group(x)
        sd = x.std(dim=-1, keepdim=True, unbiased=False)
        ok = (x.amax(dim=-1, keepdim=True) > x.amin(dim=-1, keepdim=True)) & (sd > 0)
        z = (x - x.mean(dim=-1, keepdim=True)) / torch.where(ok, sd, torch.ones_like(sd))
        return poison(x, torch.where(ok, z, torch.zeros_like(x)))

    def t_rank(x: Any) -> "torch.Tensor":
        x = group(x)
        below = (x[..., None, :] < x[..., :, None]).sum(dim=-1)
        ties = (x[..., None, :] == x[..., :, None]).sum(dim=-1)
        return poison(x, t_minmax(below.to(torch.float64) + (ties.to(torch.float64) + 1) / 2.0))

    def t_mean(x: Any) -> "torch.Tensor":
        return group(x).mean(dim=-1, keepdim=True)

    def t_max(x: Any) -> "torch.Tensor":
        return group(x).amax(dim=-1, keepdim=True)

    def t_min(x: Any) -> "torch.Tensor":
        return group(x).amin(dim=-1, keepdim=True)

    def t_sum(x: Any, G: float | None = None) -> "torch.Tensor":
        x = group(x)
        return x * G if G is not None and x.shape[-1] == 1 else x.sum(dim=-1, keepdim=True)

    def t_count(x: Any, G: float | None = None) -> "torch.Tensor":
        x = group(x)
        width = G if G is not None and x.shape[-1] == 1 else 1.0
        return poison(x, (x != 0).sum(dim=-1, keepdim=True).to(torch.float64) * float(width))

    def like(x: Any, other: Any) -> "torch.Tensor":
        # A constant from the printed code joins a tensor on that tensor's device (GPU included).
        if isinstance(x, torch.Tensor):
            return x
        if isinstance(other, torch.Tensor):
            return torch.as_tensor(x, dtype=torch.float64, device=other.device)
        return t(x)

    def binary(f: Callable) -> Callable:
        return lambda a, b: f(like(a, b), like(b, a))

    def unary(f: Callable) -> Callable:
        return lambda a: f(t(a))

    def where(c: Any, a: Any, b: Any) -> "torch.Tensor":
        c = like(c, a if isinstance(a, torch.Tensor) else b)
        a, b = like(a, c), like(b, c)
        out = torch.where(c != 0, a, b)
        return torch.where(torch.isnan(c), torch.full_like(out, float("nan")), out)

    def comparison(op: Callable) -> Callable:
        def compare(a: Any, b: Any) -> "torch.Tensor":
            a, b = like(a, b), like(b, a)
            ok = torch.isfinite(a) & torch.isfinite(b)
            return torch.where(ok, op(a, b).to(torch.float64), torch.full_like(ok, float("nan"), dtype=torch.float64))
        return compare

    return {
        **{f"_group_{name}": fn for name, fn in [("minmax", t_minmax), ("zscore", t_zscore), ("rank", t_rank),
                                                 ("mean", t_mean), ("max", t_max), ("min", t_min),
                                                 ("sum", t_sum), ("count", t_count)]},
        "_minimum": binary(torch.minimum), "_maximum": binary(torch.maximum), "_where": where,
        "_and": binary(torch.mul), "_or": binary(torch.maximum), "_not": lambda a: 1.0 - t(a),
        "_lt": comparison(torch.lt), "_le": comparison(torch.le), "_gt": comparison(torch.gt),
        "_ge": comparison(torch.ge), "_eq": comparison(torch.eq), "_ne": comparison(torch.ne),
        "_exp": unary(torch.exp), "_log": unary(torch.log), "_abs": unary(torch.abs), "_sqrt": unary(torch.sqrt),
        "_sin": unary(torch.sin), "_cos": unary(torch.cos), "_toolsum": _toolsum,
        "_nan": float("nan"),
    }


# name → (numpy implementation, one-line definition); torch versions live in torch_namespace().
GROUP_OPERATORS: dict[str, tuple[Callable[[Any], np.ndarray], str]] = {
    "minmax": (minmax, "(x - min) / (max - min) over the group; 0 where max == min"),
    "zscore": (zscore, "(x - mean) / std over the group (population std); 0 where max == min"),
    "rank": (rank, "average ranks (ties share their mean rank), min-max normalised to [0, 1]; 0 if all tie"),
    "mean": (mean, "the group mean, the same for every rollout"),
    "max": (group_max, "the group's largest value, the same for every rollout"),
    "min": (group_min, "the group's smallest value, the same for every rollout"),
    "sum": (group_sum, "the group's total, the same for every rollout"),
    "count": (count, "how many rollouts of the group have the condition true (non-zero)"),
}

# What compiled numpy code calls (see compile.py's printer): group operators (`_group_<name>`, so
# `max` never shadows a builtin), broadcasting binary min/max so a per-group value (n, 1) meets a
# per-rollout one (n, G), conditions as 1/0/NaN floats, and `_toolsum` for sums over tools.
NUMPY_NAMESPACE: dict[str, Any] = {
    **{f"_group_{name}": fn for name, (fn, _) in GROUP_OPERATORS.items()},
    "_minimum": np.minimum, "_maximum": np.maximum, "_where": _where, "_and": _and, "_or": _or, "_not": _not,
    "_lt": _comparison(np.less), "_le": _comparison(np.less_equal), "_gt": _comparison(np.greater),
    "_ge": _comparison(np.greater_equal), "_eq": _comparison(np.equal), "_ne": _comparison(np.not_equal),
    "_exp": np.exp, "_log": np.log, "_abs": np.abs, "_sqrt": np.sqrt, "_sin": np.sin, "_cos": np.cos,
    "_toolsum": _toolsum, "_nan": np.nan,
}
