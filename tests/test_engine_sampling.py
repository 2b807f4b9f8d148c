"""The engine's sampler draws from softmax(logits / T), truncated by top-k / top-p, and logs the right log-prob."""

from __future__ import annotations

import torch

from orchlib.engines import SamplingParams, TransformersEngine


class _Sampler(TransformersEngine):
    """Just the sampling step of the engine, without a model."""

    def __init__(self, seed: int = 0):
        self.generator = torch.Generator().manual_seed(seed)


def _frequencies(logits: torch.Tensor, params: SamplingParams, draws: int = 100_000) -> torch.Tensor:
    sampler = _Sampler()
    counts = torch.zeros_like(logits)
    rows = torch.arange(len(logits)).repeat_interleave(1000)
    for _ in range(draws // 1000):
        token, _ = sampler._sample(logits.repeat_interleave(1000, 0), params)
        counts.index_put_((rows, token), torch.ones(len(rows)), accumulate=True)
    return counts / counts.sum(-1, keepdim=True)


def test_frequencies_match_the_softmax_and_impossible_ids_never_come():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, 0.5], [0.0, 0.0, 0.0, 0.0, 0.0],
                           [3.0, -float("inf"), 1.0, -float("inf"), 0.0]])
    for temperature in (1.0, 0.5):
        freq = _frequencies(logits, SamplingParams(temperature=temperature))
        expected = torch.softmax(logits / temperature, -1)
        # 100k draws: the standard error of a frequency is at most 0.0016, so 0.01 is > 6 sigma
        assert (freq - expected).abs().max() < 0.01
        assert freq[2, 1] == 0 and freq[2, 3] == 0


def test_top_k_and_top_p_renormalise_the_kept_ids():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    freq = _frequencies(logits, SamplingParams(top_k=2))[0]
    assert torch.allclose(freq, torch.tensor([0.625, 0.375, 0.0, 0.0]), atol=0.01)
    freq = _frequencies(logits, SamplingParams(top_p=0.9))[0]  # 0.5 + 0.3 < 0.9: the third id is still in
    assert torch.allclose(freq, torch.tensor([0.5, 0.3, 0.15, 0.0]) / 0.95, atol=0.01)


def test_logged_logprob_is_that_of_the_untruncated_distribution():
    logits = torch.randn(64, 50, generator=torch.Generator().manual_seed(1))
    token, logprob = _Sampler()._sample(logits, SamplingParams(temperature=0.7, top_k=5))
    expected = torch.log_softmax(logits / 0.7, -1).gather(-1, token[:, None]).squeeze(-1)
    assert torch.allclose(logprob, expected)
    assert (logits.topk(5).indices == token[:, None]).any(-1).all()
