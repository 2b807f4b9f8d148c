"""The engine's reuse of keys/values across turns: same samples as without it, and never stale."""

from __future__ import annotations

import torch
from transformers import AutoConfig

from orchlib.engines import SamplingParams, TransformersEngine
from orchlib.engines.prefix_cache import PrefixCache, supports_prefix_cache


def _random_ids(g: torch.Generator, n_rows: int, lo: int, hi: int) -> list[list[int]]:
    lengths = torch.randint(lo, hi, (n_rows,), generator=g).tolist()
    return [torch.randint(10, 4000, (n,), generator=g).tolist() for n in lengths]


def _conversation(engine, turns: int = 3):
    """Six rows of different lengths; each turn appends the sampled ids and an 'observation'.

    Returns [(contexts sent, result)] per turn."""
    g = torch.Generator().manual_seed(0)
    ctx = _random_ids(g, 6, 20, 60)
    out = []
    for turn in range(turns):
        res = engine.generate(ctx, SamplingParams(max_new_tokens=10 + turn, seed=turn), stop_ids=[5, 7, 9])
        out.append((ctx, res))
        obs = _random_ids(g, 6, 1, 15)
        ctx = [c + o.ids + b for c, o, b in zip(ctx, res.outputs, obs)]
    return out


def test_reuse_gives_the_same_ids_and_logprobs_as_a_full_prefill(tiny_policy):
    model, tok = tiny_policy
    with_reuse = _conversation(TransformersEngine(model, tok, seed=0))
    without = _conversation(TransformersEngine(model, tok, seed=0, prefix_cache_mb=0))
    for turn, ((_, a), (_, b)) in enumerate(zip(with_reuse, without)):
        if turn == 0:
            assert a.meta["reused_prompt_tokens"] == 0
        else:  # each row's whole previous context, and every sampled id but the last, comes from the cache
            prev_ctx, prev = with_reuse[turn - 1]
            expected = sum(len(c) + len(o.ids) - 1 for c, o in zip(prev_ctx, prev.outputs))
            assert a.meta["reused_prompt_tokens"] == expected
        assert b.meta["reused_prompt_tokens"] == 0
        for x, y in zip(a.outputs, b.outputs):
            assert x.ids == y.ids
            assert max(abs(u - v) for u, v in zip(x.logprobs, y.logprobs)) <= 1e-4


def test_changed_weights_are_never_served_from_the_cache(tiny_policy):
    model, tok = tiny_policy
    model = type(model)(model.config)
    model.load_state_dict(tiny_policy[0].state_dict())
    engine = TransformersEngine(model, tok, seed=0)
    prompt = list(range(100, 140))
    first = engine.generate([prompt], SamplingParams(max_new_tokens=8, seed=0))
    assert len(engine.prefix_cache) == 1
    with torch.no_grad():  # what an optimiser step does: write parameters in place
        next(model.parameters()).mul_(1.5)
    follow = prompt + first.outputs[0].ids + [200, 201]
    after = engine.generate([follow], SamplingParams(max_new_tokens=8, seed=1))
    fresh = TransformersEngine(model, tok, seed=0, prefix_cache_mb=0).generate(
        [follow], SamplingParams(max_new_tokens=8, seed=1))
    assert after.meta["reused_prompt_tokens"] == 0
    assert after.outputs[0].ids == fresh.outputs[0].ids
    assert after.outputs[0].logprobs == fresh.outputs[0].logprobs


def _layers(n_tokens: int, n_layers: int = 2) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.randn(2, n_tokens, 4), torch.randn(2, n_tokens, 4)) for _ in range(n_layers)]


def test_lookup_finds_the_longest_prefix_and_leaves_one_id_to_feed():
    cache = PrefixCache()
    cache.store([1, 2], _layers(2))
    cache.store([7, 8, 9, 10], _layers(4))
    n, layers = cache.lookup([7, 8, 9, 10, 11, 12])
    assert n == 4 and layers[0][0].shape == (2, 4, 4)
    n, layers = cache.lookup([7, 8, 9, 10])  # the whole prompt is cached: its last id is fed again
    assert n == 3 and layers[1][1].shape == (2, 3, 4)
    assert cache.lookup([7, 9, 9, 10, 11]) == (0, None)
    assert cache.lookup([1]) == (0, None)


def test_a_longer_sequence_replaces_its_prefix_and_the_size_bound_evicts_the_oldest():
    one = sum(k.nelement() * 4 + v.nelement() * 4 for k, v in _layers(10))
    cache = PrefixCache(max_bytes=int(2.5 * one))
    cache.store(list(range(8)), _layers(8))
    cache.store(list(range(10)), _layers(10))  # extends the first: the first is dropped
    assert len(cache) == 1
    cache.store(list(range(50, 60)), _layers(10))
    cache.store(list(range(80, 90)), _layers(10))  # a third of this size does not fit: the oldest goes
    assert len(cache) == 2 and cache.nbytes <= cache.max_bytes
    assert cache.lookup(list(range(11))) == (0, None)
    assert cache.lookup(list(range(80, 95)))[0] == 10
    cache.check_version(1)
    cache.store(list(range(10)), _layers(10))
    cache.check_version(2)  # other weights: everything goes
    assert len(cache) == 0 and cache.nbytes == 0


def test_sliding_window_models_do_not_reuse(tiny_policy):
    model, tok = tiny_policy
    assert supports_prefix_cache(model.config)
    sliding = AutoConfig.for_model("qwen3", use_sliding_window=True, sliding_window=16, max_window_layers=0,
                                   num_hidden_layers=2)
    assert not supports_prefix_cache(sliding)


def test_inputs_follow_the_weights_when_training_moves_the_model(tiny_policy):
    """Accelerate moves the model to the GPU after the engine was made (the demo's warm start does
    this on a GPU machine); the engine must send its inputs where the weights are now, and drop
    keys/values kept on the old device. Here the move is to the meta device, which has no kernels."""
    model, tok = tiny_policy
    model = type(model)(model.config)
    model.load_state_dict(tiny_policy[0].state_dict())
    follows, pinned = TransformersEngine(model, tok, seed=0), TransformersEngine(model, tok, seed=0, device="cpu")
    follows.generate([list(range(100, 140))], SamplingParams(max_new_tokens=4, seed=0))
    assert follows.device == torch.device("cpu") and len(follows.prefix_cache) == 1
    model.to("meta")
    assert follows.device == torch.device("meta")
    assert pinned.device == torch.device("cpu")
    follows._prefill_inputs([list(range(100, 140))])  # builds inputs on the new device, runs no kernel
    assert len(follows.prefix_cache) == 0
