"""`ToolCardEditor`: view a tool card, edit its description, price and latency, validate, save (comments kept)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import ipywidgets as widgets
from pydantic import ValidationError

from orchlib.cards import CardError, ToolCard, load_card, save_card
from orchlib.widgets.common import _ERROR_STYLE, _e

__all__ = ["ToolCardEditor"]


# ---------------------------------------------------------------------------------------------- card editor
_PRICE_FIELDS = ("per_call", "per_m_input", "per_m_output", "per_second")


class ToolCardEditor(widgets.VBox):
    """View a tool card, edit its description, price and declared latency, validate, save.

    Validation is the card's own (field types and ranges, JSON Schema) plus building the tool, which
    checks the backend settings; each problem names the file, line and field. Saving goes through
    `save_card`, so a card read from a file keeps that file's comments and key order.
    """

    def __init__(self, card: ToolCard | str | os.PathLike, path: str | os.PathLike | None = None):
        self.card = card if isinstance(card, ToolCard) else load_card(card)
        self._loaded = self.card
        self.problems: list[CardError] = []
        default = path or self.card.source or f"{self.card.name}.yaml"
        self.header = widgets.HTML(self._header())
        self.description = widgets.Textarea(value=self.card.description, description="description",
                                            layout=widgets.Layout(width="100%", height="110px"))
        self.price = {f: widgets.FloatText(value=getattr(self.card.price, f), description=f,
                                           layout=widgets.Layout(width="240px")) for f in _PRICE_FIELDS}
        self.latency = widgets.FloatText(value=self.card.latency.seconds, description="latency s",
                                         layout=widgets.Layout(width="240px"))
        self.path = widgets.Text(value=str(default), description="save to", layout=widgets.Layout(width="100%"))
        self.validate_button = widgets.Button(description="Validate", icon="check")
        self.save_button = widgets.Button(description="Save", icon="save")
        self.message = widgets.HTML()
        self.message.add_class("orchlib-card-message")
        self.preview = widgets.HTML(self._preview(self.card))
        self.validate_button.on_click(lambda _: self.validate())
        self.save_button.on_click(lambda _: self.save())
        super().__init__([self.header, self.description, widgets.HTML("<b>price (USD)</b>"),
                          widgets.HBox(list(self.price.values()), layout=widgets.Layout(flex_flow="row wrap")),
                          self.latency, self.path, widgets.HBox([self.validate_button, self.save_button]),
                          self.message, self.preview])
        self.add_class("orchlib-card-editor")

    def _header(self) -> str:
        c = self.card
        args = ", ".join(c.parameters.get("properties", {})) or "none"
        src = f" · {_e(c.source)}" if c.source else ""
        return (f"<b>{_e(c.name)}</b> · {_e(c.kind)}{' · final' if c.final else ''} · arguments: {_e(args)}"
                f" · tags: {_e(', '.join(c.tags) or '-')}{src}")

    @staticmethod
    def _preview(card: ToolCard) -> str:
        spec = json.dumps(card.to_openai(with_costs=True), indent=2, ensure_ascii=False)
        return f"<details><summary>what the orchestrator reads</summary><pre>{_e(spec)}</pre></details>"

    def edited(self) -> ToolCard:
        """The card with the editor's values; raises CardError naming the first problem."""
        problems, card = self._check()
        if problems:
            raise problems[0]
        return card

    def _check(self) -> tuple[list[CardError], ToolCard | None]:
        base = self._loaded
        data = base.model_dump()
        data["description"] = self.description.value
        data["price"] = {f: self.price[f].value for f in _PRICE_FIELDS}
        data["latency"] = {**data["latency"], "seconds": self.latency.value}
        try:
            checked = ToolCard.model_validate(data)
        except ValidationError as e:
            return base.errors_from(e), None  # lines of the file the card came from
        # model_copy keeps where the card was read from, so saving keeps the file's comments.
        card = base.model_copy(update={"description": checked.description, "price": checked.price,
                                       "latency": checked.latency})
        try:
            from orchlib.tools import build_tool

            build_tool(card)
        except CardError as e:
            return [e], None
        return [], card

    def validate(self) -> list[CardError]:
        """Check the edited values; shows and returns the problems (none: the card is updated)."""
        self.problems, card = self._check()
        if self.problems:
            items = "".join(f"<li>{_e(p)}</li>" for p in self.problems)
            self.message.value = f"<div class='orchlib-error' style='{_ERROR_STYLE}'>invalid:<ul>{items}</ul></div>"
        else:
            self.card = card
            self.message.value = "<div style='color:#1b5e20'>valid</div>"
            self.preview.value = self._preview(card)
        return self.problems

    def save(self, path: str | os.PathLike | None = None) -> Path | None:
        """Validate, then write the card (to `path`, else the path field); None when it is invalid."""
        if self.validate():
            return None
        target = Path(path or self.path.value).expanduser()
        try:
            written = save_card(self.card, target)
        except OSError as e:
            self.message.value = f"<div class='orchlib-error' style='{_ERROR_STYLE}'>cannot save: {_e(e)}</div>"
            return None
        self.message.value = f"<div style='color:#1b5e20'>saved to {_e(written)}</div>"
        return written
