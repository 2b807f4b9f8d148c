"""vLLM behind the Engine interface, colocated in this process (TRL's "colocate" mode); the client of a
`vllm serve` server (`VLLMConfig.base_url`) is `vllm_server.py`.

Token in, token out as the transformers engine: prompts are token ids, each result carries the sampled
ids with their log-probs under softmax(logits / T) and a finish reason; generation stops only on the
given stop ids (the model's own eos is ignored, as there). The trainer keeps its policy in memory and
calls `sync_weights(model)` after every optimiser step: the full state dict goes to vLLM's in-place
`reload_weights` (25-80 ms for the small policy on CPU), or, for a PEFT model, only the adapter, as a
new LoRA id. Importing this module is light: torch and vllm are imported when an engine is made.

Pitfalls this module handles (each pinned by tests/test_engine_vllm.py):
- vLLM's log-probs are taken before temperature unless `logprobs_mode="processed_logprobs"`;
- after a weight sync the prefix cache still holds keys/values of the old weights: it is reset;
- a tied `lm_head.weight` must be sent along with the embedding (the state dict holds both);
- `LLM(seed=...)` reseeds the global RNGs (random, numpy, torch): they are restored after start-up;
- vLLM's CPU worker turns `torch.set_num_threads` into a no-op: it is restored after start-up (set
  OMP_NUM_THREADS before the first import of torch to fix the thread count of vLLM's own kernels);
- on CPU vLLM adds PyTorch's libgomp and its tcmalloc to LD_PRELOAD, which every later subprocess (the
  code sandbox, tools) would inherit: it is restored after start-up (in-process mode spawns nothing);
- in-process mode (`VLLM_ENABLE_V1_MULTIPROCESSING=0`) is what lets tensors be handed over directly.
"""

from __future__ import annotations

import itertools
import os
import random
import tempfile
import time
from typing import Any, Iterator, Literal, Sequence

from pydantic import ConfigDict, Field

from orchlib.engines.base import GenerateResult, Generation, SamplingParams
from orchlib.settings import Settings

__all__ = ["VLLMConfig", "VLLMEngine"]


