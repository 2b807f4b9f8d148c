"""GRPO loss as pure functions on tensors. Shapes: B sequences × T tokens.

- token_logprobs: log π(a_t | s_t) of the ids that were sampled, from one forward pass.
- group_advantages: (r − mean_group) / (std_group + eps), or mean-only (Dr. GRPO, arXiv 2503.20783).
- clipped_surrogate: PPO-style with separate low/high clip ("clip-higher", DAPO arXiv 2503.14476;
  ToolOrchestra's release uses 0.2 / 0.28).
- kl_k3: the k3 estimator exp(q − p) − (q − p) − 1 ≥ 0 of KL(π‖π_ref) (Schulman, "Approximating KL").
- kl_exact: KL(π‖π_ref) at each position summed over the whole vocabulary: no sampling noise, and it sees
  mass moving onto ids that no rollout sampled.
- high_entropy_mask: the tokens whose entropy is in the top `rho` share of the batch's ("forking tokens",
  Wang et al., arXiv 2506.01939): the policy-gradient term can be restricted to them.
- preference_contrast: for one task drawn under several preference profiles, takes out of each
  rollout's advantage (a `weight` share of) the part every profile shares for the tool it chose, so
  what is left says how the profiles differ.
- tool_values / expected_choice: the policy-gradient term at the id that names the chosen tool, taken as
  its exact expectation over the tools the group tried, -sum_t pi(t|s) A(t) (Mean Actor-Critic, Asadi
  et al., arXiv 1709.00503), so which tool a rollout happened to sample adds no noise.
- masked_mean: token-level (all tokens of the batch count equally) or sequence-level (each sequence's
  mean, then the mean over sequences) averaging.
"""

from __future__ import annotations

from typing import Hashable, Literal, Sequence

import torch

