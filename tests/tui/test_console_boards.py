"""The console's boards: the dashboard's panel and the fleet's worst-board column, under Pilot against the real
control API over real HTTP, its board monitor reading the recorded T3K tree (shaped from the public formats:
testkit/data/boards/README.md) as board 2 heats up."""

from __future__ import annotations

import re
from pathlib import Path

from textual.widgets import DataTable

from appliance.config.schema import BoardsConfig
from appliance.observe.board_sources import board_monitor
from testkit.board_scenarios import copy_tree, hwmon_dir
from testkit.console_pilot import poll, recorded_console, shown
from testkit.recorded_appliance import recorded_appliance
from tui.screens.fleet import FleetScreen
from tui.widgets.boards import BoardsPanel

SIZE = (140, 60)


async def test_the_dashboard_shows_each_board_with_readings_trends_and_the_hot_one_flagged(tmp_path: Path) -> None:
    root = copy_tree("t3k", tmp_path)
    watch = board_monitor(BoardsConfig(), (0, 1, 2, 3), root=root)
    for temperature in (71000, 80500, 89900, 97400):  # board 2 heats between samples
        (hwmon_dir(root, "2") / "temp1_input").write_text(f"{temperature}\n")
        await watch.sample()
    with recorded_appliance(boards=watch.view) as rec:
        app = recorded_console(rec)
        async with app.run_test(size=SIZE) as pilot:
            await poll(pilot, 2)
            panel = app.screen.query_one(BoardsPanel)
            text = shown(panel)
            assert panel.display and "boards from sysfs, every 5s" in text
            board_0 = next(line for line in text.splitlines() if line.startswith("board 0"))
            shape = re.fullmatch(r"(.* heartbeat )(\S+)s ago(  fw .*)", board_0)
            assert shape and shape[1] == "board 0  ok       44.1 C (trip 105)  41.0 W  aiclk 500 MHz  heartbeat "
            assert float(shape[2]) < 5 and shape[3] == "  fw 18.6.0"  # the age depends on the host's load
            assert "board 2  hot      97.4 C (trip 105)" in text
            assert "tenstorrent!2: 97.4 C, within 10 C of its trip point 105 C" in text
            assert "▁" in text and "█" in text  # board 2's temperature trend climbs


async def test_the_fleet_shows_each_appliances_worst_board(tmp_path: Path) -> None:
    root = copy_tree("t3k", tmp_path)
    (hwmon_dir(root, "1") / "temp1_input").write_text("96000\n")
    watch = board_monitor(BoardsConfig(), (0, 1, 2, 3), root=root)
    await watch.sample()
    with recorded_appliance(boards=watch.view) as hot, recorded_appliance() as cpu:
        app = recorded_console(hot, cpu)
        async with app.run_test(size=SIZE) as pilot:
            await poll(pilot, 2)
            assert isinstance(app.screen, FleetScreen)
            table = app.screen.query_one(DataTable)
            assert [str(c.label) for c in table.columns.values()][8] == "worst board"
            assert str(table.get_row("recorded-0")[8]) == "board 1 hot 96 C"
            assert str(table.get_row("recorded-1")[8]) == "–"  # the CPU engine watches no board
