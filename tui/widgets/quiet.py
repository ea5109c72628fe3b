"""A Static that costs nothing when its text has not changed.

Every poll hands each panel a new view; redrawing identical text, and re-laying out the whole
screen for text of the same height, was most of the console's CPU at a 1 s refresh.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

__all__ = ["QuietStatic"]


class QuietStatic(Static):
    _text: Text | None = None

    def show(self, text: Text) -> None:
        """Display `text` (one screen line per text line: long lines are cut, never wrapped)."""
        if text == self._text:
            return
        text.no_wrap, text.overflow = True, "ellipsis"
        relayout = self._text is None or text.plain.count("\n") != self._text.plain.count("\n")
        self._text = text
        self.update(text, layout=relayout)
