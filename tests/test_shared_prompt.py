"""The update's shared-prompt forward gives the logits and gradients of the ordinary forward."""

from __future__ import annotations

import torch
from conftest import TOY_ROLLOUT

from orchlib.env import Environment
from orchlib.envs.toy import toy_tasks, toy_toolbox
from orchlib.models import load_policy
from orchlib.reward import Reward
from orchlib.rollout import RolloutConfig
from orchlib.train import GRPOConfig, Trainer
from orchlib.train.shared_prompt import shared_heads, shared_prompt_logits
from train_worker import scripted_engine


def _batch(seed: int = 0):
    """Right-padded rows: three prompts shared by 3, 2 and 1 rows, replies of different lengths."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(5, 4000, (n,), generator=g) for n in (30, 26, 33)]
    rows, heads = [], []  # heads: each row's prompt length
    for p, k in zip(prompts, (3, 2, 1)):
        for j in range(k):
            rows.append(torch.cat([p, torch.randint(5, 4000, (4 + 3 * j,), generator=g)]))
            heads.append(len(p))
    width = max(len(r) for r in rows)
    ids, attn = torch.zeros((len(rows), width), dtype=torch.long), torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)], attn[i, :len(r)] = r, 1
    real = torch.zeros((len(rows), width), dtype=torch.bool)
    start = min(heads) - 1
    for i, r in enumerate(rows):  # positions that predict a reply id
        real[i, heads[i] - 1:len(r) - 1] = True
    return ids, attn, [len(r) for r in rows], heads, start, real[:, start:]


def _same_gradients(model, plain: torch.Tensor, shared: torch.Tensor, real: torch.Tensor) -> None:
    """A random weighting of the logits on `real` positions has the same gradient through both forwards."""
    weights = torch.randn(plain.shape, generator=torch.Generator().manual_seed(1))
    params = [p for p in model.parameters() if p.requires_grad]
    g_plain = torch.autograd.grad((plain * weights)[real].sum(), params)
    g_shared = torch.autograd.grad((shared * weights)[real].sum(), params)
    for a, b in zip(g_plain, g_shared):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-4 * max(1.0, float(a.abs().max())))


def test_shared_heads_finds_the_prefix_each_run_of_rows_shares():
    ids, _, lengths, heads, _, _ = _batch()
    rows = [ids[r, :n].tolist() for r, n in enumerate(lengths)]
    found = sorted((h, sorted(r)) for h, r in shared_heads(rows))
    assert found == [(0, [5]), (26, [3, 4]), (30, [0, 1, 2])]
    # a prefix shared by all, and a longer one shared by two: the split that saves more ids wins
    common = list(range(100, 140))
    rows = [common + [1] * 60 + [2], common + [1] * 60 + [3], common + [4], common + [5]]
    assert sorted((h, sorted(r)) for h, r in shared_heads(rows)) == [(40, [2, 3]), (100, [0, 1])]  # 100 + 40 > 3 * 40
    assert sorted((h, sorted(r)) for h, r in shared_heads(rows[:1] + rows[2:])) == [(40, [0, 1, 2])]
    assert shared_heads([[1, 2, 3], [1, 2, 4]]) == [(0, [0]), (0, [1])]  # below min_share: nothing shared


def test_a_batch_that_shares_little_runs_the_ordinary_forward(tiny_policy):
    model, _ = tiny_policy
    ids, attn, lengths, _, start, _ = _batch()
    calls = []
    hook = model.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        with torch.no_grad():
            shared_prompt_logits(model, ids, attn, lengths, start, min_saved=0.9)
    finally:
        hook.remove()
    assert len(calls) == 1


def test_shared_prompt_logits_and_gradients_match_the_plain_forward(tiny_policy):
    model, _ = tiny_policy
    model.train()
    ids, attn, lengths, _, start, real = _batch()
    plain = model(input_ids=ids, attention_mask=attn, logits_to_keep=ids.shape[1] - start).logits
    calls = []
    hook = model.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        shared = shared_prompt_logits(model, ids, attn, lengths, start)
    finally:
        hook.remove()
    assert len(calls) == 5  # two shared heads (head + rest each), then the row of its own
    assert shared.shape == plain.shape
    assert (shared - plain).abs()[real].max() < 1e-4
    _same_gradients(model, plain, shared, real)
    model.eval()


def test_a_grpo_step_with_and_without_the_shared_prompt_moves_the_weights_alike(toy_warm):
    """Same rollouts (written by a script: each group calls both tools, so every group is kept and the
    update moves the weights by construction): the two updates land on the same weights (within float
    rounding)."""
    def one_step(shared: bool):
        cfg = GRPOConfig(rollout=RolloutConfig(**TOY_ROLLOUT), kl_coef=0.05, seed=3, shared_prompt=shared,
                         learning_rate=1e-3)
        trainer = Trainer(load_policy(toy_warm[0]), Environment(train=toy_tasks(), tools=toy_toolbox(),
                                                                reward=Reward.from_string("name: a\nreward: outcome")),
                          cfg)
        assert trainer._share_prompts is shared and trainer.engine.share_prompts is shared
        # the same rollouts on both sides, with the policy's own log-probs: only the update differs
        trainer.engine = scripted_engine(trainer.tokenizer, trainer.env.train, ["right", "wrong", "wrong", "right"] * 2,
                                         model=trainer.accelerator.unwrap_model(trainer.model))
        before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
        report = trainer.step()
        return trainer, before, report

    (a, before, ra), (b, _, rb) = one_step(True), one_step(False)
    assert [t.ids for t in ra.trajectories] == [t.ids for t in rb.trajectories]
    assert ra.metrics["groups_kept"] == rb.metrics["groups_kept"] == 4
    moved = 0.0
    for (name, pa), (_, pb) in zip(a.model.named_parameters(), b.model.named_parameters()):
        assert torch.allclose(pa, pb, atol=2e-5), name
        moved = max(moved, float((pa.detach() - before[name]).abs().max()))
    assert moved > 1e-4  # the step really changed the weights
    assert abs(ra.metrics["kl"] - rb.metrics["kl"]) < 1e-5


def test_the_engine_prefills_a_repeated_prompt_once_and_samples_each_row_as_alone(tiny_policy):
    from orchlib.engines import SamplingParams, TransformersEngine

    model, tok = tiny_policy
    p, q = tok.encode("<|im_start|>user\nWhat is 2 + 3?"), tok.encode("<|im_start|>user\nName a tool.")
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0)
    engine = TransformersEngine(model, tok, prefix_cache_mb=0, share_prompts=True)
    both = engine.generate([p, q, p, p], greedy)
    assert both.meta["distinct_prompts"] == 2
    alone = {k: engine.generate([x], greedy).outputs[0] for k, x in (("p", p), ("q", q))}
    for g, k in zip(both.outputs, "pqpp"):
        assert g.ids == alone[k].ids
        assert max(abs(a - b) for a, b in zip(g.logprobs, alone[k].logprobs)) < 1e-4
    # sampled: one uniform per row, so the repeated rows draw apart
    sampled = engine.generate([p] * 8, SamplingParams(max_new_tokens=6, temperature=1.0, seed=0))
    assert len({tuple(g.ids) for g in sampled.outputs}) > 1


def test_length_runs_is_the_cheapest_split_into_runs_of_similar_length():
    import itertools
    import random

    from orchlib.train.shared_prompt import length_runs

    def cost(lengths, runs, pass_cost):
        return sum(len(r) * max(lengths[i] for i in r) + pass_cost for r in runs)

    assert length_runs([30, 31, 150, 29], 32) == [[3, 0, 1], [2]]  # the long one alone: 3 x 119 ids spared
    assert length_runs([30, 31, 150, 29], 1000) == [[3, 0, 1, 2]]  # a pass dearer than the padding
    assert length_runs([], 32) == []
    rng = random.Random(5)
    for _ in range(30):
        lengths = [rng.randint(1, 120) for _ in range(rng.randint(1, 7))]
        s = sorted(range(len(lengths)), key=lambda i: lengths[i])
        brute = min(cost(lengths, [s[a:b] for a, b in zip((0,) + cuts, cuts + (len(s),))], 32)
                    for k in range(len(s)) for cuts in itertools.combinations(range(1, len(s)), k))
        runs = length_runs(lengths, 32)
        assert sorted(i for r in runs for i in r) == list(range(len(lengths)))
        assert cost(lengths, runs, 32) == brute


def test_each_pass_runs_only_where_its_rows_need_logits(tiny_policy):
    """A group of four rollouts of one prompt, one of which took a second turn, and two rows of their own,
    each scored from a position of its own: the long rollout runs alone, the short ones only to their own
    end, each pass projects onto the vocabulary only from its rows' first scored position, and the logits
    and gradients where each row is scored are the ordinary forward's."""
    model, _ = tiny_policy
    model.train()
    g = torch.Generator().manual_seed(2)
    prompt = torch.randint(5, 4000, (40,), generator=g)
    rows = [torch.cat([prompt, torch.randint(5, 4000, (n,), generator=g)]) for n in (6, 8, 7, 90)]
    rows += [torch.randint(5, 4000, (n,), generator=g) for n in (44, 47)]
    lengths, width = [len(r) for r in rows], max(len(r) for r in rows)
    ids, attn = torch.zeros((len(rows), width), dtype=torch.long), torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)], attn[i, :len(r)] = r, 1
    start, starts = 39, [39, 39, 41, 60, 42, 45]
    passes = []
    hook = model.register_forward_pre_hook(
        lambda _m, _a, kw: passes.append((tuple(kw["input_ids"].shape), kw["logits_to_keep"])), with_kwargs=True)
    try:
        shared = shared_prompt_logits(model, ids, attn, lengths, start, starts=starts)
    finally:
        hook.remove()
    # the head (40 ids, once; its last position is row 0's first scored one), the three short replies to
    # 48, the long one alone and scored from 60, the two single rows to 47 and scored from 42
    assert sorted(passes) == sorted([((1, 40), 1), ((3, 8), 8), ((1, 90), 70), ((2, 47), 5)])
    plain = model(input_ids=ids, attention_mask=attn, logits_to_keep=width - start).logits
    real = torch.zeros(plain.shape[:2], dtype=torch.bool)
    for i, (s, n) in enumerate(zip(starts, lengths)):
        real[i, s - start:n - start] = True
    assert (shared - plain).abs()[real].max() < 1e-4
    for i, (first, end) in enumerate(((39, 48), (39, 48), (39, 48), (60, 130), (42, 47), (42, 47))):
        computed = torch.zeros(width - start, dtype=torch.bool)
        computed[first - start:end - start] = True
        assert not shared[i, ~computed].any() and shared[i, computed].abs().sum(-1).all(), i  # 0s around
    _same_gradients(model, plain, shared, real)
    model.eval()


def test_first_marked_is_each_rows_first_scored_position():
    from orchlib.train.shared_prompt import first_marked

    marks = torch.tensor([[0, 0, 1, 1, 0], [1, 0, 0, 0, 1], [0, 0, 0, 0, 0]], dtype=torch.bool)
    assert first_marked(marks) == [2, 0, 4]
    assert first_marked(torch.zeros((2, 0), dtype=torch.bool)) == [0, 0]
