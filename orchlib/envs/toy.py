"""A toy environment whose best tool is known: `right` always answers correctly, `wrong` never does.

Both are `final` tools and both are valid golden calls, so an SFT warm start learns the call format
but not the choice; GRPO must learn to prefer `right`. Used by the training tests, the resume and
multi-process checks, and as the smallest example of a custom environment.
"""

from __future__ import annotations

from orchlib.env import Environment, RewardFunction
from orchlib.tasks import Golden, Task
from orchlib.trajectory import ToolCall

__all__ = ["right", "wrong", "toy_tasks", "toy_toolbox", "environment", "TOY_REWARD"]

# The toy's reward: the outcome alone (a call to `right` earns 1, to `wrong` 0), in the reward language.
TOY_REWARD = "name: outcome\nreward: outcome"


def right(question: str = "") -> str:
    """An answering tool that is always right.

    Args:
        question: ignored; the tool knows the answer
    """
    return "yes"


def wrong(question: str = "") -> str:
    """An answering tool that is always wrong.

    Args:
        question: ignored
    """
    return "no"


def toy_tasks(n: int = 16) -> list[Task]:
    calls = [[ToolCall(name="right")], [ToolCall(name="wrong")]]
    return [Task(id=f"toy{i}", prompt=f"Question number {i}?", answer="yes", checker="exact", category="toy",
                 golden=Golden(calls=calls[0], alternatives=calls[1:], answer="yes")) for i in range(n)]


def toy_toolbox():
    from orchlib.tools import Toolbox
    from orchlib.tools.function import FunctionTool

    return Toolbox([FunctionTool.from_function(right, final=True), FunctionTool.from_function(wrong, final=True)])


def environment(seed: int = 0, reward: RewardFunction | str | None = None, n_train: int = 16,
                    n_test: int = 4) -> Environment:
    """The toy as an Environment: `n_train` questions to train on and `n_test` others to test on, the
    two tools, and `reward` (default: TOY_REWARD, the outcome). Every question is alike: `seed` is taken
    so that every maker of `orchlib.envs.ENVIRONMENTS` is called alike."""
    from orchlib.reward import Reward  # sympy: loaded when a toy world is made, not when this module is

    tasks = toy_tasks(n_train + n_test)
    return Environment(name="toy", train=tasks[:n_train], test=tasks[n_train:], tools=toy_toolbox(),
                       reward=Reward.from_string(TOY_REWARD) if reward is None else reward)
