"""Generation backends behind one small interface (see base.Engine).

The transformers and vLLM engines load torch (and vllm, the `vllm` extra): they are imported on first
use, so `import orchlib.engines` (and the rollout loop, which needs only the interface) stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

from orchlib.engines.base import ChatPolicy, Engine, GenerateResult, Generation, SamplingParams, TrainableEngine
from orchlib.engines.scripted import ScriptedEngine

# name -> module, for engines whose import is heavy (torch, transformers, vllm, httpx)
_LAZY: dict[str, str] = {
    "TransformersEngine": "orchlib.engines.transformers",
    "OpenAIPolicy": "orchlib.engines.openai", "APIPolicyConfig": "orchlib.engines.openai",
    "VLLMEngine": "orchlib.engines.vllm", "VLLMConfig": "orchlib.engines.vllm",
    "VLLMServerEngine": "orchlib.engines.vllm_server",
}

__all__ = ["Engine", "TrainableEngine", "ChatPolicy", "GenerateResult", "Generation", "SamplingParams",
           "ScriptedEngine", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'orchlib.engines' has no attribute {name!r}")
