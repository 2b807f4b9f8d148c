"""SFT warm start + GRPO on the tiny model: the format is learned, then an update moves the policy towards
the better tool.

The GRPO tests roll out with a scripted engine (tests/train_worker.py's `scripted_engine`): which tool each
episode calls is chosen, and each written id carries the policy's own log-prob, so the rewards, the kept
groups and the advantages are the same on every CPU and what is checked is true by construction."""

from __future__ import annotations

import random

import pytest
import torch
from conftest import TOY_ROLLOUT

from orchlib.env import Environment
from orchlib.envs.toy import toy_tasks, toy_toolbox
from orchlib.models import load_policy
from orchlib.reward import Reward
from orchlib.chat import TOOL_CALL
from orchlib.experiments.variants import QuotaDraw, VariantConfig, balanced_draw
from orchlib.rollout import RolloutConfig, rollout
from orchlib.train import GRPOConfig, LoraSettings, Trainer, golden_trajectories, lr_factor
from orchlib.train.loss import token_logprobs
from train_worker import scripted_engine

PAIRED = VariantConfig(paired_profiles=("accuracy", "thrifty"))

# Scripts for paired profiles (group_size 8: a task's first 8 episodes are under "accuracy", the next 8
# under "thrifty"). A mixed group calls both tools, so `right` (outcome 1) and `wrong` (outcome 0) get
# different rewards under either profile and the group is kept; a group that calls one tool only has
# rewards all equal and is left out.
MIXED, ALL_RIGHT, ALL_WRONG = ["right", "wrong"] * 4, ["right"] * 8, ["wrong"] * 8
PAIRED_SCRIPTS = [(MIXED, MIXED), (MIXED, ALL_RIGHT), (ALL_WRONG, MIXED), (ALL_RIGHT, ALL_WRONG)]


def _paired_scripts(tasks) -> dict[str, list[str]]:
    """Task i's 16 episodes: the (accuracy, thrifty) pair PAIRED_SCRIPTS[i % 4]."""
    return {t.id: a + b for i, t in enumerate(tasks) for a, b in [PAIRED_SCRIPTS[i % len(PAIRED_SCRIPTS)]]}


def _scripted(trainer, script):
    """The trainer's rollouts written by `script`, each id with the trainer's own policy's log-prob."""
    trainer.engine = scripted_engine(trainer.tokenizer, trainer.env.train, script,
                                     model=trainer.accelerator.unwrap_model(trainer.model))
    return trainer.engine


def test_golden_trajectories_sample_both_tools_and_sft_learns_the_format(toy_warm):
    _, gold, report = toy_warm
    chosen = [t.turns[0].calls[0].name for t in gold]
    assert 0.25 < chosen.count("right") / len(chosen) < 0.75  # the choice is left to RL
    assert all(t.finish_reason == "final_tool" and t.errors == {} for t in gold)
    assert report.losses[-1] < 0.1 * report.losses[0]


def test_golden_trajectories_each_writes_every_alternative_once_per_task(tiny_policy):
    tasks = toy_tasks(5)
    gold = golden_trajectories(tasks, toy_toolbox(), tiny_policy[1], RolloutConfig(**TOY_ROLLOUT), per_task=2,
                               alternatives="each")
    pairs = sorted((t.task_id, t.turns[0].calls[0].name) for t in gold)
    assert pairs == sorted((t.id, name) for t in tasks for name in ("right", "wrong") for _ in range(2))
    assert all(t.finish_reason == "final_tool" and t.errors == {} for t in gold)
    with pytest.raises(ValueError, match='"draw" or "each"'):
        golden_trajectories(tasks, toy_toolbox(), tiny_policy[1], alternatives="all")


def _update_grads(trainer, trajs, adv, group_size) -> dict[str, torch.Tensor]:
    """The gradient `trainer._update` computes, per parameter, read just before its optimiser step
    (which is then skipped); the token loss prepared over groups of `group_size`, as a step does."""
    grads = {}
    trainer.optimizer.step = lambda *a, **k: grads.update(
        {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None})
    cut = range(0, len(trajs), group_size)
    extra = trainer.hooks.token_loss.prepare([trajs[i:i + group_size] for i in cut],
                                             [adv[i:i + group_size] for i in cut], trainer.tokenizer)
    trainer._update(trajs, adv, extra)
    return grads


