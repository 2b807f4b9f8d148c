"""Experimental objectives and samplers, plugged into the Trainer through `orchlib.train.hooks.Hooks`; none
is in the paper.

    from orchlib.experiments.variants import VariantConfig
    trainer = Trainer(policy, env, GRPOConfig(), hooks=VariantConfig(paired_profiles=("accuracy", "thrifty"),
                                                                     preference_contrast=1.0).hooks())

They were built for the tiny demo policy, whose problem is reading the preference P at all (see the demo's
notes); each is off by default, and `VariantConfig().hooks()` is the paper's GRPO.

- task sampler: balanced draws over task categories (`balanced_draw`); each task under several preference
  profiles in one step (`PairedProfiles`: a task's copies form one bundle, rolled out on one process).
- advantage transform: `preference_contrast` takes out what the profiles share.
- token loss (`VariantLoss`): the policy-gradient term on the tool names only, the KL off them, the exact KL
  over the vocabulary (`kl_exact`), an entropy mask (`high_entropy_mask`), and the expected choice at the
  tool's name (`expected_choice`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Literal, Sequence

import torch
from pydantic import ConfigDict, Field, model_validator

from orchlib.chat import call_name_mask
from orchlib.settings import Settings
from orchlib.tasks import PROFILES, Task
from orchlib.train.config import GRPOConfig
from orchlib.train.hooks import Hooks, MicroBatch, PaperLoss, TaskSampler, keep_advantages, uniform_draw
from orchlib.train.loss import clipped_surrogate, kl_k3, masked_mean
from orchlib.trajectory import Trajectory

__all__ = ["VariantConfig", "balanced_draw", "QuotaDraw", "PairedProfiles", "PreferenceContrast", "preference_contrast",
           "first_tool", "tool_values", "expected_choice", "kl_exact", "kl_merged", "high_entropy_mask",
           "masked_grpo_loss", "VariantLoss", "KL_ESTIMATORS"]


class VariantConfig(Settings):
    """The demo's variants of GRPO. The defaults are the paper's (every variant off)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    balance_categories: bool = Field(False, description="draw each step's tasks evenly from every task category "
                                     "(the rest at random): a step's update then sees every kind of task, not a "
                                     "draw that happens to hold one")
    category_quota: dict[str, int] | None = Field(
        None, description="how many of each step's tasks each named category gives (the rest drawn at random from "
                          "every category): a category whose choice is hard to learn gets more of the update's "
                          "groups, one that only needs holding fewer (`QuotaDraw`); replaces balance_categories")
    paired_profiles: tuple[str, ...] = Field((), description="repeat each drawn task under each of these "
                                             "preference profiles (orchlib.tasks.PROFILES), on one process")
    preference_contrast: float = Field(0.0, ge=0, le=1, description="with paired_profiles: the share of each "
                                       "rollout's advantage that every profile shares for the tool it called first "
                                       "on that task, taken out (`preference_contrast`); 1 leaves only how the "
                                       "profiles differ. A task's groups are kept or left out together")
    contrast_categories: tuple[str, ...] | None = Field(
        None, description="with preference_contrast: the task categories whose groups are contrasted (None: every "
                          "one). Elsewhere a task's groups keep their own advantages, shared part and all: where "
                          "one tool is best under every profile, the shared part is the lesson")
    contrast_unseen: Literal["zero", "absent"] = Field(
        "zero", description="with preference_contrast: a profile's group where no rollout chose a tool counts "
                            "as 0 in that tool's shared part (zero), or is left out of it (absent: the shared "
                            "part is the mean over the groups that tried the tool; see `preference_contrast`)")
    policy_tokens: Literal["all", "tool_names"] = Field(
        "all", description="where the policy-gradient term acts: every sampled id, or only the ids that name "
                           "a called tool (the routing choice; the warm start taught the rest)")
    kl_tokens: Literal["all", "not_names", "not_choice"] = Field(
        "all", description="where the KL term acts: every sampled id, or every id but those naming a called tool "
                           "(with policy_tokens='tool_names': the choice moves freely, the rest is held to the "
                           "starting policy), or every id with the choice's position held too, but with the tried "
                           "tools' ids taken as one (`kl_merged`): the split among them is free, the mass they "
                           "leave to ids that name no tool is not (needs kl_estimator='exact' and "
                           "choice_gradient='expected')")
    kl_estimator: Literal["k3", "exact"] = Field(
        "k3", description="k3: the k3 estimate at each sampled id (the paper's); exact: the KL over the whole "
                          "vocabulary at each position (`kl_exact`), which also holds the mass of ids no rollout "
                          "sampled; costs one more [B, T, V] tensor")
    choice_gradient: Literal["sampled", "expected"] = Field(
        "sampled", description="the policy-gradient term at the id naming the first call's tool: the sampled "
                               "-A grad log pi(a), or its exact expectation over the tools the group tried, "
                               "-sum_t pi(t) A(t) (`expected_choice`). Same direction on average, without "
                               "the noise of the draw")
    choice_baseline: Literal["zero", "tried"] = Field(
        "zero", description="with choice_gradient='expected': the value the ids that name no tried tool take "
                            "at the choice: 0 (the group's mean for centred advantages), or the pi-weighted mean "
                            "of the tried tools' values, so that the push moves mass among them only "
                            "(`expected_choice`)")
    top_entropy_quantile: float = Field(1.0, gt=0, le=1, description="rho: the policy-gradient term acts on "
                                        "the top rho share of each micro-batch's tokens by entropy (Wang et al., "
                                        "arXiv 2506.01939, use 0.2); the KL term on all. 1 keeps every token")

    @model_validator(mode="after")
    def _check(self) -> VariantConfig:
        if self.preference_contrast and len(self.paired_profiles) < 2:
            raise ValueError("preference_contrast compares one task's groups under several profiles: "
                             "it needs paired_profiles with at least two profiles")
        if self.kl_tokens == "not_choice" and (self.kl_estimator != "exact" or self.choice_gradient != "expected"):
            raise ValueError("kl_tokens='not_choice' merges the tried tools' ids in the KL over the vocabulary: it "
                             "needs kl_estimator='exact' and choice_gradient='expected'")
        if self.category_quota is not None and self.balance_categories:
            raise ValueError("category_quota and balance_categories both say how a step's tasks are drawn: set one")
        if self.category_quota is not None and any(n < 0 for n in self.category_quota.values()):
            raise ValueError(f"category_quota: counts must be >= 0, got {self.category_quota}")
        unknown = [p for p in self.paired_profiles if p not in PROFILES]
        if unknown:
            raise ValueError(f"paired_profiles: unknown profile {unknown[0]!r} (known: {', '.join(PROFILES)})")
        return self

    def hooks(self) -> Hooks:
        """The Trainer's hooks for these variants; the paper's part wherever a variant is off."""
        draw: TaskSampler = (QuotaDraw(tuple(sorted(self.category_quota.items()))) if self.category_quota is not None
                             else balanced_draw if self.balance_categories else uniform_draw)
        loss_fields = ("policy_tokens", "kl_tokens", "kl_estimator", "choice_gradient", "choice_baseline",
                       "top_entropy_quantile")
        on = self.model_dump(exclude_defaults=True, mode="json")
        return Hooks(sampler=PairedProfiles(draw, self.paired_profiles) if self.paired_profiles else draw,
                     advantage=PreferenceContrast(self.preference_contrast, self.contrast_unseen,
                                                  self.contrast_categories)
                     if self.preference_contrast
                     else keep_advantages,
                     token_loss=VariantLoss(self) if any(f in on for f in loss_fields) else PaperLoss(),
                     record={"variants": on} if on else {})


