"""The user in the loop now lives in `orchlib.users` (the rollout needs it, and importing it from here ran
every environment's module first); this name stays so that older imports keep working."""

from orchlib.users import END_TOOL, ReplayedUser, ScriptedUser, SimulatedUser, User, make_user, user_view

__all__ = ["User", "ScriptedUser", "ReplayedUser", "SimulatedUser", "make_user", "user_view", "END_TOOL"]
