"""The vLLM engine as a client of a `vllm serve` server (another GPU or host), behind the Engine interface.

Start the server so that its log-probs are the trainer's and its weights can be replaced:

    VLLM_SERVER_DEV_MODE=1 VLLM_ALLOW_RUNTIME_LORA_UPDATING=True \\
    vllm serve MODEL --host 127.0.0.1 --port 8000 --logprobs-mode processed_logprobs --dtype float32 \\
        [--enable-lora --max-lora-rank 64]

Generation: one `/v1/completions` request per prompt (token ids in, `return_token_ids` out), sent
concurrently; with `SamplingParams.seed` each request gets its own seed drawn from it (a group's
identical prompts still differ), else the server's generator samples.

Weight sync goes through files, since tensors cannot travel over HTTP: full weights are written as
safetensors into `VLLMConfig.weights_dir` (a folder the server reads too) and loaded with the dev-mode
`/collective_rpc` call `reload_weights(weights_path=...)`, then `/reset_prefix_cache`; a LoRA adapter is
saved there and registered with `/v1/load_lora_adapter` under a new name. Seconds per sync grow with the
model's size (disk write + read); for a large model on another host NCCL weight transfer (vLLM's
`/init_weight_transfer_engine`, GPU only) is the faster path, not covered here.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from orchlib.engines.base import GenerateResult, Generation, SamplingParams
from orchlib.engines.vllm import VLLMConfig, _base_model, _base_weights

__all__ = ["VLLMServerEngine"]


class VLLMServerEngine:
    """Engine over a running `vllm serve` at `config.base_url` (http://host:port/v1)."""

    name = "vllm-server"
    max_in_flight = 64  # concurrent requests per generate call

    def __init__(self, tokenizer, config: VLLMConfig, *, seed: int = 0):
        import httpx
        import torch

        if not config.base_url:
            raise ValueError("VLLMServerEngine needs VLLMConfig.base_url (e.g. http://127.0.0.1:8000/v1)")
        self.tokenizer, self.config = tokenizer, config
        self.base_url = config.base_url.rstrip("/")
        self.root = self.base_url.removesuffix("/v1")  # dev endpoints live outside /v1
        self.http = httpx.Client(timeout=config.timeout_s)
        self.generator = torch.Generator(device="cpu").manual_seed(seed)
        models = self._post_json("GET", f"{self.base_url}/models")["data"]
        self.served = models[0]["id"]  # the base model's name; a LoRA adapter's name replaces it
        self.model_name = self.served
        self._tmp = None if config.weights_dir else tempfile.TemporaryDirectory(prefix="orchlib-vllm-sync-")
        self.weights_dir = Path(config.weights_dir or self._tmp.name)
        self._versions = itertools.count(1)
        self._last_dir: Path | None = None
        self.last_sync: dict[str, float] = {}

    @classmethod
    def for_model(cls, model, tokenizer, config: VLLMConfig, seed: int = 0) -> "VLLMServerEngine":
        """A client whose server then holds `model`'s current weights (base weights and, for PEFT, the adapter)."""
        engine = cls(tokenizer, config, seed=seed)
        base, lora = _base_model(model)
        engine._load_full(base, _base_weights(model))
        if lora is not None:
            engine._load_lora(model)
        engine.clear_prefix_cache()
        return engine

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 stop_ids: Sequence[int] = ()) -> GenerateResult:
        import torch

        t0 = time.perf_counter()
        if params.seed is not None:
            self.generator.manual_seed(params.seed)
        if not prompts:
            return GenerateResult([], 0.0)
        # Per-request seeds only when the call asks for reproducible samples: a CPU server (vLLM 0.32)
        # fails on a seeded request whose prefill is chunked ("CPU Generator does not use offset").
        seeds: list[int | None] = [None] * len(prompts)
        if params.seed is not None:
            seeds = torch.randint(0, 2**31 - 1, (len(prompts),), generator=self.generator).tolist()
        bodies = [{"model": self.model_name, "prompt": list(p), "max_tokens": params.max_new_tokens,
                   "temperature": params.temperature, "top_p": params.top_p, "top_k": params.top_k or -1,
                   "seed": s, "logprobs": 0, "ignore_eos": True, "stop_token_ids": list(stop_ids),
                   "return_token_ids": True, "skip_special_tokens": False} for p, s in zip(prompts, seeds)]
        workers = min(self.max_in_flight, len(bodies))
        with concurrent.futures.ThreadPoolExecutor(workers, "orchlib-vllm") as pool:
            replies = list(pool.map(lambda b: self._post_json("POST", f"{self.base_url}/completions", b), bodies))
        gens = []
        for r in replies:
            choice = r["choices"][0]
            ids, lps = choice["token_ids"], choice["logprobs"]["token_logprobs"]
            gens.append(Generation(list(ids), [float(x) for x in lps],
                                   "stop" if choice["finish_reason"] == "stop" else "length"))
        return GenerateResult(gens, time.perf_counter() - t0, prompt_tokens=sum(len(p) for p in prompts))

    def clear_prefix_cache(self) -> None:
        reply = self._post_json("POST", f"{self.root}/reset_prefix_cache")
        if not reply.get("success", False):
            raise RuntimeError(f"{self.root}/reset_prefix_cache: the server could not reset its prefix cache")

    def sync_weights(self, model) -> dict[str, float]:
        t0 = time.perf_counter()
        base, lora = _base_model(model)
        n = self._load_full(base, _base_weights(model)) if lora is None else self._load_lora(model)
        self.clear_prefix_cache()
        self.last_sync = {"seconds": time.perf_counter() - t0, "tensors": float(n)}
        return self.last_sync

    def _next_dir(self, kind: str) -> Path:
        """A fresh folder for this sync; the previous one is removed once the server has loaded the new."""
        folder = self.weights_dir / f"{kind}-{next(self._versions)}"
        folder.mkdir(parents=True)
        return folder

    def _done_with(self, folder: Path) -> None:
        if self._last_dir is not None:
            shutil.rmtree(self._last_dir)
        self._last_dir = folder

    def _load_full(self, base, named) -> int:
        from safetensors.torch import save_file

        folder = self._next_dir("weights")
        # clone: a tied lm_head shares the embedding's storage, which safetensors refuses to write twice
        tensors = {name: t.detach().to("cpu").contiguous().clone() for name, t in named}
        base.config.save_pretrained(folder)
        save_file(tensors, str(folder / "model.safetensors"))
        self._post_json("POST", f"{self.root}/collective_rpc",
                        {"method": "reload_weights", "kwargs": {"weights_path": str(folder)}})
        self._done_with(folder)
        return len(tensors)

    def _load_lora(self, model) -> int:
        folder = self._next_dir("lora")
        model.save_pretrained(folder)
        name = f"policy-{folder.name}"
        self._post("POST", f"{self.base_url}/load_lora_adapter", {"lora_name": name, "lora_path": str(folder)})
        if self.model_name != self.served:
            self._post("POST", f"{self.base_url}/unload_lora_adapter", {"lora_name": self.model_name})
        self.model_name = name
        self._done_with(folder)
        return sum(1 for n, _ in model.named_parameters() if "lora_" in n)

    def _post(self, method: str, url: str, body: dict | None = None):
        reply = self.http.request(method, url, json=body)
        if reply.status_code != 200:
            hint = ""
            if reply.status_code == 404:
                hint = (" (start the server with VLLM_SERVER_DEV_MODE=1 for weight sync, and "
                        "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True --enable-lora for LoRA)")
            raise RuntimeError(f"{method} {url}: HTTP {reply.status_code}: {reply.text[:300]}{hint}")
        return reply

    def _post_json(self, method: str, url: str, body: dict | None = None) -> Any:
        reply = self._post(method, url, body)
        return reply.json() if reply.content else {}

    def close(self) -> None:
        self.http.close()
        if self._tmp is not None:
            self._tmp.cleanup()
