"""ToolScale-style synthesis of training environments (arXiv 2511.21689, Figure 4).

From a domain in a few words, a writer model (any OpenAI-compatible endpoint) writes the domain's
database (JSON Schema and seed records), its tools (typed Python functions, loaded only after checks)
and user tasks with golden actions; a task is kept only when its golden actions run and the database
checks them. Every refusal is counted by reason. The result is a domain folder that `load_tasks`,
`Toolbox.load` and the trainer take as it is. Guide: docs/synth.md.

    from orchlib.synth import SynthConfig, synthesize
    path, report = synthesize(SynthConfig(domain="a small public library",
                                          llm={"model": "gpt-5-mini", "base_url": "https://api.openai.com/v1",
                                               "api_key_env": "OPENAI_API_KEY"}), out="domains")
    print(report.table())
"""

from orchlib.synth.code import CodeRefused, check_source, load_source
from orchlib.synth.config import ALLOWED_IMPORTS, SynthConfig
from orchlib.synth.llm import SynthError, Usage
from orchlib.synth.pipeline import synthesize
from orchlib.synth.report import StageCount, SynthReport

__all__ = ["SynthConfig", "ALLOWED_IMPORTS", "synthesize", "SynthReport", "StageCount", "Usage", "SynthError",
           "CodeRefused", "check_source", "load_source"]
