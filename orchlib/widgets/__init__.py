"""Notebook panels over the public API: `TrainerPanel`, `RewardPlayground`, `ToolCardEditor`, `UserPanel`.

Each is an ipywidgets `VBox`: make one the last expression of a cell to show it. They call what a
script calls (`Trainer.step`, `Reward.from_string` / `explain` / `latex`, `save_card`) and show the
figures of `orchlib.viz`, so whatever a panel shows can be reproduced without it.

    panel = TrainerPanel(trainer)            # Step, Run N, Pause; live charts; trajectory browser; P sliders
    RewardPlayground("rewards/toolorchestra.yaml")
    ToolCardEditor("toolcards/calculator.yaml")
    UserPanel(env, engine, task=...)         # a person types the user's turns while the orchestrator works

Charts are plotly figures shown through an `Output` widget as plotly's own mime bundle
(`application/vnd.plotly.v1+json`, rendered by the jupyterlab-plotly extension that ships with
plotly). `go.FigureWidget` is not used: from plotly 6 on it needs the `anywidget` package, which is
not a dependency; redrawing a small figure after each step costs nothing next to the step itself.

Threads: `TrainerPanel.run(n)` trains in a background thread, one `trainer.step()` at a time under a
lock, and checks the pause flag between steps, so the notebook stays usable and Pause takes effect
after at most one step. Widgets are updated from that thread (ipywidgets sends the updates over the
kernel's IOPub channel, which any thread may use). `UserPanel` runs its episode the same way: the
rollout waits in its thread for the person's next message (`PersonUser.reply` awaits a future that
the Send button resolves), while the kernel goes on serving the buttons.
"""


from orchlib.widgets.cards import ToolCardEditor
from orchlib.widgets.common import breakdown_html, trajectory_html
from orchlib.widgets.reward import RewardPlayground, reward_text, sample_group
from orchlib.widgets.trainer import TrainerPanel
from orchlib.widgets.user import PersonUser, UserPanel

__all__ = ["TrainerPanel", "RewardPlayground", "ToolCardEditor", "UserPanel", "PersonUser", "trajectory_html",
           "sample_group", "reward_text", "breakdown_html"]
