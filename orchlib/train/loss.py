"""The GRPO objective of ToolOrchestra (arXiv 2511.21689) as pure functions. Shapes: B sequences x T tokens.

- group_advantages: (r - mean_group) / (std_group + eps), or mean-only (Dr. GRPO, arXiv 2503.20783).
- keep_groups: the paper's filter: a group whose rewards are all equal teaches nothing and is left out.
- clipped_surrogate: PPO-style with separate low/high clip ("clip-higher", DAPO arXiv 2503.14476;
  ToolOrchestra's release uses 0.2 / 0.28).
- kl_k3: the k3 estimator exp(q - p) - (q - p) - 1 >= 0 of KL(pi || pi_ref) (Schulman, "Approximating KL").
- masked_mean: token-level (every token of the batch counts equally) or sequence-level (each sequence's
  mean, then the mean over sequences).
- grpo_loss: surrogate + kl_coef * KL, averaged over the sampled tokens.

Experimental objectives (other KLs, masks, expected choices) are in `orchlib.experiments.variants`.
"""

from __future__ import annotations

from typing import Literal

import torch

__all__ = ["token_logprobs", "group_advantages", "keep_groups", "clipped_surrogate", "kl_k3", "masked_mean",
           "grpo_loss"]

Level = Literal["token", "sequence"]


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """logits [B, T, V] predicting ids [B, T] (already shifted) -> log-probs [B, T] (float32)."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def group_advantages(rewards: torch.Tensor, scale: Literal["std", "none"] = "std", eps: float = 1e-6):
    """rewards [n_groups, G] -> advantages [n_groups, G]; "none" keeps the mean-only Dr. GRPO form."""
    centred = rewards - rewards.mean(dim=-1, keepdim=True)
    if scale == "none":
        return centred
    return centred / (rewards.std(dim=-1, keepdim=True, unbiased=False) + eps)


def keep_groups(rewards: torch.Tensor, min_spread: float) -> torch.Tensor:
    """[n_groups] bool: groups whose reward std exceeds `min_spread` (ToolOrchestra drops the rest)."""
    return rewards.std(dim=-1, unbiased=False) > min_spread


def clipped_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor,
                      clip_low: float = 0.2, clip_high: float = 0.28) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token loss -min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A) [B, T] and whether the clip was active."""
    ratio = torch.exp(logp - old_logp)
    adv = adv.unsqueeze(-1) if adv.dim() < logp.dim() else adv  # one advantage per sequence [B] -> [B, 1]
    unclipped = ratio * adv
    clipped = ratio.clamp(1 - clip_low, 1 + clip_high) * adv
    return -torch.minimum(unclipped, clipped), (clipped < unclipped)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi || pi_ref) from samples of pi: exp(r) - r - 1 with r = ref - logp."""
    r = ref_logp - logp
    return torch.exp(r) - r - 1


def masked_mean(x: torch.Tensor, mask: torch.Tensor, level: Level = "token") -> torch.Tensor:
    mask = mask.to(x.dtype)
    if level == "token":
        return (x * mask).sum() / mask.sum().clamp(min=1)
    per_seq = (x * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    return per_seq.mean()


def grpo_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
              ref_logp: torch.Tensor | None = None, *, clip_low: float = 0.2, clip_high: float = 0.28,
              kl_coef: float = 0.0, level: Level = "token") -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The whole objective: surrogate + kl_coef * k3 KL, averaged over the masked tokens.

    logp, old_logp, ref_logp, mask [B, T]; adv [B] (or [B, T]). Returns (loss, stats): stats["clip_frac"],
    and stats["kl"] where `ref_logp` is given."""
    surrogate, clipped = clipped_surrogate(logp, old_logp, adv, clip_low, clip_high)
    loss = masked_mean(surrogate, mask, level)
    stats = {"clip_frac": masked_mean(clipped.to(logp.dtype), mask).detach()}
    if ref_logp is not None:
        kl = masked_mean(kl_k3(logp, ref_logp), mask, level)
        stats["kl"] = kl.detach()
        if kl_coef:
            loss = loss + kl_coef * kl
    return loss, stats
