"""The embedded demo (`orchlib demo`): an app built on the library's API.

config.py  DemoConfig, the demo's tools, profiles and rollout settings
app.py     the run: suite → warm start → format checks → GRPO → evaluation and baselines → files
report.py  the numbers it reports and its printed table
html.py    the self-contained report.html
"""

from orchlib.demo.app import (as_reading, demo_suite, format_checks, reading_drills, reading_toolbox, run_demo, under,
                              write_outputs)
from orchlib.demo.config import (DEMO_PROFILES, DEMO_ROLLOUT, DEMO_TOOL_NAMES, DEMO_TOOLS, EXPENSIVE, READING_PAIR,
                                 READING_SETTINGS, REWARD_FILE, DemoConfig, DemoResult)

__all__ = ["DemoConfig", "DemoResult", "run_demo", "demo_suite", "format_checks", "reading_drills", "reading_toolbox",
           "as_reading", "under", "write_outputs", "DEMO_PROFILES", "DEMO_ROLLOUT", "DEMO_TOOL_NAMES", "DEMO_TOOLS",
           "EXPENSIVE", "READING_PAIR", "READING_SETTINGS", "REWARD_FILE"]
