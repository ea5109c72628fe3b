"""SVG snapshots of the console's main screens (pytest-textual-snapshot).

Deterministic by construction: the real control API fed with recorded captures, one recorded page
per poll (testkit/recorded_appliance.py), a fixed terminal size and no wall-clock text on screen.
Update after an intended change with `pytest tests/tui/test_console_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from textual.pilot import Pilot

from appliance.control.client import Target
from testkit.console_pilot import poll, recorded_console, until
from testkit.helpers import free_port
from testkit.recorded_appliance import Recorded, recorded_appliance
from tui.app import ConsoleApp

SIZE = (140, 48)
Compare = Callable[..., bool]


@pytest.fixture
def rec() -> Iterator[Recorded]:
    with recorded_appliance() as recorded:
        yield recorded


def settled(*keys: str, polls: int = 6, log_lines: int = 0) -> Callable[[Pilot[None]], Awaitable[None]]:
    """Poll `polls` times, press `keys`, then wait for `log_lines` lines of the log (streamed only
    while the log screen shows it)."""

    async def run_before(pilot: Pilot[None]) -> None:
        app = pilot.app
        assert isinstance(app, ConsoleApp)
        await poll(pilot, polls)
        await pilot.press(*keys)
        await until(lambda: len(app.log_lines()) >= log_lines)
        await pilot.pause()

    return run_before


def test_dashboard_snapshot(snap_compare: Compare, rec: Recorded) -> None:
    assert snap_compare(recorded_console(rec), terminal_size=SIZE, run_before=settled())


def test_fleet_snapshot(snap_compare: Compare, rec: Any) -> None:
    with recorded_appliance() as other:
        gone = Target("gone", f"http://127.0.0.1:{free_port()}", "x")
        app = recorded_console(rec, other, extra=[gone])
        assert snap_compare(app, terminal_size=SIZE, run_before=settled(polls=4))


def test_logs_snapshot(snap_compare: Compare, rec: Recorded) -> None:
    assert snap_compare(recorded_console(rec), terminal_size=SIZE, run_before=settled("l", polls=1, log_lines=500))


def test_config_snapshot(snap_compare: Compare, rec: Recorded) -> None:
    assert snap_compare(recorded_console(rec), terminal_size=SIZE, run_before=settled("c", polls=1))


def test_drain_confirmation_snapshot(snap_compare: Compare, rec: Recorded) -> None:
    assert snap_compare(recorded_console(rec), terminal_size=SIZE, run_before=settled("d"))
