"""How values read on screen: one place for units and for missing vs idle."""

from __future__ import annotations

__all__ = ["IDLE", "MISSING", "STATE_STYLE", "duration", "gib", "millis", "number", "percent"]

MISSING = "n/a"
"""The engine does not export this metric (absent is never shown as 0)."""
IDLE = "–"
"""Exported, but nothing was observed in the window."""

STATE_STYLE = {
    "ready": "bold green",
    "starting": "yellow",
    "loading": "yellow",
    "warming": "yellow",
    "validating": "yellow",
    "draining": "dark_orange",
    "restarting": "dark_orange",
    "stopped": "grey62",
    "failed": "bold red",
    "unreachable": "bold red",
}


def number(value: float | None, spec: str = ".0f", unit: str = "") -> str:
    return MISSING if value is None else f"{value:{spec}}{unit}"


def millis(seconds: float | None) -> str:
    if seconds is None:
        return IDLE
    return f"{seconds * 1000:.1f} ms" if seconds < 10 else f"{seconds:.1f} s"


def percent(fraction: float | None) -> str:
    return MISSING if fraction is None else f"{fraction:.1%}"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return IDLE
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 60}m {s % 60:02d}s" if s >= 60 else f"{s}s"


def gib(n: float | None) -> str:
    return MISSING if n is None else f"{n / 2**30:.1f} GiB"
