"""Logits of a batch whose rows share a head: each shared head goes through the model once.

A GRPO group is G rollouts of one prompt; the warm start's examples share their system turn (the
instructions, the tool list, P). Run as separate rows, a shared head of ~130-170 ids is computed again
for every row, in the forward pass and in the backward, while what differs is often ~25-60 ids. Here
each shared head is run once, its keys/values are expanded to its rows (a view: their gradients add
up in the backward), and only the rest of each row runs per row. The result is the logits
`model(ids).logits[:, start:]` would give, within float rounding (tests/test_shared_prompt.py compares
the loss and every gradient).

Heads are found from the ids alone (`shared_heads`): rows are sorted, and a run of rows is given the
longest prefix they all share, split where that saves more work. Rows that share nothing long go
through ordinary batched forwards.

Each pass runs only as far as its longest row, not to the batch's width: one rollout that took a second
turn, or one long question, would otherwise pad every row of the batch to its length. Rows of one head
are split further by length (`length_runs`) where a pass of their own costs less than the padding it
spares. And a pass projects onto the vocabulary (a large share of a small model's work) only from the
first position its rows are scored at (`starts`). Positions a pass did not compute get logits of 0, which
the callers' masks never read.
"""

from __future__ import annotations

from typing import Sequence

import torch

__all__ = ["can_share", "first_marked", "length_runs", "shared_heads", "shared_prompt_logits"]


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def shared_heads(rows: Sequence[Sequence[int]], min_share: int = 16) -> list[tuple[int, list[int]]]:
    """(head length, row indices) covering every row once: the rows of each entry begin with the same
    `head` ids. Heads shorter than `min_share` are reported as 0 (nothing worth sharing); an entry of
    one row always has head 0. Chosen to maximise the ids not recomputed, sum of (rows - 1) * head."""
    order = sorted(range(len(rows)), key=lambda i: list(rows[i]))
    links = [_lcp(rows[a], rows[b]) for a, b in zip(order, order[1:])]

    def best(lo: int, hi: int) -> tuple[int, list[tuple[int, list[int]]]]:
        """Best cover of order[lo:hi] (links[lo:hi-1] join them): (ids saved, entries)."""
        if hi - lo == 1:
            return 0, [(0, [order[lo]])]
        cut = min(range(lo, hi - 1), key=lambda k: links[k])
        head = links[cut]
        whole = ((hi - lo - 1) * head, [(head, order[lo:hi])]) if head >= min_share else (0, [])
        left, right = best(lo, cut + 1), best(cut + 1, hi)
        split = (left[0] + right[0], left[1] + right[1])
        return whole if whole[1] and whole[0] >= split[0] else split

    if not rows:
        return []
    return best(0, len(rows))[1]