def _kl_grads_off_reference(trainer, trajs, group_size, folder):
    """With zero advantages, the update's gradient after the policy is moved off its reference (so that
    the KL has one); and a train-mode copy of the moved policy and the reference, to recompute it."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    moved = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    grads = _update_grads(trainer, trajs, [0.0] * len(trajs), group_size)
    check, ref = load_policy(folder)[0].train(), load_policy(folder)[0].eval()
    with torch.no_grad():
        for n, p in check.named_parameters():
            p.copy_(moved[n])
    return grads, check, ref


def _assert_grads_match(grads, check) -> None:
    """Every gradient in `grads` equals the one backward() left on `check`'s parameter; some are not 0."""
    want = dict(check.named_parameters())
    for n, g in grads.items():
        assert torch.allclose(g, want[n].grad, atol=1e-6, rtol=1e-4), n
    assert any(g.abs().sum() > 0 for g in grads.values())


def _name_logprob(model, traj, tok) -> float:
    """log p of the ids spelling the first called tool's name, at their place in `traj` (temperature 1)."""
    span = _name_spans(traj, tok)[0]
    ids = torch.tensor([traj.ids[:span.stop]], device=model.device)
    with torch.no_grad():
        logp = token_logprobs(model(input_ids=ids).logits[:, :-1], ids[:, 1:])[0]
    return float(logp[span.start - 1:span.stop - 1].sum())


def test_a_grpo_step_raises_the_rewarded_call_and_lowers_the_other(toy_warm):
    # Each task's 8 rollouts call `right` (outcome 1) and `wrong` (outcome 0) four times each: every group
    # is kept and `right` has the positive advantage by construction. After one update, the policy gives
    # the name `right` a higher log-prob and `wrong` a lower one, on fixed conversations (one of each per
    # task, written before the step), and every weight moved.
    cfg = GRPOConfig(rollout=RolloutConfig(**TOY_ROLLOUT), kl_coef=0.0, seed=0, tasks_per_step=4)
    tasks = toy_tasks(4)
    env = Environment(train=tasks, tools=toy_toolbox(), reward=Reward.from_string("name: accuracy\nreward: outcome"))
    trainer = Trainer(load_policy(toy_warm[0]), env, cfg)
    tok, model = trainer.tokenizer, trainer.accelerator.unwrap_model(trainer.model)
    fixed = rollout(Environment(train=tasks, tools=trainer.toolbox), scripted_engine(tok, tasks, ["right", "wrong"]),
                    config=cfg.rollout, group_size=2)
    _scripted(trainer, ["right", "wrong"] * 4)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    was = [_name_logprob(model, t, tok) for t in fixed]
    report = trainer.step()
    assert report.rewards == [1.0, 0.0] * 16 and report.metrics["groups_kept"] == 4
    assert all((a > 0) == (r == 1.0) for a, r in zip(report.advantages, report.rewards))
    now = [_name_logprob(model, t, tok) for t in fixed]
    assert [t.turns[0].calls[0].name for t in fixed] == ["right", "wrong"] * 4
    assert all(b > a for a, b in zip(was[0::2], now[0::2])), (was, now)  # `right`, rewarded: up
    assert all(b < a for a, b in zip(was[1::2], now[1::2])), (was, now)  # `wrong`: down
    unchanged = [n for n, p in trainer.model.named_parameters() if p.requires_grad and torch.equal(before[n], p)]
    assert unchanged == []
    m = report.metrics
    for key in ("accuracy", "cost_usd", "latency_s", "calls/right", "tokens", "grad_norm", "entropy",
                "clip_frac", "time/rollout", "time/update", "groups_kept", "groups_filtered", "reward/reward"):
        assert key in m, key
    assert m["share/right"] == m["accuracy"] == 0.5 and m["clip_frac"] == 0.0  # the ratio starts at 1
    assert len(report.trajectories) == 4 * 8 and len(trainer.history) == 1


def test_lora_trains_only_the_adapter_and_kl_uses_the_disabled_adapter(toy_warm):
    cfg = GRPOConfig(rollout=RolloutConfig(**TOY_ROLLOUT), learning_rate=1e-3, kl_coef=0.05, seed=1,
                     lora=LoraSettings(r=4))
    model, tok = load_policy(toy_warm[0])
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = Trainer((model, tok), Environment(train=toy_tasks(), tools=toy_toolbox(),
                                                reward=Reward.from_string("name: a\nreward: outcome")), cfg)
    _scripted(trainer, ["right", "wrong"] * 4)  # every group kept: each of the 3 steps updates the adapter
    assert trainer.ref_model is None  # no second copy with PEFT
    trainable = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if n in trainable}
    reports = trainer.run(3, progress=False)
    assert all(r.metrics["groups_kept"] == 4 and r.metrics["kl"] >= 0.0 for r in reports)
    assert reports[0].metrics["kl"] == 0.0  # the adapter's B starts at 0: the policy is its reference
    # B moves at the first step; A, whose gradient is 0 while B is, from the second
    changed = [n for n, p in trainer.model.named_parameters() if n in trainable and not torch.equal(before[n], p)]
    assert len(changed) == len(trainable)
    frozen = {n.replace("base_model.model.", "").replace(".base_layer", ""): p
              for n, p in trainer.model.named_parameters() if n not in trainable}
    assert all(torch.equal(base[n], frozen[n].cpu()) for n in base)


