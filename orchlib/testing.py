"""Fakes for tests and notebooks, shipped with the library (see DESIGN.md: tests run in a second)."""

from orchlib.engines.scripted import ScriptedEngine, ScriptExhausted

__all__ = ["ScriptedEngine", "ScriptExhausted"]
