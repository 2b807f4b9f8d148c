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

A group holding NaN or ±inf gives NaN for all its rollouts (never a made-up finite value), so the
reward's final check reports it instead of training on it.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

__all__ = ["GROUP_OPERATORS", "NUMPY_NAMESPACE", "torch_namespace",
           "minmax", "zscore", "rank", "mean"]


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
    ok = spread > 0
    return _poison(x, np.where(ok, (x - lo) / np.where(ok, spread, 1.0), 0.0))


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
        return torch.where(c.to(torch.bool), like(a, c), like(b, c))

    return {
        "minmax": t_minmax, "zscore": t_zscore, "rank": t_rank, "mean": t_mean,
        "_minimum": binary(torch.minimum), "_maximum": binary(torch.maximum), "_where": where,
        "_and": binary(torch.logical_and), "_or": binary(torch.logical_or), "_not": unary(torch.logical_not),
        "_exp": unary(torch.exp), "_log": unary(torch.log), "_abs": unary(torch.abs), "_sqrt": unary(torch.sqrt),
        "_nan": float("nan"),
    }


# name → (numpy implementation, one-line definition); torch versions live in torch_namespace().
GROUP_OPERATORS: dict[str, tuple[Callable[[Any], np.ndarray], str]] = {
    "minmax": (minmax, "(x - min) / (max - min) over the group; 0 where max == min"),
    "zscore": (zscore, "(x - mean) / std over the group (population std); 0 where max == min"),
    "rank": (rank, "average ranks (ties share their mean rank), min-max normalised to [0, 1]; 0 if all tie"),
    "mean": (mean, "the group mean, the same for every rollout"),
}

# What compiled numpy code calls (see compile.py's printer): group operators plus broadcasting
# binary forms of min/max/and/or, so a per-group value (n, 1) meets a per-rollout one (n, G).
NUMPY_NAMESPACE: dict[str, Any] = {
    **{name: fn for name, (fn, _) in GROUP_OPERATORS.items()},
    "_minimum": np.minimum, "_maximum": np.maximum, "_where": np.where,
    "_and": np.logical_and, "_or": np.logical_or, "_not": np.logical_not,
    "_exp": np.exp, "_log": np.log, "_abs": np.abs, "_sqrt": np.sqrt, "_nan": np.nan,
}
