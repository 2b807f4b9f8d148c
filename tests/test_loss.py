"""GRPO loss functions (the paper's, and the variants') against values computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from orchlib.experiments.variants import (VariantConfig, expected_choice, high_entropy_mask, kl_exact, kl_merged,
                                          masked_grpo_loss, preference_contrast, tool_values)
from orchlib.train.loss import (clipped_surrogate, group_advantages, grpo_loss, keep_groups, kl_k3, masked_mean,
                                token_logprobs)


def test_token_logprobs_by_hand():
    logits = torch.tensor([[[0.0, 0.0, math.log(2.0)], [math.log(3.0), 0.0, 0.0]]])  # [1, 2, 3]
    ids = torch.tensor([[2, 0]])
    got = token_logprobs(logits, ids)
    assert torch.allclose(got, torch.tensor([[math.log(2 / 4), math.log(3 / 5)]]))
    hot = token_logprobs(logits, ids, temperature=0.5)  # logits doubled: 4/(1+1+4), 9/(9+1+1)
    assert torch.allclose(hot, torch.tensor([[math.log(4 / 6), math.log(9 / 11)]]))


def test_group_advantages_std_and_mean_only():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [3.0, 1.0, 2.0, 2.0]])
    adv = group_advantages(r, eps=0.0)
    assert torch.allclose(adv[0], torch.tensor([1.0, -1.0, -1.0, 1.0]))
    std = math.sqrt(0.5)  # population std of [3, 1, 2, 2]
    assert torch.allclose(adv[1], torch.tensor([1.0, -1.0, 0.0, 0.0]) / std)
    assert torch.allclose(group_advantages(r, "none"), torch.tensor([[.5, -.5, -.5, .5], [1.0, -1.0, 0.0, 0.0]]))


def test_equal_rewards_give_zero_advantage_and_are_filtered():
    r = torch.tensor([[0.7, 0.7, 0.7], [0.0, 1.0, 0.0]])
    assert torch.equal(group_advantages(r)[0], torch.zeros(3))
    assert keep_groups(r, 1e-6).tolist() == [False, True]


def test_clipped_surrogate_by_hand():
    old = torch.zeros(4)
    logp = torch.log(torch.tensor([1.5, 1.5, 0.5, 0.5]))
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    loss, clipped = clipped_surrogate(logp, old, adv, clip_low=0.2, clip_high=0.28)
    # ratio 1.5, A=+1: min(1.5, 1.28) = 1.28 (clipped); A=-1: min(-1.5, -1.28) = -1.5
    # ratio 0.5, A=+1: min(0.5, 0.8) = 0.5; A=-1: min(-0.5, -0.8) = -0.8 (clipped)
    assert torch.allclose(loss, torch.tensor([-1.28, 1.5, -0.5, 0.8]))
    assert clipped.tolist() == [True, False, False, True]


def test_kl_k3_by_hand_and_nonnegative():
    kl = kl_k3(torch.log(torch.tensor([0.5])), torch.log(torch.tensor([0.25])))
    assert torch.allclose(kl, torch.tensor([0.5 + math.log(2) - 1]))
    assert torch.equal(kl_k3(torch.tensor([-1.0]), torch.tensor([-1.0])), torch.zeros(1))
    x = torch.randn(1000)
    assert (kl_k3(x, torch.randn(1000)) >= 0).all()


def test_kl_exact_by_hand_and_against_torch():
    p, q = torch.tensor([0.5, 0.25, 0.25]), torch.tensor([0.25, 0.25, 0.5])
    got = kl_exact(p.log()[None, None], q.log()[None, None])
    assert torch.allclose(got, torch.tensor([[0.5 * math.log(2) + 0.25 * math.log(0.5)]]))  # = 0.25 ln 2
    logits, ref = torch.randn(2, 3, 7), torch.randn(2, 3, 7)
    lp, lr = torch.log_softmax(logits, -1), torch.log_softmax(ref, -1)
    # torch's kl_div(input=log q, target=log p, log_target) is sum p (log p - log q) = KL(p || q)
    want = torch.nn.functional.kl_div(lr, lp, reduction="none", log_target=True).sum(-1)
    assert torch.allclose(kl_exact(lp, lr), want, atol=1e-6)
    assert torch.allclose(kl_exact(lp, lp), torch.zeros(2, 3), atol=1e-6)


def test_masked_grpo_loss_uses_a_given_per_token_kl():
    logp = torch.log(torch.tensor([[0.5, 0.5]]))
    mask, zero = torch.ones(1, 2), torch.zeros(1)
    per_token = torch.tensor([[0.2, 0.4]])
    loss, stats = masked_grpo_loss(logp, logp, zero, mask, per_token, kl_coef=0.5)
    assert math.isclose(loss.item(), 0.5 * 0.3, rel_tol=1e-6) and math.isclose(stats["kl"].item(), 0.3, rel_tol=1e-6)
    held, _ = masked_grpo_loss(logp, logp, zero, mask, per_token, kl_coef=0.5, kl_mask=torch.tensor([[1.0, 0.0]]))
    assert math.isclose(held.item(), 0.5 * 0.2 / 2, rel_tol=1e-6)  # still averaged over both masked tokens


def test_masked_mean_token_vs_sequence():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert math.isclose(masked_mean(x, mask, "token").item(), 7 / 3, rel_tol=1e-6)
    assert math.isclose(masked_mean(x, mask, "sequence").item(), 2.75, rel_tol=1e-6)


def test_grpo_loss_combines_surrogate_and_kl():
    logp = torch.log(torch.tensor([[0.5, 0.5]]))
    old = logp.clone()
    ref = torch.log(torch.tensor([[0.25, 0.5]]))
    mask = torch.tensor([[1, 1]])
    adv = torch.tensor([2.0])
    loss, stats = grpo_loss(logp, old, adv, mask, ref, kl_coef=0.1)
    kl = (0.5 + math.log(2) - 1 + 0.0) / 2
    assert math.isclose(loss.item(), -2.0 + 0.1 * kl, rel_tol=1e-5)
    assert math.isclose(stats["kl"].item(), kl, rel_tol=1e-5) and stats["clip_frac"].item() == 0.0


def test_gradient_pushes_up_positive_advantage_tokens():
    logits = torch.zeros(1, 1, 3, requires_grad=True)
    ids = torch.tensor([[1]])
    logp = token_logprobs(logits, ids)
    loss, _ = grpo_loss(logp, logp.detach(), torch.tensor([1.0]), torch.ones(1, 1))
    loss.backward()
    g = logits.grad[0, 0]
    assert g[1] < 0 and g[0] > 0 and g[2] > 0  # descending the loss raises the sampled token's logit


def test_high_entropy_mask_keeps_the_top_share_of_masked_tokens():
    ent = torch.tensor([[0.9, 0.1, 0.5, 0.7], [0.3, 0.8, 0.2, 2.0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])  # 2.0 is padding: never counted, never kept
    kept = high_entropy_mask(ent, mask, 0.25)
    values = sorted(ent[mask.bool()].tolist(), reverse=True)  # 7 masked tokens; the top quarter is 2 of them
    threshold = torch.quantile(torch.tensor(values), 0.75).item()
    expect = [[float(m and e >= threshold) for e, m in zip(er, mr)] for er, mr in zip(ent.tolist(), mask.tolist())]
    assert kept.tolist() == expect and kept.sum().item() == 2 and kept[0, 0] == 1 and kept[1, 1] == 1
    assert high_entropy_mask(ent, mask, 1.0).tolist() == mask.float().tolist()


def test_pg_mask_restricts_the_surrogate_but_not_the_kl_or_the_average():
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.5]]))
    ref = torch.log(torch.tensor([[0.25, 0.25, 0.5]]))
    mask, pg = torch.ones(1, 3), torch.tensor([[0.0, 1.0, 0.0]])
    loss, stats = masked_grpo_loss(logp, logp.clone(), torch.tensor([2.0]), mask, kl_k3(logp, ref), kl_coef=0.1,
                                   pg_mask=pg)
    kl = (0.5 + math.log(2) - 1) / 3  # only the first token differs from the reference
    assert math.isclose(loss.item(), -2.0 / 3 + 0.1 * kl, rel_tol=1e-5)
    assert math.isclose(stats["kl"].item(), kl, rel_tol=1e-5)


def test_kl_mask_restricts_the_kl_term_but_not_its_logged_value_or_the_average():
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.5]]))
    ref = torch.log(torch.tensor([[0.25, 0.125, 0.5]]))
    mask = torch.ones(1, 3)
    k1, k2 = 0.5 + math.log(2) - 1, 0.5 + math.log(2) - 1  # ref/p = 1/2 at the first two tokens
    loss, stats = masked_grpo_loss(logp, logp.clone(), torch.tensor([0.0]), mask, kl_k3(logp, ref), kl_coef=0.1,
                                   kl_mask=torch.tensor([[0.0, 1.0, 1.0]]))  # the first token (a name) left out
    assert math.isclose(loss.item(), 0.1 * k2 / 3, rel_tol=1e-5)
    assert math.isclose(stats["kl"].item(), (k1 + k2) / 3, rel_tol=1e-5)
    logp.requires_grad_(True)
    loss, _ = masked_grpo_loss(logp, logp.detach(), torch.tensor([0.0]), mask, kl_k3(logp, ref), kl_coef=0.1,
                               kl_mask=torch.tensor([[0.0, 1.0, 1.0]]))
    loss.backward()
    assert logp.grad[0, 0] == 0 and logp.grad[0, 1] != 0


def test_preference_contrast_takes_out_what_the_profiles_share_per_tool():
    # task q under two profiles, task r under one. Tool g on q: group means 1 and 0 -> shared 0.5;
    # tool c: -1 and 0 -> shared -0.5. Task r has no partner and is left as it is.
    adv = torch.tensor([[1.0, -1.0, 1.0, -1.0], [0.0, 0.0, 0.0, 0.0], [2.0, 0.0, 0.0, 0.0]])
    tasks = ["q", "q", "r"]
    choices = [["g", "c", "g", "c"], ["g", "g", "c", "c"], ["g", "c", "c", "c"]]
    full = preference_contrast(adv, tasks, choices)
    assert torch.allclose(full, torch.tensor([[0.5, -0.5, 0.5, -0.5], [-0.5, -0.5, 0.5, 0.5], [2.0, 0.0, 0.0, 0.0]]))
    half = preference_contrast(adv, tasks, choices, weight=0.5)
    assert torch.allclose(half, torch.tensor([[0.75, -0.75, 0.75, -0.75], [-0.25, -0.25, 0.25, 0.25],
                                              [2.0, 0.0, 0.0, 0.0]]))
    assert torch.equal(preference_contrast(adv, tasks, choices, weight=0.0), adv)
    assert torch.equal(adv[0], torch.tensor([1.0, -1.0, 1.0, -1.0]))  # the input is not changed


def test_preference_contrast_counts_a_tool_missing_from_one_profile_as_zero_there():
    # tool g only under the first profile (mean 0.6): shared 0.3, so 0.3 of its push is left;
    # None (no call) only under the second (mean -1.2): shared -0.6
    adv = torch.tensor([[0.6, 0.6], [-1.2, 0.4]])
    got = preference_contrast(adv, ["q", "q"], [["g", "g"], [None, "c"]])
    assert torch.allclose(got, torch.tensor([[0.3, 0.3], [-0.6, 0.2]]))


def test_preference_contrast_can_leave_a_profile_that_did_not_try_a_tool_out_of_its_shared_part():
    # g and c were tried under both profiles: shared 0.375 and -0.5 either way. h only under the first
    # (mean 0.5): "absent" takes all of it out (no push on h), "zero" leaves half of it
    adv = torch.tensor([[1.0, -1.0, 0.5, 0.5], [0.0, 0.0, 2.0, -2.0]])
    choices = [["g", "c", "g", "h"], ["g", "g", "c", "c"]]
    absent = preference_contrast(adv, ["q", "q"], choices, unseen="absent")
    assert torch.allclose(absent, torch.tensor([[0.625, -0.5, 0.125, 0.0], [-0.375, -0.375, 2.5, -1.5]]))
    zero = preference_contrast(adv, ["q", "q"], choices, unseen="zero")
    assert torch.allclose(zero, torch.tensor([[0.625, -0.5, 0.125, 0.25], [-0.375, -0.375, 2.5, -1.5]]))
    # the first test's case: every tool tried under one profile only, so nothing is left to push
    lone = preference_contrast(torch.tensor([[0.6, 0.6], [-1.2, 0.4]]), ["q", "q"], [["g", "g"], [None, "c"]],
                               unseen="absent")
    assert torch.equal(lone, torch.zeros(2, 2))


def test_preference_contrast_applies_to_the_contrasted_categories_only():
    from orchlib.tasks import Task
    from orchlib.experiments.variants import PreferenceContrast

    # task a (gsm8k) and task b (arithmetic), each under two profiles; only gsm8k is contrasted
    adv = torch.tensor([[1.0, -1.0], [0.0, 0.0], [0.5, -0.5], [0.25, -0.25]])
    tasks = [Task(id="a", prompt="q", answer="1", category="gsm8k")] * 2 + \
        [Task(id="b", prompt="r", answer="2", category="arithmetic")] * 2
    groups = [[_called(n) for n in names] for names in (["g", "c"], ["g", "c"], ["g", "c"], ["g", "c"])]
    keep = torch.tensor([True, False, True, True])
    got, kept = PreferenceContrast(1.0, "absent", ("gsm8k",))(adv, keep, tasks, groups)
    want = preference_contrast(adv[:2], ["a", "a"], [["g", "c"], ["g", "c"]], unseen="absent")
    assert torch.allclose(got[:2], want) and not torch.allclose(want, adv[:2])
    assert torch.equal(got[2:], adv[2:])  # arithmetic's groups keep their own advantages
    assert kept.tolist() == [True, True, True, True]  # a's flat group goes in with its partner


def _called(name: str):
    from orchlib.trajectory import ToolCall, Trajectory, Turn

    return Trajectory(task_id="t", turns=[Turn(text="", calls=[ToolCall(name=name)])])


def test_tool_values_are_each_tools_mean_advantage_in_the_group():
    got = tool_values([0.5, -0.25, 0.25, -1.0, 2.0], ["g", "c", "g", None, "c"])
    assert got == {"g": 0.375, "c": 0.875}  # None (no call) has no value


def test_expected_choice_has_the_expected_sampled_gradient():
    # the gradient of -sum_t p_t A_t equals E_t~p[-A_t grad log p_t] = -sum_t p_t A_t grad log p_t,
    # computed here from the softmax's Jacobian written out by hand
    logits = torch.tensor([0.3, -1.2, 0.8, 0.1], requires_grad=True)
    ids, values = torch.tensor([[0, 2]]), torch.tensor([[0.6, -0.4]])
    loss = expected_choice(torch.log_softmax(logits, -1)[None], ids, values)
    loss.sum().backward()
    p = torch.softmax(logits.detach(), -1)
    want = torch.zeros(4)
    for t, a in ((0, 0.6), (2, -0.4)):
        grad_logp = -p.clone()
        grad_logp[t] += 1.0  # d log p_t / d logits = onehot(t) - p
        want -= p[t] * a * grad_logp
    assert torch.allclose(logits.grad, want, atol=1e-6)
    assert math.isclose(loss.item(), -(p[0] * 0.6 - p[2] * 0.4).item(), rel_tol=1e-6)


def test_expected_choice_with_the_tried_baseline_moves_mass_among_the_tried_tools_only():
    # values whose p-weighted sum is negative (as after the contrast): with b = 0 the ids that name no
    # tried tool (1 and 3) gain mass; with b = the tried tools' p-weighted mean their gradient is 0, and
    # a tried tool's is -p_t (A_t - b), written out by hand
    logits = torch.tensor([0.3, -1.2, 0.8, 0.1])
    ids, values = torch.tensor([[0, 2]]), torch.tensor([[-0.6, -0.1]])
    p = torch.softmax(logits, -1)
    grads = {}
    for baseline in ("zero", "tried"):
        z = logits.clone().requires_grad_(True)
        expected_choice(torch.log_softmax(z, -1)[None], ids, values, baseline).sum().backward()
        grads[baseline] = z.grad
    assert grads["zero"][1] < 0 and grads["zero"][3] < 0  # a descent step raises their logits: mass leaks out
    b = (p[0] * -0.6 + p[2] * -0.1) / (p[0] + p[2])
    want = torch.zeros(4)
    for t, a in ((0, -0.6), (2, -0.1)):
        grad_logp = -p.clone()
        grad_logp[t] += 1.0
        want -= p[t] * (a - b) * grad_logp
    assert torch.allclose(grads["tried"], want, atol=1e-6)
    assert abs(grads["tried"][1]) < 1e-7 and abs(grads["tried"][3]) < 1e-7
    assert grads["tried"][0] > 0 > grads["tried"][2]  # descent moves mass from tool 0 to tool 2


def test_kl_merged_holds_the_mass_that_leaves_the_tried_tools_and_frees_the_split_among_them():
    ref = torch.log(torch.tensor([0.30, 0.30, 0.39, 0.01]))
    tools = torch.tensor([0, 1])
    # one id merged is the exact KL itself
    pol = torch.log(torch.tensor([0.1, 0.2, 0.3, 0.4]))
    assert torch.isclose(kl_merged(pol, ref, torch.tensor([2])), kl_exact(pol[None], ref[None])[0], atol=1e-6)
    # mass moved between the two tools only: nothing to pay; the exact KL would charge it
    split = torch.log(torch.tensor([0.55, 0.05, 0.39, 0.01]))
    assert abs(float(kl_merged(split, ref, tools))) < 1e-6 and float(kl_exact(split[None], ref[None])[0]) > 0.2
    # mass moved from the tools to id 3 (an id that names no tool): the merged KL, written out by hand
    leak = torch.tensor([0.25, 0.25, 0.39, 0.11])
    want = 0.39 * math.log(0.39 / 0.39) + 0.11 * math.log(0.11 / 0.01) + 0.5 * math.log(0.5 / 0.6)
    assert math.isclose(float(kl_merged(torch.log(leak), ref, tools)), want, rel_tol=1e-5)


def test_kl_not_choice_needs_the_exact_kl_and_the_expected_choice():
    with pytest.raises(ValueError, match="not_choice"):
        VariantConfig(kl_tokens="not_choice", kl_estimator="k3", choice_gradient="expected")
    with pytest.raises(ValueError, match="not_choice"):
        VariantConfig(kl_tokens="not_choice", kl_estimator="exact")
    VariantConfig(kl_tokens="not_choice", kl_estimator="exact", choice_gradient="expected")


def test_choice_loss_replaces_the_surrogate_where_pg_mask_leaves_it_out():
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.5]]))
    choice = torch.tensor([[-0.3, 0.0, 0.0]])
    loss, _ = masked_grpo_loss(logp, logp.clone(), torch.tensor([2.0]), torch.ones(1, 3),
                               pg_mask=torch.tensor([[0.0, 1.0, 1.0]]), choice_loss=choice)
    assert math.isclose(loss.item(), (-0.3 - 2.0 - 2.0) / 3, rel_tol=1e-6)


def test_masked_grpo_loss_without_its_parts_is_grpo_loss():
    # the variants' loss with nothing left out and the k3 KL is the paper's objective, value and gradient
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.5], [0.125, 0.5, 0.25]])).requires_grad_(True)
    old = torch.log(torch.tensor([[0.4, 0.25, 0.6], [0.125, 0.45, 0.25]]))
    ref = torch.log(torch.tensor([[0.25, 0.25, 0.5], [0.25, 0.5, 0.125]]))
    adv, mask = torch.tensor([1.5, -0.5]), torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    for level in ("token", "sequence"):
        want, ws = grpo_loss(logp, old, adv, mask, ref, kl_coef=0.2, level=level)
        (want_grad,) = torch.autograd.grad(want, logp)
        got, gs = masked_grpo_loss(logp, old, adv, mask, kl_k3(logp, ref), kl_coef=0.2, level=level)
        (got_grad,) = torch.autograd.grad(got, logp)
        assert torch.allclose(got, want) and torch.allclose(got_grad, want_grad)
        assert set(gs) == set(ws) == {"clip_frac", "kl"} and all(torch.allclose(gs[k], ws[k]) for k in gs)
