"""The three ways a reward can be wrong: its expression, its file, or the numbers it produced."""

from __future__ import annotations

__all__ = ["RewardSyntaxError", "RewardFileError", "RewardValueError"]


class RewardSyntaxError(ValueError):
    """An expression the reward language does not allow; names the position (1-based line, column).

    It is the only exception the parser lets escape on any input, so callers can catch just this.
    """

    def __init__(self, message: str, position: tuple[int, int] = (1, 1)):
        self.message = message
        self.position = position
        super().__init__(f"{message} at {position[0]}:{position[1]}")


class RewardFileError(ValueError):
    """A malformed reward file: `FILE:LINE: field: problem` (line is 1-based; 0 when unknown)."""

    def __init__(self, path: str, line: int, field: str, problem: str):
        self.path, self.line, self.field, self.problem = str(path), line, field, problem
        super().__init__(f"{self.path}:{line}: {field}: {problem}")


class RewardValueError(ValueError):
    """The reward evaluated to NaN or infinity for some trajectories, or its inputs were missing.

    Raised rather than replaced by 0: a silent 0 would train the policy on a wrong signal.
    """
