"""A sparkline drawn as plain text: one block character per sample, the newest at the right.

Textual's Sparkline renders through Rich with a blended colour per column; redrawn every second
it was a third of the console's CPU. This one is a few lines of text in the widget's own colour,
redrawn only when the samples (or the widget's size) change.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.events import Resize
from textual.reactive import var

from tui.widgets.quiet import QuietStatic

__all__ = ["Trend", "draw_trend"]

_BARS = " ▁▂▃▄▅▆▇█"
_LEVELS = len(_BARS) - 1


class Trend(QuietStatic):
    DEFAULT_CSS = """
    Trend { height: 2; color: $primary; }
    """

    samples: var[tuple[float, ...]] = var(())

    def watch_samples(self) -> None:
        self._draw()

    def on_resize(self, _: Resize) -> None:
        self._draw()

    def _draw(self) -> None:
        size = self.content_size
        if size.width and size.height:
            self.show(Text(draw_trend(self.samples, size.width, size.height)))


def draw_trend(samples: Sequence[float], width: int, height: int) -> str:
    """`height` lines of block characters for the last `width` samples, scaled from their minimum
    to their maximum (a flat series sits on the bottom line)."""
    shown = samples[-width:]
    low = min(shown, default=0.0)
    extent = (max(shown, default=0.0) - low) or 1.0
    eighths = [1 + round((value - low) / extent * (_LEVELS * height - 1)) for value in shown]
    rows = []
    for line in reversed(range(height)):
        floor = line * _LEVELS
        rows.append("".join(_BARS[min(max(n - floor, 0), _LEVELS)] for n in eighths).rjust(width))
    return "\n".join(rows)
