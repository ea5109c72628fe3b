"""The console under Pilot against recorded appliances: the real control API over real HTTP, fed with
captures at its seams (testkit/recorded_appliance.py)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable

from textual.widgets import DataTable, Input, Log

from appliance.control.client import Target
from appliance.preflight.results import check
from testkit.console_pilot import poll, recorded_console, shown, until
from testkit.helpers import free_port
from testkit.recorded_appliance import LOG_LINES, not_an_appliance, recorded_appliance
from tui.screens.confirm import ConfirmScreen
from tui.screens.fleet import FleetScreen
from tui.screens.logs import LogsScreen
from tui.widgets.header import ApplianceHeader
from tui.widgets.load import LoadPanel
from tui.widgets.panels import ChecksPanel, DevicesPanel, LatencyPanel, SchedulerPanel

SIZE = (140, 48)


async def test_the_dashboard_shows_state_load_latency_scheduler_devices_and_checks() -> None:
    with recorded_appliance() as rec:
        app = recorded_console(rec)
        async with app.run_test(size=SIZE) as pilot:
            await poll(pilot, 5)
            header = shown(app.screen.query_one(ApplianceHeader))
            assert "● READY" in header and "appliance/tiny-llama" in header and "config df9e744fcbff" in header
            load = shown(app.screen.query_one(LoadPanel))
            assert "prompt" in load and "tok/s" in load and "running 3 / max 16" in load
            latency = shown(app.screen.query_one(LatencyPanel))
            assert "TTFT" in latency and " ms" in latency and "bucket deltas, last 5 s" in latency
            scheduler = shown(app.screen.query_one(SchedulerPanel))
            assert "tokens/step" in scheduler and "Avg prompt throughput" in scheduler
            assert "host CPU" in shown(app.screen.query_one(DevicesPanel))
            checks = shown(app.screen.query_one(ChecksPanel))
            # The recorded engine's log states prefix caching as the plan asks: the one capability compared.
            assert "no checks yet" in checks and "capabilities: as planned (1 compared: prefix_caching)" in checks


async def test_preflight_checks_are_shown_when_the_appliance_has_them() -> None:
    results = [
        check("kmd", "KMD version", "pass", "2.4.1 meets the row's 2.1.0", kmd="2.4.1"),
        check("hugepages", "1G hugepages", "fail", "0 of 4 reserved", "Reserve 1G hugepages", blocking=True),
    ]
    with recorded_appliance(checks=results) as rec:
        app = recorded_console(rec)
        async with app.run_test(size=SIZE) as pilot:
            await poll(pilot)
            text = shown(app.screen.query_one(ChecksPanel))
            assert "pass" in text and "KMD version" in text and "0 of 4 reserved" in text


async def test_the_fleet_lists_every_appliance_and_keeps_unreachable_ones() -> None:
    with recorded_appliance() as one, recorded_appliance() as two:
        gone = Target("gone", f"http://127.0.0.1:{free_port()}", "x")
        wrong = Target("wrong-token", two.url, "not-the-token")
        app = recorded_console(one, two, extra=[gone, wrong])
        async with app.run_test(size=SIZE) as pilot:
            await poll(pilot, 3)
            assert isinstance(app.screen, FleetScreen)
            table = app.screen.query_one(DataTable)
            assert [str(table.get_row_at(i)[0]) for i in range(table.row_count)] == [
                "recorded-0",
                "recorded-1",
                "gone",
                "wrong-token",
            ]
            assert str(table.get_row(one_key(table, "gone"))[1]) == "unreachable"
            assert "ClientConnectorError" in str(table.get_row(one_key(table, "gone"))[9])
            assert "401" in str(table.get_row(one_key(table, "wrong-token"))[9])
            ready = table.get_row(one_key(table, "recorded-1"))
            assert str(ready[1]) == "ready" and "/16 · " in str(ready[5]) and str(ready[7]).endswith("%")


def one_key(table: DataTable[object], name: str) -> str:
    return next(key.value for key in table.rows if key.value == name)  # type: ignore[return-value]


async def test_a_server_that_is_not_an_appliance_is_listed_with_what_it_answered() -> None:
    with recorded_appliance() as good, not_an_appliance() as odd:
        app = recorded_console(good, extra=[Target("recorded-1", odd, "x")])
        async with app.run_test(size=SIZE) as pilot:
            await poll(pilot)
            table = app.screen.query_one(DataTable)
            row = table.get_row(one_key(table, "recorded-1"))
            assert str(row[1]) == "unreachable" and "unexpected answer" in str(row[9])


async def test_enter_on_a_fleet_row_opens_that_appliance() -> None:
    with recorded_appliance() as one, recorded_appliance() as two:
        app = recorded_console(one, two)
        async with app.run_test(size=SIZE) as pilot:
            await poll(pilot)
            await pilot.press("down", "enter")
            await poll(pilot)
            assert app.current_mode == "dashboard" and app.selected == "recorded-1"
            assert "recorded-1" in shown(app.screen.query_one(ApplianceHeader))


async def test_logs_follow_filter_and_pause() -> None:
    with recorded_appliance() as rec:
        app = recorded_console(rec)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("l")
            await until(lambda: len(app.log_lines()) >= 500)
            screen = app.screen
            assert isinstance(screen, LogsScreen)
            log = screen.query_one(Log)
            await until(lambda: log.line_count >= 500)
            await pilot.press("slash", *"Avg prompt", "escape")
            expected = [line for line in LOG_LINES[-500:] if "avg prompt" in line.lower()]
            assert log.line_count == len(expected) > 0
            await pilot.press("p")
            screen.add_lines(["Engine 000: Avg prompt throughput: 1.0 tokens/s arrived while paused"])
            assert log.line_count == len(expected) and screen.paused
            await pilot.press("p")
            assert not screen.paused and screen.query_one(Input).value == "Avg prompt"


async def test_drain_shows_what_will_happen_and_sends_nothing_when_cancelled() -> None:
    with recorded_appliance() as rec:
        app = recorded_console(rec)
        async with app.run_test(size=SIZE) as pilot:
            await poll(pilot, 2)
            await pilot.press("d")
            assert isinstance(app.screen, ConfirmScreen)
            body = shown(app.screen.query_one("#body"))
            assert "SIGTERM" in body and "60.0 s" in body and "stays stopped until you restart" in body
            await pilot.press("escape")
            await pilot.pause()
            assert rec.actions == []


async def test_confirmed_restart_is_sent_to_the_appliance() -> None:
    with recorded_appliance() as rec:
        app = recorded_console(rec)
        async with app.run_test(size=SIZE) as pilot:
            await poll(pilot)
            await pilot.press("r")
            assert "boots again" in shown(app.screen.query_one("#body"))
            await pilot.press("y")
            await until(lambda: rec.actions == ["restart"])


async def test_drain_from_the_fleet_acts_on_the_appliance_under_the_cursor() -> None:
    with recorded_appliance() as one, recorded_appliance() as two:
        app = recorded_console(one, two)
        async with app.run_test(size=SIZE) as pilot:
            await poll(pilot)
            await pilot.press("down", "d")
            assert "Drain recorded-1?" in shown(app.screen.query_one("#title"))
            await pilot.press("y")
            await until(lambda: two.actions == ["drain"])
            assert one.actions == []


async def test_read_only_disables_drain_and_restart() -> None:
    with recorded_appliance() as rec:
        app = recorded_console(rec, read_only=True)
        async with app.run_test(size=SIZE) as pilot:
            await poll(pilot)
            await pilot.press("d", "r")
            await pilot.pause()
            assert not isinstance(app.screen, ConfirmScreen) and rec.actions == []
            assert app.check_action("confirm", ("drain",)) is None


async def test_the_config_view_shows_each_resolved_key_with_its_source_and_the_plan() -> None:
    with recorded_appliance() as rec:
        app = recorded_console(rec)
        async with app.run_test(size=SIZE) as pilot:
            await poll(pilot)
            await pilot.press("c")
            table = app.screen.query_one(DataTable)
            rows = {str(table.get_row_at(i)[0]): table.get_row_at(i) for i in range(table.row_count)}
            assert rows["features.prefix_caching"][1:] == ["command line", "true"]
            assert rows["model.checkpoint"][1] == "conf/model/tiny.yaml"
            plan = shown(app.screen.query_one("#plan"))
            assert "vllm.entrypoints.openai.api_server" in plan and "HF_TOKEN=$HF_TOKEN" in plan


def test_the_console_command_runs_in_a_terminal_and_quits_on_q() -> None:
    with recorded_appliance() as rec:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 48, 140, 0, 0))
        env = os.environ | {"TERM": "xterm-256color", "APPLIANCE_TOKEN": rec.token}
        proc = subprocess.Popen(
            [sys.executable, "-m", "appliance.cli", "console", "--url", rec.url, "--read-only"],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,
        )
        os.close(slave)
        try:
            screen = read_until(master, lambda seen: b"READY" in seen)
            os.write(master, b"q")
            read_until(master, lambda _: proc.poll() is not None)  # keep draining, or its writes block
            assert proc.wait(timeout=5) == 0 and b"READY" in screen
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            os.close(master)


def read_until(master: int, done: Callable[[bytes], bool], timeout: float = 60.0) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while not done(seen) and time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        with contextlib.suppress(OSError):  # EIO once the child has closed the terminal
            seen += os.read(master, 65536) if ready else b""
    return seen
