"""Driving the console in tests: the same make_console the CLI uses, over real HTTP."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable, Sequence

from rich.console import Console
from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import Static

from appliance.control.client import ControlClient, Target
from tui.app import ConsoleApp, make_console
from tui.widgets.quiet import QuietText

from .recorded_appliance import Recorded


def recorded_console(
    *recorded: Recorded, extra: Sequence[Target] = (), read_only: bool = False, gateway_metrics: str | None = None
) -> ConsoleApp:
    """The console watching recorded appliances (each one recorded page further per poll), then `extra`."""
    targets = [Target(f"recorded-{i}", r.url, r.token) for i, r in enumerate(recorded)]
    client = ControlClient([*targets, *extra])
    return make_console(client, read_only=read_only, refresh_s=0, gateway_metrics=gateway_metrics)


async def poll(pilot: Pilot[None], times: int = 1) -> None:
    """Poll every appliance `times` more, waiting for each poll to be shown."""
    app = pilot.app
    assert isinstance(app, ConsoleApp)
    for _ in range(times):
        await until(lambda: not any(w.group == "status-poll" and w.is_running for w in app.workers))
        app.action_refresh()
        await app.workers.wait_for_complete([w for w in app.workers if w.group == "status-poll"])
        await pilot.pause()


async def until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


def drawn(widget: Widget) -> tuple[object, ...]:
    """What a widget and the text widgets inside it were last handed to draw: each Static's
    content, each QuietText's text (a redraw replaces the object)."""
    texts: list[object] = []
    for part in (widget, *widget.query("*")):
        if isinstance(part, QuietText):
            texts.append(part.text)
        elif isinstance(part, Static):
            texts.append(part.content)
    return tuple(texts)


def shown(widget: Widget) -> str:
    """The text a widget (and its text widgets inside) currently shows."""
    console = Console(width=200, record=True, file=io.StringIO())
    for text in drawn(widget):
        console.print(text)
    return console.export_text()
