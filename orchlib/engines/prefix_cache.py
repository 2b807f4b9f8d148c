"""Keys and values of earlier sequences, kept so a later prompt that extends one is not re-prefilled.

A multi-turn rollout sends the engine, at every turn, the whole conversation so far: the previous
prompt, the ids it sampled, then the tool's observation. Without reuse each turn recomputes the
attention keys and values of the entire context; with it, only the observation segment is new.
(vLLM calls this automatic prefix caching; the rollout sees the same token-in, token-out interface.)

Entries are per sequence: per layer, keys and values of shape (heads, length, head_dim). They are
valid only for the weights that computed them, where they were, so every entry records
`weights_version(model)` — the sum of the parameters' in-place version counters, which any optimiser
step or `load_state_dict` bumps, and the device they live on, which training may change (Accelerate
moves the model to the GPU) — and a lookup under other weights empties the cache.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Hashable, Sequence

import torch

__all__ = ["PrefixCache", "assemble", "weights_version", "supports_prefix_cache"]

Layers = list[tuple[torch.Tensor, torch.Tensor]]


def weights_version(model) -> tuple[int, str]:
    """Changes whenever a parameter is written in place (optimiser steps, load_state_dict, copy_) or the
    model moves to another device (keys/values kept on the old one cannot be spliced in)."""
    params = list(model.parameters())
    return sum(p._version for p in params), str(params[0].device) if params else "cpu"


def supports_prefix_cache(config) -> bool:
    """Full-attention decoders only: a sliding-window layer keeps a truncated cache we cannot splice."""
    types = getattr(config, "layer_types", None) or []
    return not any("sliding" in str(t) for t in types) and not getattr(config, "use_sliding_window", False)


@dataclass
class _Entry:
    ids: tuple[int, ...]
    layers: Layers
    nbytes: int


class PrefixCache:
    """LRU store of per-sequence keys/values, bounded by `max_bytes`."""

    def __init__(self, max_bytes: int = 1 << 30):
        self.max_bytes = max_bytes
        self.version: Hashable | None = None
        self._entries: OrderedDict[tuple[int, ...], _Entry] = OrderedDict()
        self._bytes = 0
        self.hits = self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def check_version(self, version: Hashable) -> None:
        """Drop everything computed under other weights."""
        if version != self.version:
            self.clear()
            self.version = version

    def lookup(self, prompt: Sequence[int]) -> tuple[int, Layers | None]:
        """Longest stored prefix of `prompt` that leaves at least one id to feed: (length, layers)."""
        best: _Entry | None = None
        n = len(prompt)
        for e in self._entries.values():
            m = len(e.ids)
            if (best is None or m > len(best.ids)) and m <= n and tuple(prompt[:m]) == e.ids:
                best = e
        if best is None:
            return 0, None
        self._entries.move_to_end(best.ids)
        use = min(len(best.ids), n - 1)  # the last prompt id must be fed to get the next-token logits
        if use <= 0:
            return 0, None
        self.hits += 1
        self.reused_tokens += use
        return use, [(k[:, :use], v[:, :use]) for k, v in best.layers]

    def store(self, ids: Sequence[int], layers: Layers) -> None:
        key = tuple(ids)
        if key in self._entries:
            self._bytes -= self._entries.pop(key).nbytes
        nbytes = sum(k.nelement() * k.element_size() + v.nelement() * v.element_size() for k, v in layers)
        if nbytes > self.max_bytes:
            return
        # A stored prefix of this sequence is superseded by it: drop it so the cache holds leaves only.
        for other in [k for k in self._entries if len(k) < len(key) and key[:len(k)] == k]:
            self._bytes -= self._entries.pop(other).nbytes
        self._entries[key] = _Entry(key, layers, nbytes)
        self._bytes += nbytes
        while self._bytes > self.max_bytes:
            _, old = self._entries.popitem(last=False)
            self._bytes -= old.nbytes


def assemble(prefixes: list[tuple[int, Layers | None]], n_layers: int, like: torch.Tensor
             ) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
    """Batch per-row prefixes into left-padded (n, heads, C, dim) tensors plus their (n, C) mask.

    `like` is one layer's key tensor from any entry: it gives heads, head_dim, dtype and device.
    """
    n, width = len(prefixes), max(c for c, _ in prefixes)
    heads, dim = like.shape[0], like.shape[-1]
    mask = torch.zeros((n, width), dtype=torch.long, device=like.device)
    out = []
    for layer in range(n_layers):
        k = like.new_zeros((n, heads, width, dim))
        v = like.new_zeros((n, heads, width, dim))
        for i, (c, layers) in enumerate(prefixes):
            if c:
                k[i, :, width - c:] = layers[layer][0]
                v[i, :, width - c:] = layers[layer][1]
        out.append((k, v))
    for i, (c, _) in enumerate(prefixes):
        if c:
            mask[i, width - c:] = 1
    return out, mask
