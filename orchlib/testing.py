"""Fakes for tests and notebooks, shipped with the library, so the loop, masks and rewards are testable in a second."""

from orchlib.engines.scripted import ScriptedEngine, ScriptExhausted

__all__ = ["ScriptedEngine", "ScriptExhausted"]
