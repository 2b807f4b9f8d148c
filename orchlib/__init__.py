"""orchlib: train and study LLM orchestrators (ToolOrchestra-style) in notebooks.

The public API, listed explicitly. Heavy modules (torch, transformers) load when first used, so
`import orchlib` stays quick for the command line and notebooks.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> module that defines it
_EXPORTS: dict[str, str] = {
    # records and formats
    "ToolCall": "orchlib.trajectory", "Observation": "orchlib.trajectory", "Turn": "orchlib.trajectory",
    "Trajectory": "orchlib.trajectory", "read_jsonl": "orchlib.trajectory", "write_jsonl": "orchlib.trajectory",
    "parse_tool_calls": "orchlib.chat", "ToolCallParseError": "orchlib.chat",
    "from_openai_messages": "orchlib.openai_messages", "to_openai_messages": "orchlib.openai_messages",
    "read_openai_jsonl": "orchlib.openai_messages", "replayed_user": "orchlib.openai_messages",
    # tasks and preferences
    "Task": "orchlib.tasks", "Golden": "orchlib.tasks", "Preference": "orchlib.tasks", "PROFILES": "orchlib.tasks",
    "load_tasks": "orchlib.tasks", "save_tasks": "orchlib.tasks",
    "make_suite": "orchlib.envs", "make_choice_suite": "orchlib.envs",
    # the task world every API takes
    "Environment": "orchlib.env", "RewardFunction": "orchlib.env", "make_environment": "orchlib.envs",
    "ENVIRONMENTS": "orchlib.envs",
    "ConfigurationSpace": "orchlib.configurations", "Configuration": "orchlib.configurations",
    "Slot": "orchlib.configurations", "AliasPool": "orchlib.configurations", "PriceSpace": "orchlib.configurations",
    # tools
    "ToolCard": "orchlib.cards", "load_card": "orchlib.cards", "load_cards": "orchlib.cards",
    "save_card": "orchlib.cards", "validate_cards": "orchlib.tools", "CardError": "orchlib.cards",
    "Toolbox": "orchlib.tools", "ToolContext": "orchlib.tools", "build_tool": "orchlib.tools",
    # models and engines
    "build_default_policy": "orchlib.models", "load_policy": "orchlib.models",
    "TransformersEngine": "orchlib.engines", "SamplingParams": "orchlib.engines", "Engine": "orchlib.engines",
    "TrainableEngine": "orchlib.engines", "ChatPolicy": "orchlib.engines",
    "OpenAIPolicy": "orchlib.engines.openai", "APIPolicyConfig": "orchlib.engines.openai",
    "Judge": "orchlib.judge", "JudgeConfig": "orchlib.judge", "use_judge": "orchlib.judge",
    "set_judge": "orchlib.judge",
    # rollout, reward, training, evaluation
    "rollout": "orchlib.rollout", "RolloutConfig": "orchlib.rollout",
    "Reward": "orchlib.reward", "RewardSyntaxError": "orchlib.reward",
    "Trainer": "orchlib.train", "GRPOConfig": "orchlib.train", "LoraSettings": "orchlib.train",
    "VariantConfig": "orchlib.experiments.variants", "Hooks": "orchlib.train",
    "SFTConfig": "orchlib.train", "SFTExample": "orchlib.train", "golden_trajectories": "orchlib.train",
    "sft_train": "orchlib.train",
    "evaluate": "orchlib.evaluate", "EvalReport": "orchlib.evaluate", "Undefined": "orchlib.evaluate",
    "UndefinedMetricError": "orchlib.evaluate",
    # sweeping P, auditing the bill, opening up the reward
    "sweep": "orchlib.sweep", "SweepResult": "orchlib.sweep", "preference_grid": "orchlib.sweep",
    "preference_sample": "orchlib.sweep", "pareto_front": "orchlib.sweep", "hypervolume": "orchlib.sweep",
    "preference_router": "orchlib.sweep",
    "check_prices": "orchlib.audit", "PriceCheck": "orchlib.audit",
    "ledger": "orchlib.ledger", "Ledger": "orchlib.ledger",
    "breakdown": "orchlib.reward.breakdown", "Breakdown": "orchlib.reward.breakdown",
    # tool descriptions written from evidence
    "describe": "orchlib.describe", "describe_file": "orchlib.describe", "DescribeResult": "orchlib.describe",
}

__all__ = sorted(_EXPORTS) + ["__version__"]

# These functions share their name with their module: bind them now, or `orchlib.rollout` would
# be the module once anything imported it.
from orchlib.describe import describe  # noqa: E402, F401
from orchlib.evaluate import evaluate  # noqa: E402, F401
from orchlib.ledger import ledger  # noqa: E402, F401
from orchlib.rollout import rollout  # noqa: E402, F401
from orchlib.sweep import sweep  # noqa: E402, F401


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'orchlib' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
