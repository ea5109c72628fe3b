"""Board health from recorded sysfs/hwmon trees, tt-smi snapshots and a tt-telemetry page (all shaped from the public
formats, testkit/data/boards/README.md): readings, bad input, the monitor's verdicts on the recorded scenarios."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from appliance.config.schema import BoardsConfig
from appliance.host.board_sensors import read_boards, readings_from_smi
from appliance.host.tt_smi import parse_tt_smi
from appliance.host.tt_telemetry import TelemetryUnavailable, parse_tt_telemetry
from appliance.observe.board_health import BoardMonitor, BoardsView
from appliance.observe.board_sources import sysfs_reader
from testkit.board_scenarios import BOARDS, DATA, HOSTS, board_dir, copy_tree, hwmon_dir, play

TREES = {
    "n150": ("n150", 1),
    "n300": ("n300", 1),
    "t3k": ("n300", 4),
    "galaxy": ("galaxy-wormhole", 32),
    "p150": ("p150", 1),
}


class Clock:
    """The monitor's clock seam: a scenario's sample times, not the wall clock."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def monitor(root: Path, boards: tuple[int, ...], faults: list[str], clock: Clock, **config: float) -> BoardMonitor:
    return BoardMonitor(
        BoardsConfig(**config),
        sysfs_reader(root, boards),
        "sysfs",
        clock=clock,  # type: ignore[arg-type]
        on_fault=faults.append,
    )


@pytest.mark.parametrize("tree", sorted(TREES))
def test_every_recorded_tree_reads_temperature_power_clock_heartbeat_and_firmware(tree: str) -> None:
    card, count = TREES[tree]
    readings = read_boards(HOSTS / tree, tuple(range(count)))
    assert [r.card_type for r in readings] == [card] * count
    for r in readings:
        assert r.present and r.problems == ()
        assert r.temperature_c is not None and 30 < r.temperature_c < 70
        assert r.power_w is not None and 10 < r.power_w < 100
        assert r.aiclk_mhz in (500.0, 800.0, 1350.0) and r.heartbeat is not None and r.therm_trips == 0
        assert r.trip_c == 105.0 and r.voltage_v == 0.8 and r.firmware


@pytest.mark.parametrize("tree", ["n150", "n300", "t3k", "galaxy", "p150"])
def test_every_recorded_snapshot_reads_the_same_facts_per_chip(tree: str) -> None:
    snapshot = parse_tt_smi((DATA / "tt-smi" / f"{tree}-snapshot.json").read_text())
    readings = readings_from_smi(snapshot)
    chips = TREES[tree][1] * (2 if TREES[tree][0] == "n300" else 1)
    assert len(readings) == chips
    assert all(r.problems == () and r.temperature_c and r.heartbeat and r.trip_c == 105.0 for r in readings)
    assert all(r.dram_trained is True and r.firmware for r in readings)


def test_a_snapshot_of_an_unknown_shape_is_unknown_fields_each_named() -> None:
    data = json.loads((DATA / "tt-smi" / "n150-snapshot.json").read_text())
    data["device_info"][0]["telemetry"] = {"asic_temperature": "hot", "power": " 21.3"}
    del data["device_info"][0]["board_info"]
    (reading,) = readings_from_smi(parse_tt_smi(json.dumps(data)))
    assert reading.temperature_c is None and reading.power_w == 21.3 and reading.heartbeat is None
    assert reading.problems == (
        "device_info[0].board_info: missing",
        "device_info[0].telemetry.asic_temperature: 'hot' is not a number",
        "device_info[0].telemetry.aiclk: missing",
        "device_info[0].telemetry.heartbeat: missing",
    )


