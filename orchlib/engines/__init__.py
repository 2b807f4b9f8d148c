"""Generation backends behind one small interface (see base.Engine)."""

from orchlib.engines.base import Engine, GenerateResult, Generation, SamplingParams
from orchlib.engines.scripted import ScriptedEngine
from orchlib.engines.transformers import TransformersEngine

__all__ = ["Engine", "GenerateResult", "Generation", "SamplingParams", "ScriptedEngine", "TransformersEngine"]