def test_a_lora_run_on_a_built_policy_resumes_with_its_warm_started_base_and_adapter(policy_cache, tmp_path):
    # `orchlib train` with `policy: tiny` and `grpo.lora`: the base is built, not loaded, and its SFT warm
    # start changed it before the adapter went on; a resumed run must get both back
    from orchlib.models import build_default_policy

    model, tok = build_default_policy("tiny", cache=policy_cache)
    with torch.no_grad():  # a stand-in for the warm start: the base is no longer the built one
        for p in model.parameters():
            p.add_(0.01)
    cfg = GRPOConfig(rollout=RolloutConfig(**TOY_ROLLOUT), learning_rate=1e-3, seed=1, lora=LoraSettings(r=4))
    env = Environment(train=toy_tasks(), tools=toy_toolbox(), reward=Reward.from_string("name: a\nreward: outcome"))
    trainer = Trainer((model, tok), env, cfg, policy_source="tiny")
    engine = trainer.engine
    _scripted(trainer, ["right", "wrong"] * 4)
    trainer.run(2, progress=False)
    trainer.engine = engine  # the checkpoint keeps the sampling engine's generator
    trainer.save(tmp_path / "ckpt")
    resumed = Trainer.resume(tmp_path / "ckpt", env)
    saved = dict(trainer.accelerator.unwrap_model(trainer.model).named_parameters())
    got = dict(resumed.accelerator.unwrap_model(resumed.model).named_parameters())
    assert sorted(saved) == sorted(got) and resumed.step_count == 2
    assert all(torch.equal(saved[n].detach().cpu(), got[n].detach().cpu()) for n in saved)
    assert any("lora_B" in n and bool(saved[n].abs().sum() > 0) for n in saved)  # the adapter had moved


def test_a_task_without_p_is_rewarded_under_the_p_its_prompt_shows(toy_warm):
    # the file's own default P (latency 0.5) must not leak in: the policy was shown the "default" profile
    reward = Reward.from_string("name: p\npreference:\n  latency: 0.5\nreward: outcome + P.latency")
    tasks = [t.model_copy(update={"preference": None}) for t in toy_tasks()]
    trainer = Trainer(load_policy(toy_warm[0]), Environment(train=tasks, tools=toy_toolbox(), reward=reward),
                      GRPOConfig(rollout=RolloutConfig(**TOY_ROLLOUT), kl_coef=0.0, seed=0))
    report = trainer.step()
    assert report.rewards == [t.outcome for t in report.trajectories]
    assert all(t.preference["name"] == "default" and t.preference["latency"] == 0.0 for t in report.trajectories)
    assert reward(report.trajectories[:8], P=None).tolist() == [t.outcome + 0.5 for t in report.trajectories[:8]]


def test_groups_kept_per_profile_counts_the_groups_whose_rewards_differ(toy_warm):
    # independent count: a group is kept when its rewards are not all equal (min_reward_spread default);
    # the scripts decide which groups those are (the mixed ones), so both counts are known in advance
    cfg = GRPOConfig(rollout=RolloutConfig(**TOY_ROLLOUT), kl_coef=0.0, seed=1, tasks_per_step=3)
    trainer = Trainer(load_policy(toy_warm[0]), Environment(train=toy_tasks(), tools=toy_toolbox(),
                                                            reward=Reward.load("rewards/toolorchestra.yaml")), cfg,
                      hooks=PAIRED.hooks())
    scripts = _paired_scripts(trainer.env.train)
    _scripted(trainer, scripts)
    G, seen = cfg.group_size, {"accuracy": 0, "thrifty": 0}
    for report in trainer.run(3, progress=False):
        want = {"accuracy": 0, "thrifty": 0}
        scripted = {"accuracy": 0, "thrifty": 0}
        for i in range(0, len(report.rewards), G):
            traj = report.trajectories[i]
            prof = traj.preference["name"]
            want[prof] += len(set(report.rewards[i:i + G])) > 1
            half = scripts[traj.task_id][:G] if prof == "accuracy" else scripts[traj.task_id][G:]
            scripted[prof] += half == MIXED
        got = {p: report.metrics[f"profile/{p}/groups_kept"] for p in want}
        assert got == want == scripted
        assert sum(got.values()) == report.metrics["groups_kept"]
        for p in seen:
            seen[p] += want[p]
    assert min(seen.values()) > 0  # the check above compared real kept groups of both profiles, not only zeros