class VLLMConfig(Settings):
    """Settings of the vLLM engine. Defaults: colocated, fp32, a 512 MiB KV cache (CPU-sized)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    base_url: str | None = Field(None, description="an OpenAI-compatible `vllm serve` endpoint "
                                 "(http://host:port/v1); None runs vLLM in this process, next to the trainer")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="fp32 keeps vLLM's "
                                                             "log-probs within 1e-4 of the trainer's; bf16 on "
                                                             "CPU was 3x slower and less exact")
    kv_cache_mb: int = Field(512, ge=16, description="KV cache size; 512 MiB holds ~260k tokens of the tiny "
                                                     "policy. On a GPU, `gpu_memory_utilization` sizes it")
    gpu_memory_utilization: float = Field(0.3, gt=0, le=1, description="share of the GPU vLLM may take when "
                                          "colocated on one (TRL's colocate default); the trainer keeps the rest")
    max_model_len: int | None = Field(None, ge=16, description="longest prompt + answer; None: the model's "
                                      "max_position_embeddings")
    enforce_eager: bool = Field(True, description="no CUDA graphs / torch.compile: a start in seconds; "
                                                  "False for long GPU runs")
    block_size: int | None = Field(None, ge=1, description="ids per KV-cache block, the unit in which a prefix is "
                                   "reused: a multi-turn rollout reuses a conversation's earlier turns in whole "
                                   "blocks only. None: 32 on CPU (the CPU attention's smallest; vLLM's own 128 "
                                   "re-ran most of each turn's prompt, 1.30x against 1.82x the transformers "
                                   "engine's rollout, bench_vllm.py), vLLM's default on a GPU")
    max_lora_rank: int = Field(64, ge=1, description="largest LoRA rank vLLM reserves room for")
    timeout_s: float = Field(600.0, gt=0, description="server mode: seconds one request may take")
    weights_dir: str | None = Field(None, description="server mode: a folder both the trainer and the server "
                                    "read, where synced weights are written; None: a temporary folder (the "
                                    "server on the same host)")


class VLLMEngine:
    """vLLM's `LLM` in this process. `VLLMEngine("Qwen/Qwen3-0.6B")` serves a model id or folder as is;
    `VLLMEngine.for_model(model, tokenizer)` serves a model held in memory (the trainer's)."""

    name = "vllm"
    # `TrainableEngine`: vLLM holds a copy of the weights (synced after every update) and computes with
    # kernels of its own, so its log-probs differ from the trainer's (within ~1e-4 in fp32)
    shares_weights = False
    exact_logprobs = False

    def __init__(self, model: str | os.PathLike, tokenizer=None, *, config: VLLMConfig = VLLMConfig(),
                 seed: int = 0, lora: bool = False, dummy_weights: bool = False,
                 llm_kwargs: dict[str, Any] | None = None):
        """`lora`: reserve room for an adapter (`sync_weights` of a PEFT model); `dummy_weights`: start
        from the folder's config only (weights come by `sync_weights`); `llm_kwargs`: more arguments for
        `vllm.LLM` (e.g. `logits_processors`)."""
        import torch

        if config.base_url:
            raise ValueError("VLLMEngine runs vLLM in this process; for a server at base_url use "
                             "VLLMServerEngine")
        if tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(model))
        self.tokenizer = tokenizer
        self.config = config
        # each call's sampling seed is drawn from here, so a run resumes with the same samples (the
        # trainer saves this generator's state as it does the transformers engine's)
        self.generator = torch.Generator(device="cpu").manual_seed(seed)
        self.llm = _start_llm(str(model), config, seed, lora=lora, dummy=dummy_weights, **(llm_kwargs or {}))
        self._lora_ids = itertools.count(1)
        self._lora = None  # the LoRARequest of the adapter in use
        self._lora_dir: tempfile.TemporaryDirectory | None = None
        self.last_sync: dict[str, float] = {}

    @classmethod
    def for_model(cls, model, tokenizer, config: VLLMConfig = VLLMConfig(), seed: int = 0,
                  **kwargs: Any) -> "VLLMEngine":
        """Serve an in-memory model: vLLM starts from its config alone (dummy weights, nothing read twice
        from disk), then receives the weights from memory. A PEFT model's base weights go once and its
        adapter at every `sync_weights`."""
        base, lora = _base_model(model)
        folder = tempfile.TemporaryDirectory(prefix="orchlib-vllm-")
        base.config.save_pretrained(folder.name)
        if getattr(base, "generation_config", None) is not None:
            base.generation_config.save_pretrained(folder.name)
        engine = cls(folder.name, tokenizer, config=config, seed=seed, lora=lora is not None, dummy_weights=True,
                     **kwargs)
        engine._config_dir = folder  # removed with the engine
        engine._load_full(_base_weights(model))
        if lora is not None:
            engine._load_lora(model)
        engine.clear_prefix_cache()
        return engine

    # ------------------------------------------------------------------ generation
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 stop_ids: Sequence[int] = ()) -> GenerateResult:
        import torch
        from vllm.inputs import TokensPrompt

        t0 = time.perf_counter()
        if params.seed is not None:
            self.generator.manual_seed(params.seed)
        if not prompts:
            return GenerateResult([], 0.0)
        # In this process vLLM samples with torch's global generator (its engine core runs in this thread):
        # seed it from the engine's own generator for this call, and leave the caller's state untouched.
        # Not per-request seeds: vLLM 0.32 rewinds a request's generator when a prefill is chunked,
        # which a CPU generator cannot do ("CPU Generator does not use offset").
        seed = int(torch.randint(0, 2**62, (1,), generator=self.generator))
        sp = self.sampling_params(params, stop_ids, None)
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], sp,
                                     lora_request=self._lora, use_tqdm=False)
        gens = [_generation(o.outputs[0]) for o in outs]
        reused = sum(o.num_cached_tokens or 0 for o in outs)
        return GenerateResult(gens, time.perf_counter() - t0, prompt_tokens=sum(len(p) for p in prompts),
                              meta={"reused_prompt_tokens": reused})

    def sampling_params(self, params: SamplingParams, stop_ids: Sequence[int], seed: int | None):
        """vLLM's SamplingParams for a call (a subclass may add `extra_args` for a logits processor)."""
        return vllm_sampling_params(params, stop_ids, seed)

    def clear_prefix_cache(self) -> None:
        """Drop the kept keys/values (stale once the weights change)."""
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM could not reset its prefix cache (requests still running)")

    # ------------------------------------------------------------------ weights
    def sync_weights(self, model) -> dict[str, float]:
        """Make vLLM sample from `model`'s current weights: all of them for a plain model, the adapter
        (under a new LoRA id) for a PEFT one. Returns {"seconds": ..., "tensors": ...}."""
        t0 = time.perf_counter()
        _, lora = _base_model(model)
        n = self._load_full(_base_weights(model)) if lora is None else self._load_lora(model)
        self.clear_prefix_cache()
        self.last_sync = {"seconds": time.perf_counter() - t0, "tensors": float(n)}
        return self.last_sync

    def _load_full(self, named: Any) -> int:
        """Copy named tensors (checkpoint names) into vLLM's model in place. `state_dict()` holds a tied
        `lm_head.weight` as well: it is sent, since vLLM's in-place reload does not re-tie it."""
        count = [0]

        def tensors() -> Iterator[tuple[str, Any]]:
            for name, t in named:
                count[0] += 1
                yield name, t.detach()

        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": tensors()})
        return count[0]

    def _load_lora(self, model) -> int:
        """Save the adapter to a fresh folder and register it under a new id (vLLM caches adapters by
        id, so a reused id would keep serving the old weights)."""
        from vllm.lora.request import LoRARequest

        folder = tempfile.TemporaryDirectory(prefix="orchlib-lora-")
        model.save_pretrained(folder.name)
        lora_id = next(self._lora_ids)
        request = LoRARequest(f"policy-{lora_id}", lora_id, folder.name)
        if not self.llm.llm_engine.add_lora(request):
            raise RuntimeError(f"vLLM did not load the LoRA adapter saved in {folder.name}")
        if self._lora is not None:
            self.llm.llm_engine.remove_lora(self._lora.lora_int_id)
        self._lora, self._lora_dir = request, folder  # the previous folder is removed with its object
        return sum(1 for n, _ in model.named_parameters() if "lora_" in n)

    def close(self) -> None:
        """Shut the engine down and free its memory (a new `VLLMEngine` can then start in this process)."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()
            del llm
            _reset_distributed()


# ---------------------------------------------------------------------- shared with the server client
def vllm_sampling_params(params: SamplingParams, stop_ids: Sequence[int], seed: int | None):
    """Our SamplingParams as vLLM's. ignore_eos: only `stop_ids` end a sample, as in the transformers
    engine. Top-p/top-k: vLLM's processed log-probs are those of the truncated, renormalised distribution
    (1 for both keeps them the trainer's)."""
    from vllm import SamplingParams as VSamplingParams

    return VSamplingParams(max_tokens=params.max_new_tokens, temperature=params.temperature, top_p=params.top_p,
                           top_k=params.top_k or -1, seed=seed, logprobs=0, ignore_eos=True,
                           stop_token_ids=list(stop_ids), detokenize=False, skip_special_tokens=False)


def _generation(c) -> Generation:
    ids = list(c.token_ids)
    lps = [float(step[t].logprob) for step, t in zip(c.logprobs, ids)]
    return Generation(ids, lps, "stop" if c.finish_reason == "stop" else "length")


def _start_llm(model: str, config: VLLMConfig, seed: int, *, lora: bool, dummy: bool, **extra: Any):
    """`LLM(...)` in this process, leaving the caller's RNG states and LD_PRELOAD as they were."""
    import numpy as np
    import torch

    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process: tensors are handed over
    from vllm import LLM

    kwargs: dict[str, Any] = dict(extra)
    if torch.cuda.is_available():
        kwargs["gpu_memory_utilization"] = config.gpu_memory_utilization
    else:
        kwargs["kv_cache_memory_bytes"] = config.kv_cache_mb << 20
    block = config.block_size if config.block_size is not None else (None if torch.cuda.is_available() else 32)
    if block is not None:
        kwargs["block_size"] = block
    if lora:
        kwargs.update(enable_lora=True, max_lora_rank=config.max_lora_rank, max_loras=1)
    states = random.getstate(), np.random.get_state(), torch.random.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    preload, set_threads = os.environ.get("LD_PRELOAD"), torch.set_num_threads
    try:
        return LLM(model=model, dtype=config.dtype, seed=seed, enforce_eager=config.enforce_eager,
                   max_model_len=config.max_model_len, logprobs_mode="processed_logprobs",
                   enable_prefix_caching=True, skip_tokenizer_init=True,
                   load_format="dummy" if dummy else "auto", **kwargs)
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.random.set_rng_state(states[2])
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
        # vLLM's CPU worker replaces torch.set_num_threads with a no-op to guard the thread binding of
        # its own worker processes; in this process there is none, and the trainer's threads are the user's
        torch.set_num_threads = set_threads
        if preload is None:
            os.environ.pop("LD_PRELOAD", None)
        else:
            os.environ["LD_PRELOAD"] = preload


def _reset_distributed() -> None:
    """Tear down the one-process group vLLM made, so that another engine can start here."""
    from vllm.distributed import destroy_distributed_environment, destroy_model_parallel

    destroy_model_parallel()
    destroy_distributed_environment()


def _base_model(model) -> tuple[Any, Any]:
    """(transformers model, PEFT config or None) of a plain or PEFT model."""
    if hasattr(model, "get_base_model") and hasattr(model, "peft_config"):
        return model.get_base_model(), model.peft_config
    return model, None


def _base_weights(model) -> Iterator[tuple[str, Any]]:
    """A model's weights under their checkpoint names; for a PEFT model its base weights (LoRA layers
    keep the original under `base_layer`; the adapter's own tensors are left out)."""
    base, lora = _base_model(model)
    for name, t in base.state_dict().items():
        if lora is not None:
            if "lora_" in name:
                continue
            name = name.replace(".base_layer.", ".")
        yield name, t