__all__ = ["token_logprobs", "group_advantages", "keep_groups", "clipped_surrogate", "kl_k3", "masked_mean",
           "kl_exact", "high_entropy_mask", "preference_contrast", "tool_values", "expected_choice", "grpo_loss"]


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """logits [B, T, V] predicting ids [B, T] (already shifted) → log-probs [B, T] (float32)."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def group_advantages(rewards: torch.Tensor, scale: Literal["std", "none"] = "std", eps: float = 1e-6):
    """rewards [n_groups, G] → advantages [n_groups, G]; "none" keeps the mean-only Dr. GRPO form."""
    centred = rewards - rewards.mean(dim=-1, keepdim=True)
    if scale == "none":
        return centred
    return centred / (rewards.std(dim=-1, keepdim=True, unbiased=False) + eps)


def preference_contrast(adv: torch.Tensor, tasks: Sequence[Hashable], choices: Sequence[Sequence[Hashable]],
                        weight: float = 1.0) -> torch.Tensor:
    """adv [n_groups, G] → a copy in which, for the groups of one task (the same task under each profile),
    every rollout that chose tool k loses `weight` x shared(k): the mean over those groups of the mean
    advantage of their rollouts that chose k (0 for a group where no rollout chose k).

    `tasks[g]` names group g's task, `choices[g][i]` rollout i's choice (e.g. its first call's tool).
    Why: a tiny policy reads P only when the update's profile-independent part is small. With the
    ToolOrchestra reward most of each step's push is shared (the calculator is exact on arithmetic under
    every P), Adam scales its step to that part, and the part that differs between profiles stays three
    decimals small (docs/training.md). With weight 1 the push a tool gets on a task sums to zero over
    the profiles, so only the difference between them is learned. A task drawn under one profile only is
    left as it is."""
    out = adv.clone()
    groups: dict[Hashable, list[int]] = {}
    for g, task in enumerate(tasks):
        groups.setdefault(task, []).append(g)
    for rows in (r for r in groups.values() if len(r) > 1):
        for tool in {c for g in rows for c in choices[g]}:
            picked = [[i for i, c in enumerate(choices[g]) if c == tool] for g in rows]
            shared = sum(float(adv[g, i].mean()) if i else 0.0 for g, i in zip(rows, picked)) / len(rows)
            for g, i in zip(rows, picked):
                out[g, i] -= weight * shared
    return out


def tool_values(adv: Sequence[float], choices: Sequence[Hashable]) -> dict[Hashable, float]:
    """One group: tool -> mean advantage of the rollouts that chose it (rollouts that chose none, None,
    are left out). A tool no rollout tried has no entry: its value is unknown, and taking it as the
    baseline (0 for centred advantages) is what `expected_choice` does by leaving it out."""
    sums: dict[Hashable, float] = {}
    counts: dict[Hashable, int] = {}
    for a, c in zip(adv, choices):
        if c is not None:
            sums[c] = sums.get(c, 0.0) + float(a)
            counts[c] = counts.get(c, 0) + 1
    return {c: sums[c] / counts[c] for c in sums}


def expected_choice(logp: torch.Tensor, ids: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """logp [N, V] (log-probs where a tool is named), ids [N, K] (each candidate tool's id there),
    values [N, K] (each one's advantage) -> [N] loss -sum_k pi(ids_k) values_k.

    Its gradient is the expectation, over the choice, of the sampled term's -A grad log pi(a): the
    same direction on average, without the noise of which tool this rollout drew. With one optimiser
    step per batch of rollouts, the sampled term's ratio is 1, so no clipping is lost. (A softmax over
    the candidates alone was tried too: seed 0 of the demo then did not separate the profiles.)"""
    probs = logp.gather(-1, ids).exp()
    return -(probs * values).sum(-1)


def keep_groups(rewards: torch.Tensor, min_spread: float) -> torch.Tensor:
    """[n_groups] bool: groups whose reward std exceeds `min_spread` (ToolOrchestra drops the rest)."""
    return rewards.std(dim=-1, unbiased=False) > min_spread


def clipped_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor,
                      clip_low: float = 0.2, clip_high: float = 0.28) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token loss −min(ρA, clip(ρ, 1−ε_low, 1+ε_high)A) [B, T] and whether the clip was active."""
    ratio = torch.exp(logp - old_logp)
    adv = adv.unsqueeze(-1) if adv.dim() < logp.dim() else adv  # one advantage per sequence [B] → [B, 1]
    unclipped = ratio * adv
    clipped = ratio.clamp(1 - clip_low, 1 + clip_high) * adv
    return -torch.minimum(unclipped, clipped), (clipped < unclipped)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(π‖π_ref) from samples of π: exp(r) − r − 1 with r = ref − logp."""
    r = ref_logp - logp
    return torch.exp(r) - r - 1


def kl_exact(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """logp, ref_logp [B, T, V] (log-softmax of the policy and of the reference) -> [B, T]
    sum_v pi(v) (log pi(v) - log pi_ref(v)). Where k3 sees only the sampled id, this sees every id: a
    format token losing 3 % of its mass to an id no rollout drew is penalised all the same."""
    return (logp.exp() * (logp - ref_logp)).sum(-1)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, level: Literal["token", "sequence"] = "token"):
    mask = mask.to(x.dtype)
    if level == "token":
        return (x * mask).sum() / mask.sum().clamp(min=1)
    per_seq = (x * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    return per_seq.mean()


def high_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, rho: float) -> torch.Tensor:
    """[B, T] float mask: 1 on the masked tokens whose entropy reaches the (1 − rho) quantile of the masked
    tokens' entropies, else 0. rho = 1 keeps every masked token."""
    keep = mask.bool()
    if rho >= 1.0 or not bool(keep.any()):
        return keep.to(entropy.dtype)
    threshold = torch.quantile(entropy[keep].float(), 1.0 - rho)
    return (keep & (entropy >= threshold)).to(entropy.dtype)


def grpo_loss(logp, old_logp, adv, mask, ref_logp=None, *, clip_low=0.2, clip_high=0.28, kl_coef=0.0,
              level: Literal["token", "sequence"] = "token",
              pg_mask: torch.Tensor | None = None,
              kl_mask: torch.Tensor | None = None,
              choice_loss: torch.Tensor | None = None,
              kl_per_token: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The whole objective: surrogate + kl_coef · KL, averaged over masked tokens. Returns (loss, stats).

    `pg_mask` (⊆ mask) keeps the surrogate on those tokens only (`high_entropy_mask`), and `kl_mask`
    (⊆ mask) the KL term; the averaging still covers every masked token, so leaving tokens out of
    either term does not rescale the rest. stats["kl"] is over every masked token either way.
    `choice_loss` [B, T] is added to the (masked) surrogate before averaging: `expected_choice`'s term
    at the ids where a tool is named, which pg_mask then leaves out. `kl_per_token` [B, T] replaces the k3
    estimate from `ref_logp` (e.g. `kl_exact`'s)."""
    surrogate, clipped = clipped_surrogate(logp, old_logp, adv, clip_low, clip_high)
    if pg_mask is not None:
        surrogate = surrogate * pg_mask
    if choice_loss is not None:
        surrogate = surrogate + choice_loss
    loss = masked_mean(surrogate, mask, level)
    stats = {"clip_frac": masked_mean(clipped.to(logp.dtype), mask).detach()}
    if ref_logp is not None or kl_per_token is not None:
        per_token = kl_per_token if kl_per_token is not None else kl_k3(logp, ref_logp)
        kl = masked_mean(per_token, mask, level)
        stats["kl"] = kl.detach()
        if kl_coef:
            loss = loss + kl_coef * (kl if kl_mask is None else masked_mean(per_token * kl_mask, mask, level))
    return loss, stats
