"""Batched sampling with a transformers causal LM: left padding, KV cache, per-row stop ids.

A hand-written loop rather than `model.generate` so that (1) the recorded log-prob is exactly
log_softmax(logits / T) of the sampled id, the quantity GRPO's ratio needs, and (2) finished rows
are dropped from the batch and the KV cache as soon as they stop, which matters when a batch of
tool-call turns has very different lengths, and (3) the keys/values of every finished row are kept
(`prefix_cache.py`), so the next turn of a conversation prefills only its new tokens.
"""

from __future__ import annotations

import inspect
import time
from typing import Sequence

import torch
from transformers import DynamicCache

from orchlib.engines.base import GenerateResult, Generation, SamplingParams
from orchlib.engines.prefix_cache import PrefixCache, assemble, supports_prefix_cache, weights_version

__all__ = ["TransformersEngine"]


class TransformersEngine:
    """Engine over a loaded (model, tokenizer). `device` pins where inputs go; by default they follow
    the model's weights wherever they are at each call (training moves them: Accelerate puts the model
    on the GPU when there is one, after the engine was made).

    `prefix_cache_mb` bounds the keys/values kept for reuse by later prompts that extend earlier
    sequences (0 turns reuse off; models with sliding-window layers never reuse). `share_prompts`
    prefills each distinct prompt of a batch once (a GRPO group sends one prompt G times).
    """

    # `TrainableEngine`: it samples from the model it was given, which the trainer updates in place, with
    # the trainer's own arithmetic; its log-probs are the trainer's (~1e-6) and nothing is ever synced
    shares_weights = True
    exact_logprobs = True

    def __init__(self, model, tokenizer, *, device: str | torch.device | None = None, seed: int = 0,
                 prefix_cache_mb: int = 1024, share_prompts: bool = False):
        self.model = model
        self.tokenizer = tokenizer
        self._pinned = torch.device(device) if device else None
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.generator = torch.Generator(device="cpu").manual_seed(seed)
        reuse = prefix_cache_mb > 0 and supports_prefix_cache(model.config)
        self.prefix_cache = PrefixCache(prefix_cache_mb << 20) if reuse else None
        # the prefill needs the last position's logits only: the vocabulary projection of the rest is waste
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        skips = "logits_to_keep" in inspect.signature(base.forward).parameters
        self.share_prompts = share_prompts
        self._skips_logits = skips
        self.last_sync: dict[str, float] = {"seconds": 0.0, "tensors": 0.0}

    @property
    def device(self) -> torch.device:
        return self._pinned or next(self.model.parameters()).device

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 stop_ids: Sequence[int] = ()) -> GenerateResult:
        t0 = time.perf_counter()
        if params.seed is not None:
            self.generator.manual_seed(params.seed)
        n = len(prompts)
        if n == 0:
            return GenerateResult([], 0.0)
        was_training = self.model.training
        self.model.eval()
        # A GRPO group sends the same prompt G times: prefill each distinct prompt once, then give every
        # row its copy of the keys/values (on the demo's ~170-id prompts, a sixth of a rollout's work)
        if self.share_prompts:
            first: dict[tuple[int, ...], int] = {}
            which = [first.setdefault(tuple(p), len(first)) for p in prompts]
            distinct = [list(k) for k in first]
        else:
            which, distinct = list(range(n)), list(prompts)
        cache, attn, ids, pos, reused = self._prefill_inputs(distinct)
        stop = torch.tensor(sorted(set(stop_ids)), dtype=torch.long, device=self.device)

        out_ids: list[list[int]] = [[] for _ in range(n)]
        out_lp: list[list[float]] = [[] for _ in range(n)]
        finish: list[str] = ["length"] * n
        rows = torch.arange(n, device=self.device)  # original index of each row still in the batch
        out = self.model(input_ids=ids, attention_mask=attn, position_ids=pos, past_key_values=cache, use_cache=True,
                         **({"logits_to_keep": 1} if self.share_prompts and self._skips_logits else {}))
        cache, logits = out.past_key_values, out.logits[:, -1, :]
        if len(distinct) < n:
            rows_of = torch.tensor(which, device=self.device)
            cache.batch_select_indices(rows_of)
            logits, attn, pos = logits[rows_of], attn[rows_of], pos[rows_of]
        next_pos = pos[:, -1:] + 1
        for step in range(params.max_new_tokens):
            token, logprob = self._sample(logits.float(), params)
            tok_list, lp_list = token.tolist(), logprob.tolist()
            for i, t, lp in zip(rows.tolist(), tok_list, lp_list):
                out_ids[i].append(t)
                out_lp[i].append(lp)
            done = torch.isin(token, stop) if len(stop) else torch.zeros_like(token, dtype=torch.bool)
            for i in rows[done].tolist():
                finish[i] = "stop"
            last = step == params.max_new_tokens - 1 or bool(done.all())
            if self.prefix_cache is not None:  # keep the rows leaving the batch for a later turn
                leaving = range(len(rows)) if last else done.nonzero().squeeze(-1).tolist()
                self._keep(cache, attn, rows, leaving, prompts, out_ids)
            if last:
                break
            keep = (~done).nonzero().squeeze(-1)
            if len(keep) < len(rows):  # shrink the batch and its cache to the rows still running
                rows, token, attn, next_pos = rows[keep], token[keep], attn[keep], next_pos[keep]
                cache.batch_select_indices(keep)
            attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=-1)
            out = self.model(input_ids=token[:, None], attention_mask=attn, position_ids=next_pos,
                             past_key_values=cache, use_cache=True)
            cache, logits = out.past_key_values, out.logits[:, -1, :]
            next_pos = next_pos + 1
        if was_training:
            self.model.train()
        gens = [Generation(out_ids[i], out_lp[i], finish[i]) for i in range(n)]  # type: ignore[arg-type]
        return GenerateResult(gens, time.perf_counter() - t0, prompt_tokens=sum(len(p) for p in prompts),
                              meta={"reused_prompt_tokens": reused, "distinct_prompts": len(distinct)})

    def clear_prefix_cache(self) -> None:
        """Free the kept keys/values now (they would be dropped anyway once the weights change)."""
        if self.prefix_cache is not None:
            self.prefix_cache.clear()

    def sync_weights(self, model) -> dict[str, float]:
        """Nothing to copy (`shares_weights`): this engine samples from the trainer's own model, so every
        update is already in it. Returns at once."""
        self.last_sync = {"seconds": 0.0, "tensors": 0.0}
        return self.last_sync

    def _prefill_inputs(self, prompts):
        """(cache, attention mask, ids, positions) for the first forward: reused prefixes + new ids."""
        n = len(prompts)
        prefixes: list = [(0, None)] * n
        if self.prefix_cache is not None:
            self.prefix_cache.check_version(weights_version(self.model))
            prefixes = [self.prefix_cache.lookup(p) for p in prompts]
        width = max(len(p) - c for p, (c, _) in zip(prompts, prefixes))
        ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        attn = torch.zeros((n, width), dtype=torch.long)
        for i, (p, (c, _)) in enumerate(zip(prompts, prefixes)):  # left padding: last ids at the right edge
            new = p[c:]
            ids[i, width - len(new):] = torch.tensor(new, dtype=torch.long)
            attn[i, width - len(new):] = 1
        ids, attn, cache = ids.to(self.device), attn.to(self.device), None
        reused = [layers for _, layers in prefixes if layers is not None]
        if reused:  # a padded hole between a row's prefix and its new ids is masked out like left padding
            past, past_mask = assemble(prefixes, len(reused[0]), reused[0][0][0])
            cache = DynamicCache(ddp_cache_data=past, config=self.model.config)
            attn = torch.cat([past_mask, attn], dim=-1)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)[:, -width:]
        return cache, attn, ids, pos, sum(c for c, _ in prefixes)

    def _keep(self, cache, attn, rows, leaving, prompts, out_ids) -> None:
        """Store the keys/values of `leaving` batch rows: their prompt and every sampled id but the last."""
        for j in leaving:
            i = int(rows[j])
            real = attn[j].bool()
            layers = [(layer.keys[j][:, real], layer.values[j][:, real]) for layer in cache.layers]
            seq = list(prompts[i]) + out_ids[i][:-1]  # the last sampled id was never fed to the model
            assert layers[0][0].shape[1] == len(seq), "prefix cache out of step with the batch"
            self.prefix_cache.store(seq, layers)

    def _sample(self, logits: torch.Tensor, params: SamplingParams) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample one id per row; return it with its log-prob under softmax(logits / T)."""
        if params.temperature == 0:
            logp = torch.log_softmax(logits, dim=-1)
            token = logits.argmax(-1)
            return token, logp.gather(-1, token[:, None]).squeeze(-1)
        logp = torch.log_softmax(logits / params.temperature, dim=-1)
        probs = logp.exp()
        if params.top_k or params.top_p < 1.0:
            probs = _truncate(probs, params.top_k, params.top_p)
        # Inverse-CDF sampling: one uniform per row against the cumulative sum. Same distribution as
        # torch.multinomial (renormalising truncated rows too), several times faster over a vocabulary
        # on CPU; right=True never lands on a zero-probability id.
        cdf = probs.cumsum(-1)
        u = torch.rand((len(probs), 1), generator=self.generator).to(cdf.device) * cdf[:, -1:]
        token = torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp(max=probs.shape[-1] - 1)
        return token, logp.gather(-1, token[:, None]).squeeze(-1)


def _truncate(probs: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Zero out tokens outside top-k / the top-p nucleus (the kept mass is renormalised by multinomial)."""
    if top_k:
        kth = probs.topk(min(top_k, probs.shape[-1]), dim=-1).values[:, -1:]
        probs = torch.where(probs < kth, torch.zeros_like(probs), probs)
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        outside = sorted_p.cumsum(-1) - sorted_p > top_p
        sorted_p = sorted_p.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return probs