def test_a_missing_unreadable_or_nonsense_attribute_is_unknown_with_one_problem_naming_its_file(
    tmp_path: Path,
) -> None:
    root = copy_tree("n150", tmp_path)
    (board_dir(root, "0") / "tt_aiclk").write_text("garbage\n")
    (hwmon_dir(root, "0") / "power1_input").unlink()
    (hwmon_dir(root, "0") / "temp1_input").write_text("-1\n")
    heartbeat = board_dir(root, "0") / "tt_heartbeat"
    heartbeat.unlink()
    heartbeat.mkdir()  # reading a directory fails as an unreadable attribute does
    (reading,) = read_boards(root, (0,))
    assert reading.present and (reading.aiclk_mhz, reading.power_w, reading.temperature_c, reading.heartbeat) == (
        None,
        None,
        None,
        None,
    )
    assert reading.current_a is not None and reading.firmware == "18.10.0"
    assert sorted(p.split(": ", 1)[1] for p in reading.problems) == [
        "'-1' is not a reading",
        "'garbage' is not a number",
        "missing",
        "unreadable (Is a directory)",
    ]
    assert all(str(root) in p for p in reading.problems)


async def test_unknown_attributes_warn_once_each_and_never_fault(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = copy_tree("n150", tmp_path)
    (board_dir(root, "0") / "tt_heartbeat").write_text("n/a\n")
    (hwmon_dir(root, "0") / "temp1_input").unlink()
    faults: list[str] = []
    clock = Clock()
    watch = monitor(root, (0,), faults, clock, heartbeat_stall_s=1.0)
    with caplog.at_level(logging.WARNING, logger="appliance.observe.board_health"):
        for step in range(5):
            clock.now = step * 2.0
            view = await watch.sample()
    assert faults == [] and view.boards[0].state == "ok" and view.boards[0].heartbeat_age_s is None
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2 and any("tt_heartbeat: 'n/a' is not a number" in w for w in warned)


async def test_a_heartbeat_that_stops_is_a_fault_once_it_has_held_for_the_stall_time(tmp_path: Path) -> None:
    faults: list[str] = []
    clock = Clock()
    views: list[BoardsView] = []
    watch: BoardMonitor | None = None
    for root, at in play("heartbeat-stops", tmp_path):
        watch = watch or monitor(root, (0,), faults, clock, heartbeat_stall_s=12.0)
        clock.now = at
        views.append(await watch.sample())
    ages = [v.boards[0].heartbeat_age_s for v in views]
    assert ages == [0.0, 0.0, 0.0, 5.0, 10.0, 15.0, 20.0]  # the heartbeat held from the sample at 10 s
    assert [v.boards[0].state for v in views] == ["ok"] * 5 + ["stalled"] * 2
    assert faults == ["[boards] tenstorrent!0: ARC heartbeat stalled for 15.0s (tt_heartbeat stuck at 118460)"]


async def test_a_stall_that_lasts_is_said_again_every_stall_time_for_the_boot_after_a_reset(tmp_path: Path) -> None:
    root = copy_tree("n150", tmp_path)
    faults: list[str] = []
    clock = Clock()
    watch = monitor(root, (0,), faults, clock, heartbeat_stall_s=4.0)
    for step in range(10):  # the recorded heartbeat never moves: 0..18 s
        clock.now = step * 2.0
        await watch.sample()
    assert [f.split(" for ")[1].split("s ")[0] for f in faults] == ["4.0", "8.0", "12.0", "16.0"]


async def test_a_temperature_ramp_warns_when_hot_and_faults_once_on_the_trip(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    faults: list[str] = []
    clock = Clock()
    states, watch = [], None
    with caplog.at_level(logging.WARNING, logger="appliance.observe.board_health"):
        for root, at in play("thermal-ramp", tmp_path):
            watch = watch or monitor(root, (0, 1, 2, 3), faults, clock, heartbeat_stall_s=12.0)
            clock.now = at
            view = await watch.sample()
            states.append(view.boards[2].state)
            assert {b.state for b in view.boards[:2] + view.boards[3:]} == {"ok"}
    assert states == ["ok", "ok", "ok", "hot", "tripped", "ok"]  # hot from 95 C: 10 C below temp1_crit (105 C)
    assert faults == ["[boards] tenstorrent!2: thermal trip (tt_therm_trip_count 0 -> 1) at 104.9 C"]
    hot = [r.getMessage() for r in caplog.records if "keeps serving" in r.getMessage()]
    assert hot == [
        "boards: tenstorrent!2: 96.8 C, within 10 C of its trip point 105 C (a warning: the engine keeps serving)"
    ]
    assert watch is not None
    last = watch.view().boards[2]
    assert last.temperatures == pytest.approx((62.4, 79.3, 88.1, 96.8, 104.9, 71.2)) and last.trips_since_start == 1
    assert last.powers[-1] == pytest.approx(22.0) and last.aiclks[-1] == 500.0


async def test_a_board_that_disappears_mid_serve_is_gone_and_a_fault(tmp_path: Path) -> None:
    faults: list[str] = []
    clock = Clock()
    states, watch = [], None
    for root, at in play("board-disappears", tmp_path):
        watch = watch or monitor(root, (0, 1, 2, 3), faults, clock)
        clock.now = at
        view = await watch.sample()
        states.append(view.boards[1].state)
    assert states == ["ok", "ok", "gone", "gone"]
    assert faults == ["[boards] tenstorrent!1: the board is gone (its sysfs directory vanished while serving)"]
    assert watch is not None and watch.view().boards[1].reading.firmware == "18.6.0"  # last known facts stay


async def test_the_history_is_bounded(tmp_path: Path) -> None:
    root = copy_tree("n150", tmp_path)
    clock = Clock()
    watch = monitor(root, (0,), [], clock, history=5)
    for step in range(12):
        clock.now = float(step)
        await watch.sample()
    assert len(watch.view().boards[0].temperatures) == 5 and watch.view().samples == 12


def test_a_tt_telemetry_page_reads_this_hosts_chips_by_their_documented_series() -> None:
    page = (BOARDS / "tt-telemetry-t3k.txt").read_text()
    readings = parse_tt_telemetry(page, "t3k-lab-07")
    assert [r.board for r in readings] == [str(c) for c in range(8)]
    first = readings[0]
    assert (first.temperature_c, first.aiclk_mhz, first.power_w, first.heartbeat) == (46.5, 1000.0, 44.2, 220431.0)
    assert first.firmware == "18.6.0" and first.dram_trained is True and first.problems == ()
    assert len(parse_tt_telemetry(page, "t3k-lab-08")) == 1


def test_a_page_that_is_not_tt_telemetry_says_so() -> None:
    with pytest.raises(TelemetryUnavailable, match="no chip of host t3k-lab-07"):
        parse_tt_telemetry("# HELP up up\n# TYPE up gauge\nup 1\n", "t3k-lab-07")
    with pytest.raises(TelemetryUnavailable, match="not Prometheus text"):
        parse_tt_telemetry("{this is json}", None)


async def test_a_board_never_readable_is_unknown_not_gone(tmp_path: Path) -> None:
    """An older driver publishes no sysfs directory for the board at all: nothing vanished, so no fault."""
    root = copy_tree("n150", tmp_path)
    shutil.rmtree(board_dir(root, "0"))
    faults: list[str] = []
    watch = monitor(root, (0,), faults, Clock())
    view = await watch.sample()
    assert [b.state for b in view.boards] == ["unknown"] and faults == []


def test_a_snapshot_whose_sections_have_other_shapes_parses_without_a_crash() -> None:
    data = json.loads((DATA / "tt-smi" / "n150-snapshot.json").read_text())
    data |= {"host_info": "TT-KMD 2.5.0", "host_sw_vers": None, "processes": [{"user": "x"}, "pid 7"]}
    data["device_info"].append("not a chip")
    snapshot = parse_tt_smi(json.dumps(data))
    assert snapshot.kmd_version is None and snapshot.processes == () and len(snapshot.devices) == 2
    assert snapshot.devices[1].problems[0] == "device_info[1]: not an object"
    assert readings_from_smi(snapshot)[1].temperature_c is None