def test_advantage_per_profile_and_tool_is_the_mean_over_the_rollouts_that_called_it(toy_warm):
    # recomputed from the report's own rollouts: a group whose rewards are all equal pushes nothing
    cfg = GRPOConfig(rollout=RolloutConfig(**TOY_ROLLOUT), kl_coef=0.0, seed=1, tasks_per_step=3)
    trainer = Trainer(load_policy(toy_warm[0]), Environment(train=toy_tasks(), tools=toy_toolbox(),
                                                            reward=Reward.load("rewards/toolorchestra.yaml")), cfg,
                      hooks=PAIRED.hooks())
    _scripted(trainer, _paired_scripts(trainer.env.train))  # mixed groups push, one-tool groups do not
    G, compared = cfg.group_size, 0
    for report in trainer.run(3, progress=False):
        sums, counts = {}, {}
        for i, (traj, adv) in enumerate(zip(report.trajectories, report.advantages)):
            start = i - i % G
            kept = len(set(report.rewards[start:start + G])) > 1
            for tool, n in traj.calls.items():
                if n:
                    key = f"profile/{traj.preference['name']}/advantage/{tool}"
                    sums[key] = sums.get(key, 0.0) + (adv if kept else 0.0)
                    counts[key] = counts.get(key, 0) + 1
        got = {k: v for k, v in report.metrics.items() if "/advantage/" in k}
        assert set(got) == set(sums)
        for k in sums:
            assert got[k] == pytest.approx(sums[k] / counts[k], abs=1e-9)
            compared += sums[k] != 0.0
    assert compared > 0  # some of the means compared were real pushes, not only zeros (the mixed groups')


def _name_spans(traj, tok) -> list[range]:
    """Positions in traj.ids of each called tool's name: its own ids, found after each sampled
    <tool_call> (independent of chat.call_name_mask)."""
    opens = [i for i, (x, m) in enumerate(zip(traj.ids, traj.mask)) if m and x == tok.convert_tokens_to_ids(TOOL_CALL)]
    names = [c.name for turn in traj.turns for c in turn.calls]
    assert len(opens) == len(names)
    spans = []
    for at, name in zip(opens, names):
        name_ids = tok.encode(name, add_special_tokens=False)
        pos = next(i for i in range(at, len(traj.ids)) if traj.ids[i:i + len(name_ids)] == name_ids)
        spans.append(range(pos, pos + len(name_ids)))
    return spans


def test_policy_tokens_tool_names_gives_the_gradient_of_the_name_ids_alone(toy_warm):
    # independent loss: -sum_i A_i * sum(log p of the ids spelling the called tool's name) / all sampled ids,
    # the name ids found by matching the tool name's own ids after the call's opening
    cfg = GRPOConfig(rollout=RolloutConfig(**TOY_ROLLOUT), kl_coef=0.0, seed=2, max_grad_norm=1e9)
    model, tok = load_policy(toy_warm[0])
    trainer = Trainer((model, tok), Environment(train=toy_tasks(), tools=toy_toolbox(),
                                                reward=Reward.from_string("name: a\nreward: outcome")), cfg,
                      hooks=VariantConfig(policy_tokens="tool_names").hooks())
    trajs = rollout(Environment(train=toy_tasks()[:2], tools=trainer.toolbox), _scripted(trainer, ["right", "wrong",
                                                                                                   "right"]),
                    config=cfg.rollout, group_size=3)
    adv = [1.0, -0.5, 0.25, -1.0, 2.0, 0.5]
    grads = _update_grads(trainer, trajs, adv, 3)

    check = load_policy(toy_warm[0])[0].train()
    n_sampled = sum(sum(t.mask[1:]) for t in trajs)
    loss, n_names = 0.0, 0
    for t, a in zip(trajs, adv):
        ids = torch.tensor([t.ids])
        logp = token_logprobs(check(input_ids=ids).logits[:, :-1] / cfg.rollout.temperature, ids[:, 1:])[0]
        for span in _name_spans(t, tok):
            loss = loss - a * logp[span.start - 1:span.stop - 1].sum()
            n_names += len(span)
    (loss / n_sampled).backward()
    assert n_names >= len(trajs)
    assert set(grads) == {n for n, _ in check.named_parameters()}
    _assert_grads_match(grads, check)


