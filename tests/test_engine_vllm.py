"""The vLLM engine (the `vllm` extra): generation, log-probs against the HF model's own, weight sync after
an optimiser step (full and LoRA), the pitfalls the sync guards against, and a GRPO run on it."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

pytest.importorskip("vllm")  # the `vllm` extra; `make test` installs it, so CI runs this file

import numpy as np  # noqa: E402
import torch  # noqa: E402
from conftest import TOY_ROLLOUT  # noqa: E402

from orchlib.env import Environment
from orchlib.engines import SamplingParams, VLLMConfig, VLLMEngine  # noqa: E402
from orchlib.models import load_policy  # noqa: E402

TOL = 1e-3  # fp32 on both sides; measured ~1e-6
CFG = VLLMConfig(kv_cache_mb=64)


def hf_logprobs(model, prompt, ids, temperature=1.0) -> torch.Tensor:
    """log softmax(logits / T) of `ids` after `prompt`, from the transformers model itself."""
    with torch.no_grad():
        logits = model(torch.tensor([list(prompt) + list(ids)])).logits[0, len(prompt) - 1:-1].float()
    logp = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
    return logp.gather(-1, torch.tensor(ids)[:, None]).squeeze(-1)


def gap(model, prompt, gen, temperature=1.0) -> float:
    return float((hf_logprobs(model, prompt, gen.ids, temperature) - torch.tensor(gen.logprobs)).abs().max())


def perturb(model, scale=0.02, only_lora=False) -> None:
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if not only_lora or "lora_" in n:
                p.add_(torch.randn(p.shape, generator=g) * scale)


def adam_step(model, tok, lr=1e-2) -> None:
    """One optimiser step of next-token loss on a sentence (what a training step does to the weights)."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr)
    ids = torch.tensor([tok("The answer is 42. Result: 1764")["input_ids"]])
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    opt.zero_grad()


@pytest.fixture(scope="module")
def tiny_folder(tiny_policy, policy_cache) -> Path:
    return next(Path(policy_cache).glob("default-tiny-s0-*"))


@pytest.fixture(scope="module")
def policy(tiny_folder):
    """A private copy of the tiny policy (tests change its weights)."""
    return load_policy(tiny_folder)


@pytest.fixture(scope="module")
def engine(policy):
    eng = VLLMEngine.for_model(*policy, config=CFG, seed=0)
    yield eng
    eng.close()


@pytest.fixture
def prompt(policy):
    return policy[1]("Preference (accuracy): what is 17 * 23? Use the calculator.")["input_ids"]


def test_generation_shapes_stop_ids_and_samples(engine, policy, prompt):
    greedy = engine.generate([prompt], SamplingParams(max_new_tokens=12, temperature=0.0))
    ids = greedy.outputs[0].ids
    assert len(ids) == 12 and greedy.outputs[0].finish_reason == "length"
    # a stop id sampled at step 5 ends the sample there, the stop id included
    stop = ids[4]
    cut = engine.generate([prompt], SamplingParams(max_new_tokens=12, temperature=0.0), stop_ids=[stop])
    assert cut.outputs[0].ids == ids[:ids.index(stop) + 1] and cut.outputs[0].finish_reason == "stop"
    # n samples of one prompt (a GRPO group) differ; the same seed repeats them; lengths and counts add up
    params = SamplingParams(max_new_tokens=10, temperature=1.0, seed=3)
    a = engine.generate([prompt] * 4 + [prompt[:5]], params)
    b = engine.generate([prompt] * 4 + [prompt[:5]], params)
    assert [g.ids for g in a.outputs] == [g.ids for g in b.outputs]
    assert len({tuple(g.ids) for g in a.outputs[:4]}) > 1
    assert all(len(g.ids) == len(g.logprobs) == 10 for g in a.outputs)
    assert a.new_tokens == 50 and a.prompt_tokens == 4 * len(prompt) + 5
    assert engine.generate([], params).outputs == []


