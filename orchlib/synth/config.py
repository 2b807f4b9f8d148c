"""SynthConfig: what `orchlib synth` needs — the domain, the endpoint, how many tasks, the checks' knobs."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from orchlib.cards import Price
from orchlib.tools.llm import LLMSettings

__all__ = ["SynthConfig", "ALLOWED_IMPORTS"]

# Modules generated tool code may import: pure computation over the database, nothing that reaches
# the file system, the network, processes or the interpreter.
ALLOWED_IMPORTS: tuple[str, ...] = ("math", "re", "datetime", "typing", "collections", "itertools", "functools",
                                    "decimal", "fractions", "string", "statistics", "__future__")


class SynthConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    domain: str = Field(min_length=1, description="the domain in a few words, e.g. 'a small public library'")
    llm: LLMSettings = Field(description="the writer model: any OpenAI-compatible endpoint (client openai)")
    price: Price = Field(default_factory=Price, description="the writer's price, to report what synthesis cost")
    n_tools: int = Field(6, ge=1, description="tools asked for; ToolScale domains have a handful to a dozen")
    n_tasks: int = Field(12, ge=1, description="tasks asked for, before validation refuses some")
    package: str | None = Field(None, pattern=r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$",
                                description="the import name of the domain folder (its last part names the "
                                            "folder; a dotted name puts it inside a package); default "
                                            "synth_<domain name>")
    jaccard: float = Field(0.8, gt=0, le=1, description="token Jaccard at or above which two task texts "
                                                         "are near-duplicates (the later one is refused)")
    simulated_user: bool = Field(False, description="give each task a simulated user (the writer model, playing "
                                 "the task's instructions); off: the prompt holds everything the agent needs")
    allowed_imports: tuple[str, ...] = Field(ALLOWED_IMPORTS, description="modules tool code may import")