def length_runs(lengths: Sequence[int], pass_cost: int = 32) -> list[list[int]]:
    """Indices of `lengths` in runs of similar length, each to be run as one padded pass: the split that
    minimises the ids computed (a run costs its rows x its longest) plus `pass_cost` ids for each pass.
    Runs are contiguous in the sorted order, so the best split is found exactly by a small dynamic program."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    n = len(order)
    best, cut = [0] * (n + 1), [0] * (n + 1)
    for j in range(1, n + 1):  # best[j]: the cheapest split of the j shortest rows
        best[j], cut[j] = min((best[i] + (j - i) * lengths[order[j - 1]] + pass_cost, i) for i in range(j))
    runs, j = [], n
    while j:
        runs.append(order[cut[j]:j])
        j = cut[j]
    return runs[::-1]


def shared_prompt_logits(model, ids: torch.Tensor, attn: torch.Tensor, lengths: Sequence[int], start: int,
                         min_share: int = 16, min_saved: float = 0.25, pass_cost: int = 32,
                         starts: Sequence[int] | None = None) -> torch.Tensor:
    """Logits [B, W - start, V] of positions start .. W-1 of right-padded `ids` [B, W] (`lengths`: each
    row's real ids; `attn` marks them), computing each head that rows share once. `starts`: the first
    position whose logits each row needs (>= `start`; all `start` if None): a pass projects onto the
    vocabulary only from its rows' earliest, so the prompts' tails of rows whose replies begin later cost
    no logits. A row's logits are exact from its start to its length; elsewhere they may be 0s. When
    sharing would spare less than `min_saved` of the batch's ids, the ordinary forward runs instead.
    `pass_cost`: what one more forward pass is worth in ids (`length_runs`)."""
    from transformers import DynamicCache

    B, W = ids.shape
    starts = [start] * B if starts is None else [min(max(s, start), W - 1) for s in starts]
    heads = shared_heads([ids[r, :lengths[r]].tolist() for r in range(B)], min_share)
    saved = sum((len(rows) - 1) * head for head, rows in heads)
    if saved < min_saved * sum(lengths):  # each extra forward costs a little: share only when it pays
        return model(input_ids=ids, attention_mask=attn, logits_to_keep=W - start).logits
    out: list[torch.Tensor | None] = [None] * B

    def place(rows: list[int], logits: torch.Tensor, first: int, end: int) -> None:
        """Rows' logits of positions first .. end-1, set among W - start positions with 0s around them.
        Rows are taken apart with `unbind` and joined by one `stack`: indexing a row out one at a time
        would give each its own zero-filled gradient of the whole pass in the backward."""
        logits = torch.nn.functional.pad(logits, (0, 0, first - start, W - end))
        for r, row in zip(rows, logits.unbind(0)):
            out[r] = row

    singles: list[int] = []
    for head, rows in heads:
        n = min(head, max(lengths[r] for r in rows) - 1)  # at least one position left to run per row
        if len(rows) == 1 or n < min_share:
            singles += rows
            continue
        s_head = min(starts[r] for r in rows)
        first = model(input_ids=ids[rows[0]:rows[0] + 1, :n], use_cache=True, logits_to_keep=max(n - s_head, 1))
        for run in length_runs([lengths[r] - n for r in rows], pass_cost):
            part = [rows[j] for j in run]
            g, idx, s = len(part), torch.tensor(part, device=ids.device), min(starts[r] for r in part)
            end = max(max(lengths[r] for r in part), n + 1, s + 1)
            past = [(layer.keys.expand(g, -1, -1, -1), layer.values.expand(g, -1, -1, -1))
                    for layer in first.past_key_values.layers]  # views: their gradients add up in the head
            cache = DynamicCache(ddp_cache_data=past, config=_config(model))
            rest_attn = torch.cat([torch.ones((g, n), dtype=attn.dtype, device=attn.device), attn[idx, n:end]], dim=-1)
            pos = torch.arange(n, end, device=ids.device).expand(g, -1)
            rest = model(input_ids=ids[idx, n:end], attention_mask=rest_attn, position_ids=pos,
                         past_key_values=cache, use_cache=False, logits_to_keep=end - max(s, n)).logits
            if s < n:  # the head's own last positions predict reply ids too
                rest = torch.cat([first.logits[:, s - s_head:].expand(g, -1, -1), rest], dim=1)
            place(part, rest, s, end)
    for run in length_runs([lengths[r] for r in singles], pass_cost):
        part = [singles[j] for j in run]
        idx, s = torch.tensor(part, device=ids.device), min(starts[r] for r in part)
        end = max(max(lengths[r] for r in part), s + 1)
        place(part, model(input_ids=ids[idx, :end], attention_mask=attn[idx, :end], logits_to_keep=end - s).logits,
              s, end)
    return torch.stack(out)  # type: ignore[arg-type]


def first_marked(marks: torch.Tensor) -> list[int]:
    """Each row's first True column of `marks` [B, T] (a row without one: T - 1): the `starts` of
    `shared_prompt_logits` when column c marks that position c predicts a scored id."""
    if not marks.shape[1]:
        return [0] * marks.shape[0]
    first = marks.int().argmax(1)  # argmax gives the first of equal maxima
    return torch.where(marks.any(1), first, marks.shape[1] - 1).tolist()


def can_share(model, num_processes: int) -> bool:
    """Whether `shared_prompt_logits` applies to `model`: one process (DDP would see a weight used twice
    before the backward), a forward that takes `logits_to_keep`, and full attention (a sliding-window
    layer keeps a cache that cannot be handed over)."""
    import inspect

    from orchlib.engines.prefix_cache import supports_prefix_cache

    base = _base(model)
    return (num_processes == 1 and "logits_to_keep" in inspect.signature(base.forward).parameters
            and supports_prefix_cache(base.config))


def _base(model):
    model = model.module if hasattr(model, "module") else model
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _config(model):
    return _base(model).config