def test_a_later_turn_reuses_the_conversation_in_blocks_of_32_ids_on_cpu(engine, policy):
    """VLLMConfig.block_size defaults to 32 on CPU: a next turn's prompt reuses every whole 32-id block of
    the conversation so far (vLLM's CPU default of 128 reused none of a prompt this short)."""
    tok = policy[1]
    first = tok("Preference (thrifty): " + "what is 17 * 23 and then 4 + 5? " * 6)["input_ids"]
    assert 64 < len(first) < 128
    engine.clear_prefix_cache()
    reply = engine.generate([first], SamplingParams(max_new_tokens=8, temperature=0.0)).outputs[0].ids
    second = first + reply + tok(" and 2 + 2?")["input_ids"]
    again = engine.generate([second], SamplingParams(max_new_tokens=2, temperature=0.0))
    reused = again.meta["reused_prompt_tokens"]
    assert reused % 32 == 0 and 32 * (len(first) // 32) <= reused < len(second)


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_logprobs_are_the_hf_models_own_under_the_temperature(engine, policy, prompt, temperature):
    out = engine.generate([prompt] * 2, SamplingParams(max_new_tokens=16, temperature=temperature, seed=1))
    for g in out.outputs:
        assert gap(policy[0], prompt, g, temperature) <= TOL
    if temperature == 0.7:  # and not those before temperature (vLLM's default logprobs mode)
        raw = hf_logprobs(policy[0], prompt, out.outputs[0].ids, 1.0)
        assert float((raw - torch.tensor(out.outputs[0].logprobs)).abs().max()) > 10 * TOL


def test_after_an_optimiser_step_and_a_sync_vllm_scores_as_the_trainer(engine, policy):
    model, tok = policy
    long_prompt = tok("Preference (thrifty): what is 1234 + 5678? " * 12)["input_ids"]  # > one cache block
    params = SamplingParams(max_new_tokens=12, temperature=1.0, seed=2)
    engine.generate([long_prompt], params)  # its keys/values now sit in the prefix cache
    adam_step(model, tok)
    stale = engine.generate([long_prompt], params).outputs[0]
    assert gap(model, long_prompt, stale) > 10 * TOL  # the step changed what the trainer computes
    sync = engine.sync_weights(model)
    assert sync["tensors"] == len(model.state_dict()) and sync["seconds"] > 0
    fresh = engine.generate([long_prompt] * 3, params).outputs
    assert all(gap(model, long_prompt, g) <= TOL for g in fresh)


def test_without_a_prefix_cache_reset_or_the_tied_head_the_sync_is_wrong(engine, policy):
    """The two steps `sync_weights` adds to vLLM's reload are needed: pin why."""
    model, tok = policy
    long_prompt = tok("Preference (fast): what is 99 * 99? " * 14)["input_ids"]
    params = SamplingParams(max_new_tokens=8, temperature=1.0, seed=4)
    engine.generate([long_prompt], params)
    perturb(model)
    state = model.state_dict()
    assert model.config.tie_word_embeddings and "lm_head.weight" in state
    # the reload alone: the prompt's cached keys/values are those of the old weights
    engine.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(state.items())})
    out = engine.generate([long_prompt], params)
    assert out.meta["reused_prompt_tokens"] > 0 and gap(model, long_prompt, out.outputs[0]) > 10 * TOL
    # a reset but without the tied lm_head: the head keeps the old embedding
    perturb(model)
    headless = [(n, t) for n, t in model.state_dict().items() if n != "lm_head.weight"]
    engine.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(headless)})
    engine.clear_prefix_cache()
    assert gap(model, long_prompt, engine.generate([long_prompt], params).outputs[0]) > 10 * TOL
    engine.sync_weights(model)  # both: right again
    out = engine.generate([long_prompt], params)
    assert out.meta["reused_prompt_tokens"] == 0 and gap(model, long_prompt, out.outputs[0]) <= TOL


def test_lora_adapter_syncs_under_a_new_id_after_each_step(tiny_folder, prompt):
    from peft import LoraConfig, get_peft_model

    model, tok = load_policy(tiny_folder)
    perturb(model)  # base weights that differ from the folder's: they must travel too
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"))
    eng = VLLMEngine.for_model(peft, tok, config=CFG, seed=0)
    try:
        params = SamplingParams(max_new_tokens=12, temperature=1.0, seed=5)
        assert gap(peft, prompt, eng.generate([prompt], params).outputs[0]) <= TOL
        ids = [eng._lora.lora_int_id]
        for _ in range(2):
            adam_step(peft, tok, lr=5e-2)  # only the adapter has gradients
            assert gap(peft, prompt, eng.generate([prompt], params).outputs[0]) > 10 * TOL
            eng.sync_weights(peft)
            ids.append(eng._lora.lora_int_id)
            assert all(gap(peft, prompt, g) <= TOL for g in eng.generate([prompt] * 2, params).outputs)
        assert len(set(ids)) == 3
    finally:
        eng.close()