@pytest.mark.parametrize("unseen", ["zero", "absent"])
def test_preference_contrast_in_a_step_matches_an_independent_computation(toy_warm, unseen):
    # advantages recomputed from the report's rewards and first calls; a task's two groups are
    # both in the update or both out, so a flat group still carries the other profile's contrast.
    cfg = GRPOConfig(rollout=RolloutConfig(**TOY_ROLLOUT), kl_coef=0.0, seed=2, tasks_per_step=3)
    variants = VariantConfig(paired_profiles=("accuracy", "thrifty"), preference_contrast=1.0,
                             contrast_unseen=unseen)
    trainer = Trainer(load_policy(toy_warm[0]), Environment(train=toy_tasks(), tools=toy_toolbox(),
                                                            reward=Reward.load("rewards/toolorchestra.yaml")), cfg,
                      hooks=variants.hooks())
    # `right` has a positive mean advantage in every mixed group: its shared part is not 0 by construction
    _scripted(trainer, _paired_scripts(trainer.env.train))
    G, moved = cfg.group_size, 0
    for report in trainer.run(3, progress=False):
        groups = [list(range(i, i + G)) for i in range(0, len(report.rewards), G)]
        base = {}
        for g in groups:
            r = [report.rewards[i] for i in g]
            mean = sum(r) / G
            std = (sum((x - mean) ** 2 for x in r) / G) ** 0.5
            for i in g:
                base[i] = (report.rewards[i] - mean) / (std + 1e-6)
        first = {i: ([c.name for turn in report.trajectories[i].turns for c in turn.calls] or [None])[0] for i in base}
        for task in {report.trajectories[g[0]].task_id for g in groups}:
            pair = [g for g in groups if report.trajectories[g[0]].task_id == task]
            assert [report.trajectories[g[0]].preference["name"] for g in pair] == ["accuracy", "thrifty"]
            for tool in {first[i] for g in pair for i in g}:
                means = [[base[i] for i in g if first[i] == tool] for g in pair]
                tried = [sum(m) / len(m) for m in means if m]
                shared = sum(tried) / (len(tried) if unseen == "absent" else len(pair))
                for g in pair:
                    for i in (i for i in g if first[i] == tool):
                        assert report.advantages[i] == pytest.approx(base[i] - shared, abs=1e-5)
                        moved += abs(shared) > 1e-3
    assert moved > 0  # some shared parts were really taken out


def test_preference_contrast_needs_paired_profiles_of_known_names():
    with pytest.raises(ValueError, match="paired_profiles"):
        VariantConfig(preference_contrast=1.0, paired_profiles=("accuracy",))
    with pytest.raises(ValueError, match="unknown profile 'frugal'"):
        VariantConfig(paired_profiles=("accuracy", "frugal"))


