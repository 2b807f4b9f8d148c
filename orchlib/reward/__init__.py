"""The reward language: YAML reward files whose expressions compile through sympy to numpy/torch.

See docs/rewards.md for the language. Entry points: `Reward.load(path)`, `Reward.from_string(text)`,
`Reward(expression, ...)`; `features(group)` shows the numbers a reward reads from a group.
"""

from orchlib.reward.errors import RewardFileError, RewardSyntaxError, RewardValueError
from orchlib.reward.features import as_preference, features, group_tools
from orchlib.reward.file import RewardSpec, read_spec
from orchlib.reward.names import FEATURES
from orchlib.reward.ops import GROUP_OPERATORS
from orchlib.reward.parse import FUNCTIONS, parse
from orchlib.reward.reward import Explanation, Reward

__all__ = ["Reward", "Explanation", "RewardSyntaxError", "RewardFileError", "RewardValueError",
           "RewardSpec", "read_spec", "parse", "features", "group_tools", "as_preference",
           "FEATURES", "FUNCTIONS", "GROUP_OPERATORS"]
