"""The default policy is built offline, cached, and loads through the real from_pretrained path."""

from __future__ import annotations

import time

import pytest
import torch

from orchlib.models import PolicyLoadError, SIZES, build_default_policy, count_parameters, load_policy


def test_tiny_builds_offline_then_loads_from_cache(tmp_path):
    t0 = time.perf_counter()
    model, tok = build_default_policy("tiny", cache=tmp_path)
    first = time.perf_counter() - t0
    assert count_parameters(model) <= 5_000_000
    assert model.config.model_type == "qwen3"
    folder = next(tmp_path.glob("default-tiny-*"))
    assert (folder / "config.json").exists() and (folder / "tokenizer.json").exists()
    assert not list(tmp_path.glob(".default-*"))  # no temporary folder left behind
    t0 = time.perf_counter()
    again, tok2 = build_default_policy("tiny", cache=tmp_path)
    second = time.perf_counter() - t0
    # The budgets: under 60 s to build offline, under 5 s from the cache.
    assert first < 60 and second < 5
    for a, b in zip(model.state_dict().values(), again.state_dict().values()):
        assert torch.equal(a, b)
    assert tok2("What is 2+2?")["input_ids"] == tok("What is 2+2?")["input_ids"]


def test_same_seed_same_weights_different_seed_differs(tmp_path):
    a, _ = build_default_policy("tiny", seed=1, cache=tmp_path / "a")
    b, _ = build_default_policy("tiny", seed=1, cache=tmp_path / "b")
    c, _ = build_default_policy("tiny", seed=2, cache=tmp_path / "c")
    wa, wb, wc = (m.model.embed_tokens.weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_cache_folder_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHLIB_CACHE", str(tmp_path))
    build_default_policy("tiny")
    assert list(tmp_path.glob("default-tiny-s0-*"))


def test_load_policy_from_saved_folder_generates(tiny_policy, tmp_path):
    model, tok = tiny_policy
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded, ltok = load_policy(tmp_path)
    assert ltok.padding_side == "left" and ltok.pad_token is not None
    ids = ltok("hello", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, loaded(ids).logits)
    out = loaded.generate(ids, max_new_tokens=5, do_sample=False)
    assert out.shape[1] == ids.shape[1] + 5 or out[0, -1].item() == ltok.eos_token_id


def test_load_policy_offline_unknown_id_is_clear(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(PolicyLoadError, match="could not load model 'no-such-org/no-such-model'.*offline"):
        load_policy("no-such-org/no-such-model")


def test_small_size_is_about_50m():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    with torch.device("meta"):
        model = Qwen3ForCausalLM(Qwen3Config(vocab_size=4096, tie_word_embeddings=True, **SIZES["small"]))
    assert 40e6 < count_parameters(model) < 60e6


def test_unknown_size_rejected(tmp_path):
    with pytest.raises(ValueError, match="size must be one of"):
        build_default_policy("huge", cache=tmp_path)
