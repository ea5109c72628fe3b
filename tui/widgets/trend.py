"""A sparkline drawn as plain text: one block character per sample, the newest at the right.

Textual's Sparkline renders through Rich with a blended colour per column; redrawn every second
it was a third of the console's CPU. This is a line of text that the load panel draws in its
primary colour among its other lines.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["draw_trend"]

_BARS = " ▁▂▃▄▅▆▇█"
_LEVELS = len(_BARS) - 1


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