def test_lr_factor_warms_up_then_decays_linearly_to_zero():
    assert [lr_factor(s, 0, None) for s in range(3)] == [1.0, 1.0, 1.0]
    assert [lr_factor(s, 3, None) for s in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    assert [lr_factor(s, 1, 4) for s in range(7)] == [0.5, 1.0, 0.75, 0.5, 0.25, 0.0, 0.0]


def test_decay_steps_sets_the_lr_each_update_uses(toy_warm):
    cfg = GRPOConfig(rollout=RolloutConfig(**TOY_ROLLOUT), learning_rate=1e-3, decay_steps=4, seed=0,
                     min_reward_spread=None)  # every group kept: every step is an optimizer step
    env = Environment(train=toy_tasks(), tools=toy_toolbox(),
                      reward=Reward.from_string("name: accuracy\nreward: outcome"))
    trainer = Trainer(load_policy(toy_warm[0]), env, cfg)
    _scripted(trainer, ["right", "wrong"] * 4)  # rewards that differ: the updates before the last move weights
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    lrs = [r.metrics["lr"] for r in trainer.run(5, progress=False)]
    assert lrs == pytest.approx([1e-3, 7.5e-4, 5e-4, 2.5e-4, 0.0])
    last = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.step()  # lr 0: AdamW (no weight decay) leaves the weights where they are
    assert all(torch.equal(last[n], p) for n, p in trainer.model.named_parameters())
    assert any(not torch.equal(before[n], last[n]) for n in before)


@pytest.mark.parametrize("estimator", ["k3", "exact"])
def test_kl_tokens_not_names_gives_the_kl_gradient_of_every_id_but_the_names(toy_warm, estimator):
    # zero advantages: the gradient is the KL term's alone. Independent loss: kl_coef * sum over the sampled
    # ids that do not spell a called tool's name / all sampled ids, against the unperturbed warm start, of
    # k3 at the sampled id, or of the KL over the whole vocabulary (torch's kl_div) at that position
    cfg = GRPOConfig(rollout=RolloutConfig(**TOY_ROLLOUT), kl_coef=0.5, seed=3, max_grad_norm=1e9)
    model, tok = load_policy(toy_warm[0])
    trainer = Trainer((model, tok), Environment(train=toy_tasks(), tools=toy_toolbox(),
                                                reward=Reward.from_string("name: a\nreward: outcome")), cfg,
                      hooks=VariantConfig(kl_tokens="not_names", kl_estimator=estimator).hooks())
    trajs = rollout(Environment(train=toy_tasks()[:2], tools=trainer.toolbox), _scripted(trainer, ["right", "wrong",
                                                                                                   "right"]),
                    config=cfg.rollout, group_size=3)
    grads, check, ref = _kl_grads_off_reference(trainer, trajs, 3, toy_warm[0])
    n_sampled = sum(sum(t.mask[1:]) for t in trajs)
    loss, n_kept = 0.0, 0
    for t in trajs:
        name_pos = {i for span in _name_spans(t, tok) for i in span}
        ids = torch.tensor([t.ids])
        logits = check(input_ids=ids).logits[0, :-1] / cfg.rollout.temperature
        logp = token_logprobs(logits[None], ids[:, 1:])[0]
        with torch.no_grad():
            ref_logits = ref(input_ids=ids).logits[0, :-1] / cfg.rollout.temperature
            ref_logp = token_logprobs(ref_logits[None], ids[:, 1:])[0]
        for i in range(1, len(t.ids)):
            if t.mask[i] and i not in name_pos:
                if estimator == "k3":
                    r = ref_logp[i - 1] - logp[i - 1]
                    loss = loss + torch.exp(r) - r - 1
                else:
                    loss = loss + torch.nn.functional.kl_div(torch.log_softmax(ref_logits[i - 1], -1),
                                                             torch.log_softmax(logits[i - 1], -1),
                                                             reduction="sum", log_target=True)
                n_kept += 1
    (cfg.kl_coef * loss / n_sampled).backward()
    assert 0 < n_kept < n_sampled  # names were left out, and only names
    _assert_grads_match(grads, check)


def test_kl_tokens_not_choice_merges_the_tried_tools_at_the_choice(toy_warm):
    # zero advantages: the gradient is the KL term's alone. Independent loss: the KL over the vocabulary at
    # every sampled id, except at the first id of a rollout's first call name, where the ids that start its
    # group's tried tools' names count as one outcome (written out here from the two softmaxes)
    cfg = GRPOConfig(rollout=RolloutConfig(**TOY_ROLLOUT), kl_coef=0.5, seed=3, max_grad_norm=1e9)
    model, tok = load_policy(toy_warm[0])
    variants = VariantConfig(kl_tokens="not_choice", kl_estimator="exact", choice_gradient="expected",
                             policy_tokens="tool_names")
    trainer = Trainer((model, tok), Environment(train=toy_tasks(), tools=toy_toolbox(),
                                                reward=Reward.from_string("name: a\nreward: outcome")), cfg,
                      hooks=variants.hooks())
    G = 3
    trajs = rollout(Environment(train=toy_tasks()[:2], tools=trainer.toolbox), _scripted(trainer, ["right", "wrong",
                                                                                                   "right"]),
                    config=cfg.rollout, group_size=G)
    grads, check, ref = _kl_grads_off_reference(trainer, trajs, G, toy_warm[0])
    n_sampled = sum(sum(t.mask[1:]) for t in trajs)
    loss, merged = 0.0, 0
    for g in range(0, len(trajs), G):
        group = trajs[g:g + G]
        firsts = {i: _name_spans(t, tok)[0].start for i, t in enumerate(group) if _name_spans(t, tok)}
        tried = sorted({group[i].ids[pos] for i, pos in firsts.items()})
        for i, t in enumerate(group):
            ids = torch.tensor([t.ids])
            logp = torch.log_softmax(check(input_ids=ids).logits[0, :-1] / cfg.rollout.temperature, -1)
            with torch.no_grad():
                ref_logp = torch.log_softmax(ref(input_ids=ids).logits[0, :-1] / cfg.rollout.temperature, -1)
            for pos in range(1, len(t.ids)):
                if not t.mask[pos]:
                    continue
                lp, rp = logp[pos - 1], ref_logp[pos - 1]
                if firsts.get(i) == pos:
                    inside = torch.zeros_like(lp, dtype=torch.bool)
                    inside[tried] = True
                    p_in, r_in = lp.exp()[inside].sum(), rp.exp()[inside].sum()
                    rest = (lp.exp()[~inside] * (lp[~inside] - rp[~inside])).sum()
                    loss = loss + rest + p_in * torch.log(p_in / r_in)
                    merged += 1
                else:
                    loss = loss + (lp.exp() * (lp - rp)).sum()
    (cfg.kl_coef * loss / n_sampled).backward()
    assert merged == len(trajs)  # every rollout's choice, each group having tried both tools
    _assert_grads_match(grads, check)


def test_choice_gradient_expected_gives_the_gradient_of_the_expected_first_choice(toy_warm):
    # independent loss: at the first id of each rollout's first call name, -sum_t p(t) * v(t), v(t) the
    # mean advantage of its group's rollouts that called t first and p(t) the softmax at that position
    # of tool t's own first id; every other name id keeps -A * log p; all over the sampled ids
    cfg = GRPOConfig(rollout=RolloutConfig(**TOY_ROLLOUT), kl_coef=0.0, seed=2, max_grad_norm=1e9)
    model, tok = load_policy(toy_warm[0])
    trainer = Trainer((model, tok), Environment(train=toy_tasks(), tools=toy_toolbox(),
                                                reward=Reward.from_string("name: a\nreward: outcome")), cfg,
                      hooks=VariantConfig(policy_tokens="tool_names", choice_gradient="expected").hooks())
    tasks = toy_tasks()[:2]
    script = {tasks[0].id: ["right", "right", "wrong", "right"], tasks[1].id: ["wrong", "right", "wrong", "wrong"]}
    trajs = rollout(Environment(train=tasks, tools=trainer.toolbox), _scripted(trainer, script), config=cfg.rollout,
                    group_size=4)
    adv = [1.0, -0.5, 0.25, -1.0, 2.0, 0.5, -0.75, 0.3]
    groups = [(trajs[:4], adv[:4]), (trajs[4:], adv[4:])]
    choices = [c for _, c in trainer.hooks.token_loss.prepare([g for g, _ in groups], [a for _, a in groups], tok)]
    grads = _update_grads(trainer, trajs, adv, 4)

    check = load_policy(toy_warm[0])[0].train()
    n_sampled = sum(sum(t.mask[1:]) for t in trajs)
    loss, two_tools = 0.0, 0
    for g, a in groups:
        first = [[c.name for turn in t.turns for c in turn.calls][0] for t in g]
        values = {n: sum(x for x, f in zip(a, first) if f == n) / first.count(n) for n in set(first)}
        two_tools += len(values) > 1
        for t, x in zip(g, a):
            ids = torch.tensor([t.ids])
            logits = check(input_ids=ids).logits[0, :-1] / cfg.rollout.temperature
            logp = token_logprobs(logits[None], ids[:, 1:])[0]
            spans = _name_spans(t, tok)
            at = spans[0].start - 1  # the position that predicts the first name's first id
            p = torch.softmax(logits[at], -1)
            loss = loss - sum(p[tok.encode(n, add_special_tokens=False)[0]] * v for n, v in values.items())
            for span in spans:
                for i in span:
                    if i - 1 != at:
                        loss = loss - x * logp[i - 1]
    (loss / n_sampled).backward()
    assert two_tools == 2 and all(c is not None for c in choices)
    assert set(grads) == {n for n, _ in check.named_parameters()}
    _assert_grads_match(grads, check)


def test_balance_categories_draws_every_category_evenly_each_step():
    tasks = [t.model_copy(update={"id": f"{t.id}-{i}", "category": c}) for i, t in enumerate(toy_tasks(12))
             for c in ["a" if i < 9 else "b"]]  # 9 of one category, 3 of the other
    assert VariantConfig(balance_categories=True).hooks().sampler is balanced_draw
    rng = random.Random(1)
    for _ in range(20):
        bundles = balanced_draw(rng, tasks, 5)
        assert all(len(b) == 1 for b in bundles)
        cats = sorted(b[0].category for b in bundles)
        assert len({b[0].id for b in bundles}) == 5 and cats.count("a") >= 2 and cats.count("b") >= 2
    plain = VariantConfig().hooks().sampler
    assert any(sum(b[0].category == "b" for b in plain(rng, tasks, 5)) < 2 for _ in range(20))  # a plain draw is not


def test_category_quota_draws_each_named_category_its_count_each_step():
    tasks = [t.model_copy(update={"id": f"{t.id}-{i}", "category": c}) for i, t in enumerate(toy_tasks(12))
             for c in ["a" if i < 6 else "b"]]
    sampler = VariantConfig(category_quota={"b": 3, "a": 1}).hooks().sampler
    assert sampler == QuotaDraw((("a", 1), ("b", 3)))
    rng = random.Random(2)
    for _ in range(10):
        four, six, two = ([b[0].category for b in sampler(rng, tasks, k)] for k in (4, 6, 2))
        assert (four.count("a"), four.count("b")) == (1, 3)
        assert len(six) == 6 and six.count("a") >= 1 and six.count("b") >= 3  # the other 2 at random
        assert two == ["a", "b"]  # the quota is cut to k, in the order given
        assert len({t.id for b in sampler(rng, tasks, 6) for t in b}) == 6
    with pytest.raises(ValueError, match="set one"):
        VariantConfig(category_quota={"a": 1}, balance_categories=True)


def test_paired_profiles_bundle_each_drawn_task_under_every_profile():
    tasks = toy_tasks(6)
    plain, paired = VariantConfig().hooks().sampler, PAIRED.hooks().sampler
    bundles = paired(random.Random(4), tasks, 3)
    drawn = [b[0] for b in plain(random.Random(4), tasks, 3)]  # the same draw: pairing takes no randomness
    assert [[t.id for t in b] for b in bundles] == [[t.id, t.id] for t in drawn]
    assert [[t.preference.name for t in b] for b in bundles] == [["accuracy", "thrifty"]] * 3


def test_variants_off_are_the_papers_hooks_and_a_checkpoint_names_its_own(toy_warm, tmp_path):
    from orchlib.train.hooks import Hooks, PaperLoss, keep_advantages, uniform_draw

    off = VariantConfig().hooks()
    assert off.sampler is uniform_draw and off.advantage is keep_advantages and isinstance(off.token_loss, PaperLoss)
    assert off.record == {} == Hooks().record
    cfg = GRPOConfig(rollout=RolloutConfig(**TOY_ROLLOUT), kl_coef=0.0, seed=0, tasks_per_step=1, group_size=2)
    trainer = Trainer(load_policy(toy_warm[0]), Environment(train=toy_tasks(), tools=toy_toolbox(),
                                                            reward=Reward.from_string("name: a\nreward: outcome")),
                      cfg, hooks=PAIRED.hooks())
    trainer.save(tmp_path / "ckpt")
    with pytest.raises(ValueError, match="trained with hooks .*paired_profiles"):
        Trainer.resume(tmp_path / "ckpt", Environment(train=toy_tasks(), tools=toy_toolbox(),
                                                      reward=Reward.from_string("name: a\nreward: outcome")))
    again = Trainer.resume(tmp_path / "ckpt", Environment(train=toy_tasks(), tools=toy_toolbox(),
                                                          reward=Reward.from_string("name: a\nreward: outcome")),
                           hooks=PAIRED.hooks())
    assert again.hooks.record == {"variants": {"paired_profiles": ["accuracy", "thrifty"]}}


def test_sft_replay_adds_coef_times_the_cross_entropy_of_its_draw_to_the_update(toy_warm):
    from orchlib.train import SFTExample
    from orchlib.experiments.replay import SFTReplay

    cfg = GRPOConfig(rollout=RolloutConfig(**TOY_ROLLOUT), kl_coef=0.0, seed=2, max_grad_norm=1e9)
    model, tok = load_policy(toy_warm[0])
    gold = toy_warm[1]
    replay = SFTReplay([SFTExample(g.ids, g.mask) for g in gold], coef=0.5, batch_size=3, seed=7)
    trainer = Trainer((model, tok), Environment(train=toy_tasks(), tools=toy_toolbox(),
                                                reward=Reward.from_string("name: a\nreward: outcome")), cfg,
                      hooks=VariantConfig().hooks().with_extra_loss(replay))
    assert trainer.hooks.record == {"extra_loss": {"coef": 0.5, "batch_size": 3, "seed": 7, "examples": len(gold)}}
    trajs = rollout(Environment(train=toy_tasks()[:2], tools=trainer.toolbox), trainer.engine, config=cfg.rollout,
                    group_size=2)
    grads = _update_grads(trainer, trajs, [0.0] * 4, 2)  # no advantage, no KL: the replay's gradient alone

    # independent: 0.5 x the mean cross-entropy over the labelled ids of the 3 examples drawn for step 0
    check = load_policy(toy_warm[0])[0].train()
    drawn = replay.draw(0)
    assert len(drawn) == 3 and replay.draw(0) == drawn and replay.draw(1) != drawn
    total, n = 0.0, 0
    for ex in drawn:
        ids = torch.tensor([ex.ids])
        logp = token_logprobs(check(input_ids=ids).logits[:, :-1].float(), ids[:, 1:])[0]
        labelled = torch.tensor(ex.mask[1:], dtype=torch.bool)
        total, n = total - logp[labelled].sum(), n + int(labelled.sum())
    (0.5 * total / n).backward()
    _assert_grads_match(grads, check)


def test_unlabel_names_takes_only_the_tool_names_ids_out_of_the_loss(toy_warm, tiny_policy):
    from orchlib.train import SFTExample
    from orchlib.experiments.replay import SFTReplay, unlabel_names

    tok = tiny_policy[1]
    for g in toy_warm[1][:4]:
        out = unlabel_names(SFTExample(g.ids, g.mask), tok)
        dropped = [i for i, (a, b) in enumerate(zip(g.mask, out.mask)) if a != b]
        assert out.ids == g.ids and all(out.mask[i] == 0 and g.mask[i] == 1 for i in dropped)
        assert tok.decode([g.ids[i] for i in dropped]) == g.turns[0].calls[0].name
    with pytest.raises(ValueError, match="at least one example"):
        SFTReplay([])
    with pytest.raises(ValueError, match="coef must be > 0"):
        SFTReplay([SFTExample([1, 2], [0, 1])], coef=0.0)
