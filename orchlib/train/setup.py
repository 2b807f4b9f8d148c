"""What the GRPO loop is built from besides the model: the engine that samples its rollouts and the
learning-rate schedule. Apart from `train/grpo.py` so that the loop module holds the loop."""

from __future__ import annotations

from orchlib.engines.base import TrainableEngine
from orchlib.train.config import GRPOConfig

__all__ = ["lr_factor", "make_engine"]


def lr_factor(step: int, warmup: int, decay: int | None) -> float:
    """The lr multiplier at optimizer step `step` (0-based): linear warm-up over `warmup` steps, then
    constant, or with `decay` falling linearly to 0 over the next `decay` steps (and staying there)."""
    if step < warmup:
        return (step + 1) / (warmup + 1)
    if decay is None:
        return 1.0
    return max(0.0, 1.0 - (step - warmup) / decay)


def make_engine(config: GRPOConfig, model, tokenizer, seed: int) -> TrainableEngine:
    """The engine `config.engine` names, sampling from `model`: the model itself (transformers), or vLLM
    in this process or at `config.vllm.base_url`, starting from the model's current weights. How the
    trainer then treats it is the engine's to say (`TrainableEngine`), not the config's."""
    if config.engine == "vllm":
        if config.vllm.base_url:
            from orchlib.engines.vllm_server import VLLMServerEngine as VLLM
        else:
            from orchlib.engines.vllm import VLLMEngine as VLLM
        return VLLM.for_model(model, tokenizer, config.vllm, seed=seed)
    from orchlib.engines.transformers import TransformersEngine

    return TransformersEngine(model, tokenizer, seed=seed, share_prompts=config.shared_prompt)