# ---------------------------------------------------------------------------------------------- task samplers
def balanced_draw(rng: random.Random, tasks: Sequence[Task], k: int) -> list[list[Task]]:
    """`k` distinct tasks, k // n from each of the n categories (as many as a small one has), the rest
    drawn at random from what is left; each its own bundle."""
    by_cat: dict[str, list[Task]] = {}
    for t in tasks:
        by_cat.setdefault(t.category, []).append(t)
    drawn = [t for cat in sorted(by_cat) for t in rng.sample(by_cat[cat], min(k // len(by_cat), len(by_cat[cat])))]
    chosen = {id(t) for t in drawn}
    drawn += rng.sample([t for t in tasks if id(t) not in chosen], k - len(drawn))
    return [[t] for t in drawn]


@dataclass(frozen=True)
class QuotaDraw:
    """`k` distinct tasks: each named category's count first (as many as it has, and no more than `k` in all,
    in the order given), the rest at random from what is left; each its own bundle."""

    quota: tuple[tuple[str, int], ...]

    def __call__(self, rng: random.Random, tasks: Sequence[Task], k: int) -> list[list[Task]]:
        drawn: list[Task] = []
        for cat, n in self.quota:
            pool = [t for t in tasks if t.category == cat]
            drawn += rng.sample(pool, min(n, len(pool), k - len(drawn)))
        chosen = {id(t) for t in drawn}
        drawn += rng.sample([t for t in tasks if id(t) not in chosen], k - len(drawn))
        return [[t] for t in drawn]


@dataclass(frozen=True)
class PairedProfiles:
    """Each bundle `draw` gives, with every task in it repeated under each profile: one task's copies stay in
    one bundle, so they are rolled out, and contrasted, on one process."""

    draw: TaskSampler
    profiles: tuple[str, ...]

    def __call__(self, rng: random.Random, tasks: Sequence[Task], k: int) -> list[list[Task]]:
        return [[t.model_copy(update={"preference": PROFILES[p]}) for t in bundle for p in self.profiles]
                for bundle in self.draw(rng, tasks, k)]


# ---------------------------------------------------------------------------------------------- advantages
def first_tool(traj: Trajectory) -> str | None:
    """The tool a rollout called first (None when it called none)."""
    return next((c.name for turn in traj.turns for c in turn.calls), None)


def preference_contrast(adv: torch.Tensor, tasks: Sequence[Hashable], choices: Sequence[Sequence[Hashable]],
                        weight: float = 1.0, unseen: Literal["zero", "absent"] = "zero") -> torch.Tensor:
    """adv [n_groups, G] -> a copy in which, for the groups of one task (the same task under each profile),
    every rollout that chose tool k loses `weight` x shared(k): the mean over those groups of the mean
    advantage of their rollouts that chose k (0 for a group where no rollout chose k).

    `tasks[g]` names group g's task, `choices[g][i]` rollout i's choice (e.g. its first call's tool).
    Why: a tiny policy reads P only when the update's profile-independent part is small; with weight 1
    the push a tool gets on a task sums to zero over the profiles, so only the difference between them is
    learned. A task drawn under one profile only is left as it is.

    `unseen`: how a group where no rollout chose k enters shared(k). "zero" counts it as 0, so half of
    the other profile's push on k is kept. That half is shared, not P's: where the cheap tool is wrong,
    both profiles push the dear one, and the fewer rollouts still try the cheap one, the more often one
    profile's group has none, so the leak grows as exploration thins and pulls both profiles the same
    way. "absent" averages over the groups that tried k only: a tool tried under one profile gets no
    push on that task (its value under the other profile is unknown), and the contrast stays exact."""
    out = adv.clone()
    groups: dict[Hashable, list[int]] = {}
    for g, task in enumerate(tasks):
        groups.setdefault(task, []).append(g)
    for rows in (r for r in groups.values() if len(r) > 1):
        for tool in {c for g in rows for c in choices[g]}:
            picked = [[i for i, c in enumerate(choices[g]) if c == tool] for g in rows]
            means = [float(adv[g, i].mean()) for g, i in zip(rows, picked) if i]
            shared = sum(means) / (len(means) if unseen == "absent" else len(rows))
            for g, i in zip(rows, picked):
                out[g, i] -= weight * shared
    return out


@dataclass(frozen=True)
class PreferenceContrast:
    """`preference_contrast` on the step's groups, by task id and first call; a task's groups are then kept
    together (a group with no spread still carries the other profiles' contrast)."""

    weight: float
    unseen: Literal["zero", "absent"] = "zero"
    categories: tuple[str, ...] | None = None  # contrasted categories; None: all

    def __call__(self, adv, keep, tasks: list[Task], groups: list[list[Trajectory]]):
        on = [self.categories is None or t.category in self.categories for t in tasks]
        # a group left out of the contrast gets a task id of its own, so that it is left as it is
        ids = [t.id if c else (t.id, g) for g, (t, c) in enumerate(zip(tasks, on))]
        adv = preference_contrast(adv, ids, [[first_tool(t) for t in g] for g in groups], self.weight, self.unseen)
        kept = {i for i, k in zip(ids, keep.tolist()) if k}
        return adv, torch.tensor([i in kept for i in ids], dtype=torch.bool)


# ---------------------------------------------------------------------------------------------- token loss
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


def expected_choice(logp: torch.Tensor, ids: torch.Tensor, values: torch.Tensor,
                    baseline: Literal["zero", "tried"] = "zero") -> torch.Tensor:
    """logp [N, V] (log-probs where a tool is named), ids [N, K] (each candidate tool's id there),
    values [N, K] (each one's advantage) -> [N] loss -sum_k pi(ids_k) (values_k - b).

    `baseline`: the value every other id (an untried tool, or an id that names none) is taken to have.
    "zero": b = 0, the group's mean for centred advantages. After `preference_contrast` a group's
    advantages are no longer centred, and where sum_k pi_k values_k < 0 the update moved mass from the
    tried tools to ids that name no tool: the call broke at the name (`{"name": "` then a newline), at a
    step where nothing holds the name's ids. "tried": b = the pi-weighted mean of the tried tools' values
    (detached), so the push only moves mass among them.

    Its gradient is the expectation, over the choice, of the sampled term's -A grad log pi(a) (Mean
    Actor-Critic, Asadi et al., arXiv 1709.00503): the same direction on average, without the noise of
    which tool this rollout drew. With one optimiser step per batch of rollouts the sampled term's ratio is
    1, so no clipping is lost."""
    probs = logp.gather(-1, ids).exp()
    if baseline == "tried":
        p = probs.detach()
        values = values - (p * values).sum(-1, keepdim=True) / p.sum(-1, keepdim=True).clamp_min(1e-12)
    return -(probs * values).sum(-1)


def kl_exact(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """logp, ref_logp [B, T, V] (log-softmax of the policy and of the reference) -> [B, T]
    sum_v pi(v) (log pi(v) - log pi_ref(v)). Where k3 sees only the sampled id, this sees every id: a
    format token losing 3 % of its mass to an id no rollout drew is penalised all the same."""
    return (logp.exp() * (logp - ref_logp)).sum(-1)


def kl_merged(logp: torch.Tensor, ref_logp: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """logp, ref_logp [V] (one position), ids [K] -> the exact KL with the ids in `ids` taken as one outcome.
    At a tool's name: moving mass among the tried tools costs nothing, moving it to any other id does.
    Without it (kl_tokens='not_names') nothing held the name's position, and a run could lose its calls
    there in a few steps (`{"name": "{"name": ...`)."""
    p = logp.exp()
    other = torch.ones_like(p, dtype=torch.bool)
    other[ids] = False
    rest = (p[other] * (logp[other] - ref_logp[other])).sum()
    p_in, r_in = p[ids].sum(), ref_logp[ids].exp().sum()
    return rest + p_in * (torch.log(p_in.clamp_min(1e-30)) - torch.log(r_in.clamp_min(1e-30)))


def high_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, rho: float) -> torch.Tensor:
    """[B, T] float mask: 1 on the masked tokens whose entropy reaches the (1 - rho) quantile of the masked
    tokens' entropies, else 0 ("forking tokens", Wang et al., arXiv 2506.01939). rho = 1 keeps every one."""
    keep = mask.bool()
    if rho >= 1.0 or not bool(keep.any()):
        return keep.to(entropy.dtype)
    threshold = torch.quantile(entropy[keep].float(), 1.0 - rho)
    return (keep & (entropy >= threshold)).to(entropy.dtype)


def masked_grpo_loss(logp, old_logp, adv, mask, kl_per_token=None, *, clip_low=0.2, clip_high=0.28, kl_coef=0.0,
                     level="token", pg_mask=None, kl_mask=None, choice_loss=None):
    """`loss.grpo_loss` with the variants' parts: `kl_per_token` [B, T] (any estimator) in place of k3;
    `pg_mask` (within mask) keeps the surrogate on those tokens only and `kl_mask` the KL term, while the
    averaging still covers every masked token (leaving tokens out does not rescale the rest; stats["kl"] is
    over all of them); `choice_loss` [B, T] is added to the surrogate before averaging."""
    surrogate, clipped = clipped_surrogate(logp, old_logp, adv, clip_low, clip_high)
    if pg_mask is not None:
        surrogate = surrogate * pg_mask
    if choice_loss is not None:
        surrogate = surrogate + choice_loss
    loss = masked_mean(surrogate, mask, level)
    stats = {"clip_frac": masked_mean(clipped.to(logp.dtype), mask).detach()}
    if kl_per_token is not None:
        kl = masked_mean(kl_per_token, mask, level)
        stats["kl"] = kl.detach()
        if kl_coef:
            loss = loss + kl_coef * (kl if kl_mask is None else masked_mean(kl_per_token * kl_mask, mask, level))
    return loss, stats


def _choice_spots(b: MicroBatch) -> list[tuple[int, int, list[int], list[float]]]:
    """(row, column of b.logp, tried tools' ids, their values) of each rollout's `name_choices` entry."""
    # logp[:, k] is the log-prob of ids[:, start + 1 + k]
    return [(i, c[0] - b.start - 1, c[1], c[2]) for i, (_, c) in enumerate(b.extra) if c is not None]


def _kl_not_choice(b: MicroBatch) -> torch.Tensor:
    """The exact KL per position [B, T], with `kl_merged` where a rollout names a tried tool."""
    ref = b.ref_logprobs(full=True)
    kl = kl_exact(b.logp_all, ref)
    spots = _choice_spots(b)
    if not spots:
        return kl
    at = torch.zeros_like(kl, dtype=torch.bool)
    merged = torch.zeros_like(kl)
    for i, k, ids, _ in spots:
        at[i, k] = True
        merged[i, k] = kl_merged(b.logp_all[i, k], ref[i, k], torch.tensor(ids, device=kl.device))
    return torch.where(at, merged, kl)


# the KL per sampled position [B, T], by VariantConfig.kl_estimator
KL_ESTIMATORS: dict[str, Callable[[MicroBatch], torch.Tensor]] = {
    "k3": lambda b: kl_k3(b.logp, b.ref_logprobs()),
    "exact": lambda b: kl_exact(b.logp_all, b.ref_logprobs(full=True)),
}


def _pad_masks(masks: Sequence[Sequence[int]], width: int) -> torch.Tensor:
    """[B, width] float: each 0/1 list, right-padded with 0."""
    out = torch.zeros((len(masks), width), dtype=torch.float32)
    for i, m in enumerate(masks):
        out[i, :len(m)] = torch.tensor(m, dtype=torch.float32)
    return out


def name_choices(group: list[Trajectory], adv: list[float], names: list[list[int]],
                 tokenizer) -> list[tuple[int, list[int], list[float]] | None]:
    """Per rollout of one group: (position of the id naming its first call's tool, each tried tool's id there,
    each one's value from `tool_values`), or None where the sampled term stays: no call, a name that is not a
    tried tool's, or two tools whose names start with the same id. `names`: the rollouts' call_name_mask."""
    firsts = [first_tool(t) for t in group]
    values = tool_values(adv, firsts)
    spots: list[tuple[int, int] | None] = []
    name_ids: dict[str, int] = {}
    for t, tool, mask in zip(group, firsts, names):
        pos = next((i for i, m in enumerate(mask) if m), None)
        ok = pos is not None and tool is not None and tool.startswith(tokenizer.decode([t.ids[pos]]))
        spots.append((pos, t.ids[pos]) if ok else None)
        if ok:
            name_ids.setdefault(tool, t.ids[pos])
    if len(set(name_ids.values())) < len(name_ids):
        return [None] * len(group)
    tools = [tool for tool in values if tool in name_ids]
    ids, vals = [name_ids[tool] for tool in tools], [values[tool] for tool in tools]
    return [(s[0], ids, vals) if s is not None and s[1] in ids else None for s in spots]


class VariantLoss:
    """The token-loss variants of a VariantConfig, on top of `masked_grpo_loss`. `prepare` gives each
    trajectory (its call-name mask or None, its `name_choices` entry or None)."""

    def __init__(self, config: VariantConfig):
        self.config = config

    @property
    def needs_full_logprobs(self) -> bool:
        """The exact KL, the merged KL and the expected choice read the whole distribution; the rest only
        the sampled ids (then the trainer skips the [B, T, V] log-softmax)."""
        v = self.config
        return v.kl_estimator == "exact" or v.kl_tokens == "not_choice" or v.choice_gradient == "expected"

    def prepare(self, groups: list[list[Trajectory]], advantages: list[list[float]], tokenizer) -> list[Any]:
        v = self.config
        if v.choice_gradient == "sampled" and v.policy_tokens == "all" and v.kl_tokens == "all":
            return [(None, None) for g in groups for _ in g]
        out: list[Any] = []
        for g, a in zip(groups, advantages):
            names = [call_name_mask(t.ids, t.mask, tokenizer) for t in g]
            choices = name_choices(g, a, names, tokenizer) if v.choice_gradient == "expected" else [None] * len(g)
            out += list(zip(names, choices))
        return out

    def __call__(self, b: MicroBatch, cfg: GRPOConfig):
        v, dev = self.config, b.mask.device
        kl = (None if cfg.kl_coef <= 0 else _kl_not_choice(b) if v.kl_tokens == "not_choice"
              else KL_ESTIMATORS[v.kl_estimator](b))
        pg_mask = high_entropy_mask(b.entropy, b.mask, v.top_entropy_quantile) if v.top_entropy_quantile < 1 else None
        kl_mask = None
        if v.policy_tokens == "tool_names" or v.kl_tokens == "not_names":
            names = _pad_masks([e[0] for e in b.extra], b.start + 1 + b.mask.shape[1])[:, b.start + 1:].to(dev)
            if v.policy_tokens == "tool_names":
                pg_mask = names * (pg_mask if pg_mask is not None else 1.0)
            if v.kl_tokens == "not_names":
                kl_mask = b.mask * (1.0 - names)
        choice_loss = None
        spots = _choice_spots(b)
        if spots:  # at each choice, the expected term replaces the sampled one
            choice_loss = torch.zeros_like(b.logp)
            pg_mask = (pg_mask if pg_mask is not None else b.mask).clone()
            for i, k, ids, values in spots:
                pg_mask[i, k] = 0.0
                choice_loss[i, k] = expected_choice(b.logp_all[i, k][None], torch.tensor([ids], device=dev),
                                                    torch.tensor([values], dtype=torch.float32, device=dev),
                                                    v.choice_baseline)[0]
        return masked_grpo_loss(b.logp, b.old_logp, b.adv, b.mask, kl, clip_low=cfg.clip_low,
                                clip_high=cfg.clip_high, kl_coef=cfg.kl_coef, level=cfg.loss_level,
                                pg_mask=pg_mask, kl_mask=kl_mask, choice_loss=choice_loss)
