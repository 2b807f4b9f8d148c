"""The sampled ids' log-probs without the [B, T, V] log-softmax: `loss.token_logprobs`'s values and
gradients, a block of positions at a time, for a token loss that reads only the sampled ids (the paper's).
On a real vocabulary the full log-softmax and its graph are the update's largest tensors
(`benchmarks/bench_logprobs.py`: peak memory about halved on SmolLM2's vocabulary)."""

from __future__ import annotations

import torch

__all__ = ["sampled_logprobs"]


def sampled_logprobs(logits: torch.Tensor, ids: torch.Tensor, temperature: float = 1.0, *, entropy: bool = False,
                     chunk_elements: int = 1 << 22) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`token_logprobs` without keeping the [B, T, V] log-softmax: (log-probs [B, T] float32, and with
    `entropy` each position's entropy [B, T] without grad, else None). `logits` [B, T', V] with T' >= T:
    position j predicts ids[:, j] and positions from T on are left out, so that a model's output whose
    last position predicts nothing is passed as it is (its gradient there is 0).

    The log-softmax is taken a block of positions at a time (about `chunk_elements` logits each) and
    dropped; the backward takes it again from the logits, block by block. Each position goes through the
    same operations as in `token_logprobs`, so values and gradients are the same (bit for bit where a
    kernel does not depend on the batch's size, as on CPU). What is kept for the backward is the logits
    tensor itself, which the model made anyway, in its own dtype."""
    if logits.shape[1] < ids.shape[1]:
        raise ValueError(f"logits cover {logits.shape[1]} positions, ids {ids.shape[1]}")
    blocks = _blocks(*ids.shape, logits.shape[-1], chunk_elements)
    logp, ent = _SampledLogProbs.apply(logits, ids, float(temperature), blocks, entropy)
    return logp, ent if entropy else None


def _blocks(rows: int, cols: int, vocab: int, budget: int) -> list[tuple[slice, slice]]:
    """(rows, positions) slices covering a [rows, cols] grid, each of about `budget` / `vocab` positions:
    whole rows where one fits, else pieces of one row."""
    if cols * vocab <= budget:
        step = budget // max(1, cols * vocab)
        return [(slice(a, a + step), slice(0, cols)) for a in range(0, rows, step)]
    step = max(1, budget // vocab)
    # each piece ends at `cols`, not past it: the logits may hold positions beyond the ids' (see above)
    return [(slice(a, a + 1), slice(p, min(p + step, cols))) for a in range(rows) for p in range(0, cols, step)]


class _SampledLogProbs(torch.autograd.Function):
    """logits [B, T', V], ids [B, T] -> (log softmax(logits[:, :T] / temperature) at ids, entropy) [B, T]
    each, one block of `blocks` at a time."""

    @staticmethod
    def forward(ctx, logits, ids, temperature, blocks, want_entropy):
        logp = torch.empty(ids.shape, dtype=torch.float32, device=logits.device)
        ent = torch.empty(ids.shape if want_entropy else (0,), dtype=torch.float32, device=logits.device)
        for r, c in blocks:
            lp = _log_softmax(logits[r, c], temperature)
            logp[r, c] = lp.gather(-1, ids[r, c].unsqueeze(-1)).squeeze(-1)
            if want_entropy:
                ent[r, c] = -(lp.exp() * lp).sum(-1)
        ctx.save_for_backward(logits, ids)
        ctx.temperature, ctx.blocks = temperature, blocks
        ctx.mark_non_differentiable(ent)
        return logp, ent

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_logp, _grad_ent):
        logits, ids = ctx.saved_tensors
        # one [B, T', V] tensor for the whole gradient: slicing off the last position outside this function
        # would cost another one (autograd pads the slice's gradient back to the full shape)
        grad = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
        grad[:, ids.shape[1]:] = 0
        for r, c in ctx.blocks:
            # autograd's own backward of `token_logprobs`' operations on this block: the same arithmetic
            with torch.enable_grad():
                x = logits[r, c].detach().requires_grad_()
                picked = _log_softmax(x, ctx.temperature).gather(-1, ids[r, c].unsqueeze(-1)).squeeze(-1)
                grad[r, c], = torch.autograd.grad(picked, x, grad_logp[r, c])
        return grad, None, None, None, None


def _log_softmax(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return torch.log_softmax(logits.float() / temperature, dim=-1)