def test_start_up_leaves_rng_threads_and_ld_preload_as_they_were(policy):
    random.seed(11)
    np.random.seed(11)
    torch.manual_seed(11)
    want = (random.random(), np.random.rand(), torch.rand(1))
    random.seed(11)
    np.random.seed(11)
    torch.manual_seed(11)
    preload, threads = os.environ.get("LD_PRELOAD"), torch.get_num_threads()
    eng = VLLMEngine.for_model(*policy, config=CFG, seed=123)
    try:
        assert (random.random(), np.random.rand()) == want[:2] and torch.equal(torch.rand(1), want[2])
        assert os.environ.get("LD_PRELOAD") == preload
        torch.set_num_threads(1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
        eng.close()


def test_grpo_on_vllm_syncs_every_step_and_reports_the_mismatch(toy_warm):
    from orchlib.envs.toy import toy_tasks, toy_toolbox
    from orchlib.reward import Reward
    from orchlib.rollout import RolloutConfig
    from orchlib.train import GRPOConfig, Trainer
    from orchlib.train.hooks import Hooks

    def push_apart(adv, keep, tasks, groups):
        """Advantages +1, -1, ... in every group, every group kept: whatever the sampled rollouts' rewards,
        each step updates, and its gradient is not 0."""
        return torch.tensor([1.0, -1.0]).repeat(adv.shape[0], adv.shape[1] // 2), torch.ones_like(keep)

    cfg = GRPOConfig(rollout=RolloutConfig(**TOY_ROLLOUT), kl_coef=0.0, seed=0, tasks_per_step=2,
                     engine="vllm", vllm=CFG)
    env = Environment(train=toy_tasks(), tools=toy_toolbox(),
                      reward=Reward.from_string("name: accuracy\nreward: outcome"))
    trainer = Trainer(load_policy(toy_warm[0]), env, cfg, hooks=Hooks(advantage=push_apart))
    try:
        assert isinstance(trainer.engine, VLLMEngine)
        before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
        reports = trainer.run(2, progress=False)
        assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())
        for r in reports:
            m = r.metrics
            assert "skipped" not in m and m["time/sync"] > 0
            # the rollouts' log-probs are vLLM's; the trainer's of the same ids agree (fp32)
            assert 0 <= m["logprob_mismatch/mean"] <= m["logprob_mismatch/max"] <= TOL
            assert m["clip_frac"] == 0.0  # the ratio's denominator is the trainer's own: exactly 1
        # after the last step's sync, vLLM samples from the updated weights
        t = reports[-1].trajectories[0]
        prompt = t.ids[:t.mask.index(1)]
        out = trainer.engine.generate([prompt], SamplingParams(max_new_tokens=8, temperature=1.0, seed=0))
        assert gap(trainer.model, prompt, out.outputs[0]) <= TOL
    finally:
        trainer.engine.close()


def test_engine_choice_reads_from_a_run_config_file(tmp_path):
    from orchlib.configfile import ConfigFileError, load_config
    from orchlib.train.run import RunConfig

    path = tmp_path / "run.yaml"
    path.write_text("policy: tiny\ngrpo:\n  engine: vllm\n  vllm:\n    kv_cache_mb: 256\n")
    cfg = load_config(path, RunConfig)
    assert cfg.grpo.engine == "vllm" and cfg.grpo.vllm.kv_cache_mb == 256 and cfg.grpo.vllm.base_url is None
    path.write_text("policy: tiny\ngrpo:\n  engine: vllm\n  vllm:\n    kv_cache: 256\n")
    with pytest.raises(ConfigFileError, match=r"run.yaml:5: grpo.vllm.kv_cache: unknown field"):
        load_config(path, RunConfig)


@pytest.fixture(scope="module")
def vllm_server(tiny_folder):
    """`vllm serve` of the tiny policy on 127.0.0.1, started as the docs say (dev mode for weight sync,
    runtime LoRA, processed log-probs); ~50 s to start on 2 busy cores."""
    import signal
    import socket
    import subprocess
    import sys
    import time

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
           "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny_folder),
           "--host", "127.0.0.1", "--port", str(port), "--logprobs-mode", "processed_logprobs",
           "--dtype", "float32", "--enforce-eager", "--max-model-len", "2048", "--enable-lora", "--max-lora-rank", "8"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 240
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited ({proc.returncode}): {proc.stderr.read()[-2000:]}")
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("vllm serve did not answer within 240 s")
            time.sleep(1)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and its engine process, this test's own
        proc.wait(timeout=60)


@pytest.mark.slow
def test_server_mode_generates_and_syncs_full_weights_and_lora(vllm_server, tiny_folder, prompt):
    from peft import LoraConfig, get_peft_model

    from orchlib.engines import VLLMServerEngine

    model, tok = load_policy(tiny_folder)
    perturb(model)  # not the weights the server loaded: for_model sends them
    eng = VLLMServerEngine.for_model(model, tok, VLLMConfig(base_url=vllm_server), seed=0)
    try:
        params = SamplingParams(max_new_tokens=10, temperature=0.7, seed=1)
        out = eng.generate([prompt] * 3, params, stop_ids=[tok.eos_token_id])
        assert all(gap(model, prompt, g, 0.7) <= TOL for g in out.outputs)
        assert len({tuple(g.ids) for g in out.outputs}) > 1
        assert [g.ids for g in eng.generate([prompt] * 3, params, stop_ids=[tok.eos_token_id]).outputs] == \
            [g.ids for g in out.outputs]
        adam_step(model, tok)
        eng.sync_weights(model)
        plain = SamplingParams(max_new_tokens=10, temperature=1.0)
        assert all(gap(model, prompt, g) <= TOL for g in eng.generate([prompt] * 2, plain).outputs)
        peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear",
                                                task_type="CAUSAL_LM"))
        perturb(peft, scale=0.05, only_lora=True)
        names = [eng.model_name]
        for _ in range(2):
            adam_step(peft, tok, lr=5e-2)
            eng.sync_weights(peft)
            names.append(eng.model_name)
            assert all(gap(peft, prompt, g) <= TOL for g in eng.generate([prompt] * 2, plain).outputs)
        assert len(set(names)) == 3
    finally:
        eng.close()
