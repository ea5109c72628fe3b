"""Text that is drawn again line by line, only where a line's text changed.

Every poll hands each panel a new view. Textual's Static renders its whole text again on any
update and repaints every line of it; with the uptime, the rates, the sparklines and the
percentiles moving each second, that repaint was most of the console's CPU at a 1 s refresh.
This widget keeps its text as lines and marks dirty only the lines that differ from the last
ones shown (Textual's line API), so an unchanged line costs nothing; a change in the number of
lines lays the screen out again.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.segment import Segment
from rich.text import Text
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget

__all__ = ["QuietText"]

_ELLIPSIS = "…"


class QuietText(Widget):
    DEFAULT_CSS = """
    QuietText { height: auto; }
    """

    def __init__(self, *, id: str | None = None) -> None:  # noqa: A002 (Textual's name for it)
        super().__init__(id=id)
        self._text = Text()
        self._lines: list[Text] = []

    @property
    def text(self) -> Text:
        """The text shown (a redraw replaces it: an unchanged text keeps the very object)."""
        return self._text

    def show(self, text: Text) -> None:
        """Display `text`, one screen line per text line: long lines are cut, never wrapped."""
        if text == self._text:
            return
        lines = list(text.split("\n"))
        before, self._text, self._lines = self._lines, text, lines
        if len(lines) != len(before):
            self.refresh(layout=True)
            return
        width = self.content_size.width
        changed = [Region(0, y, width, 1) for y, (old, new) in enumerate(zip(before, lines, strict=True)) if old != new]
        if changed:
            self.refresh(*changed)

    def get_content_width(self, container: Size, viewport: Size) -> int:
        return max((cell_len(line.plain) for line in self._lines), default=0)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return max(len(self._lines), 1)  # one blank line before the first text, as a Static

    def render_line(self, y: int) -> Strip:
        width, style = self.content_size.width, self.visual_style.rich_style  # cached, unlike rich_style
        if y >= len(self._lines):
            return Strip.blank(width, style)
        strip = Strip(self._lines[y].render(self.app.console, end=""))
        if strip.cell_length > width:
            strip = Strip([*strip.crop(0, max(width - 1, 0)), Segment(_ELLIPSIS)]) if width else Strip([])
        return strip.apply_style(style).adjust_cell_length(width, style)
