"""Board faults climb the engine's fault ladder; the boards in /state and /metrics; tt-telemetry over real HTTP.

The engine is a real child process (testkit/fake_engine.py, serving while a board fails: no machine here has a
board). The boards are the recorded trees of testkit/data/hosts (shaped from the public formats: see
testkit/data/boards/README.md), read by the real monitor at short configured intervals.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from appliance.config.schema import BoardsConfig
from appliance.control.api import create_app, create_slots_app
from appliance.control.documents import StateDocument, parse
from appliance.control.sources import Sources
from appliance.observe.board_sources import board_monitor
from appliance.plan import LaunchPlan
from appliance.runtime.engine_log import EngineLog
from appliance.runtime.lifecycle import EngineState
from appliance.runtime.supervisor import EngineSupervisor
from testkit.board_scenarios import BOARDS, board_dir, copy_tree, hwmon_dir
from testkit.helpers import Cli, fake_plan, promtool, wait_for
from testkit.recorded_appliance import recorded_appliance, serving
from tests.control.test_appliance_metrics import samples

TOKEN = "board-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def quick(plan: LaunchPlan, **boards: object) -> LaunchPlan:
    """Short board intervals, so a stall is seen within a second."""
    fast = {"interval_s": 0.05, "heartbeat_stall_s": 0.4} | boards
    return replace(plan, boards=replace(plan.boards, **fast))


async def test_a_stalled_heartbeat_under_a_ready_engine_fails_it_with_the_ladders_next_step(tmp_path: Path) -> None:
    root = copy_tree("n150", tmp_path)  # a recording: its heartbeat never advances
    plan = quick(fake_plan(tmp_path))
    log = EngineLog(tmp_path / "logs")
    sup = EngineSupervisor(plan, log)
    watch = board_monitor(plan.boards, (0,), root=root, on_fault=sup.board_fault)
    run = asyncio.create_task(sup.run())
    try:
        await wait_for(sup, EngineState.READY, timeout=30)
        watching = asyncio.create_task(watch.run())
        await wait_for(sup, EngineState.FAILED, timeout=10)
        watching.cancel()
    finally:
        sup.request("stop")
        await run
        log.close()
    snap = sup.snapshot()
    assert snap.fault is not None and snap.fault.rule == "board-heartbeat-stalled" and snap.fault.device
    assert snap.last_error is not None and snap.last_error.startswith("the ARC firmware of tenstorrent!0 stopped")
    assert "tt-smi -r" in snap.last_error and snap.restarts == 0 and not snap.quarantined
    assert snap.pid is None  # the engine was stopped before it could hang on the board
    assert any(line.startswith("[boards] tenstorrent!0: ARC heartbeat stalled") for line in log.tail(50))


async def test_reset_once_resets_a_stalled_board_once_then_quarantines_when_it_stays_stalled(tmp_path: Path) -> None:
    root = copy_tree("n150", tmp_path)
    marker = tmp_path / "resets"
    reset = (sys.executable, "-c", f"open({str(marker)!r}, 'a').write('x')")
    plan = quick(fake_plan(tmp_path, on_device_fault="reset_once", reset_command=reset))
    log = EngineLog(tmp_path / "logs")
    sup = EngineSupervisor(plan, log)
    watch = board_monitor(plan.boards, (0,), root=root, on_fault=sup.board_fault)
    run = asyncio.create_task(sup.run())
    watching = asyncio.create_task(watch.run())
    try:
        await wait_for(sup, EngineState.FAILED, timeout=30)
        snap = sup.snapshot()
    finally:
        watching.cancel()
        sup.request("stop")
        await run
        log.close()
    assert marker.read_text() == "x" and snap.quarantined
    assert snap.fault is not None and snap.fault.rule == "board-heartbeat-stalled"
    assert snap.last_error is not None and snap.last_error.startswith("quarantined")


async def test_a_hot_board_is_a_warning_in_state_and_metrics_not_a_restart(tmp_path: Path) -> None:
    root = copy_tree("t3k", tmp_path)
    (hwmon_dir(root, "3") / "temp1_input").write_text("97300\n")  # 7.7 C below temp1_crit
    plan = quick(fake_plan(tmp_path), heartbeat_stall_s=3600.0)
    log = EngineLog(tmp_path / "logs")
    sup = EngineSupervisor(plan, log)
    watch = board_monitor(plan.boards, (0, 1, 2, 3), root=root, on_fault=sup.board_fault)
    app = create_app(sup, TOKEN, sources=Sources(boards=watch.view))
    run = asyncio.create_task(sup.run())
    watching = asyncio.create_task(watch.run())
    try:
        await wait_for(sup, EngineState.READY, timeout=30)
        await asyncio.sleep(0.3)  # six samples
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://control") as client:
            state = parse(StateDocument, (await client.get("/state", headers=AUTH)).content)
            page = (await client.get("/metrics", headers=AUTH)).text
    finally:
        watching.cancel()
        sup.request("stop")
        await run
        log.close()
    assert state.state == "ready" and state.restarts == 0 and state.boards is not None
    assert state.boards.source == "sysfs" and [b.state for b in state.boards.boards] == ["ok", "ok", "ok", "hot"]
    worst = state.boards.worst()
    assert worst is not None and worst.board == "3" and "within 10 C of its trip point 105 C" in worst.reason
    assert len(worst.temperatures) >= 5 and worst.firmware == "18.6.0" and worst.aiclk_mhz == 500.0
    checked = promtool("check", "metrics", stdin=page)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    found = samples(page)
    assert found['appliance_board_state{board="3",slot="engine",state="hot"}'] == 1.0
    assert found['appliance_board_temperature_celsius{board="3",slot="engine"}'] == 97.3
    assert found['appliance_board_aiclk_hertz{board="0",slot="engine"}'] == 500e6
    assert found['appliance_board_thermal_trips_total{board="0",slot="engine"}'] == 0.0
    assert found['appliance_board_source_info{slot="engine",source="sysfs"}'] == 1.0
    assert 'appliance_board_info{board="2",card_type="n300",firmware="18.6.0",slot="engine"}' in found


async def test_a_recorded_tt_telemetry_page_over_http_is_the_source_named_in_state(tmp_path: Path) -> None:
    page = (BOARDS / "tt-telemetry-t3k.txt").read_text()

    async def exporter(_: Request) -> PlainTextResponse:
        return PlainTextResponse(page, media_type="text/plain; version=0.0.4")

    with serving(Starlette(routes=[Route("/metrics", exporter)])) as url:
        plan = quick(fake_plan(tmp_path), tt_telemetry_url=f"{url}/metrics")
        log = EngineLog(tmp_path / "logs")
        sup = EngineSupervisor(plan, log)
        watch = board_monitor(plan.boards, (0, 1, 2, 3), hostname="t3k-lab-07", on_fault=sup.board_fault)
        await watch.sample()
        app = create_app(sup, TOKEN, sources=Sources(boards=watch.view))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://control") as client:
            state = parse(StateDocument, (await client.get("/state", headers=AUTH)).content)
            metrics = (await client.get("/metrics", headers=AUTH)).text
        log.close()
    assert state.boards is not None and state.boards.source == f"tt-telemetry {url}/metrics"
    assert [b.board for b in state.boards.boards] == [str(c) for c in range(8)]  # the host's chips, not a neighbour's
    assert state.boards.boards[0].temperature_c == 46.5 and state.boards.boards[0].firmware == "18.6.0"
    assert promtool("check", "metrics", stdin=metrics).returncode == 0
    found = samples(metrics)
    assert found['appliance_board_source_info{slot="engine",source="tt-telemetry"}'] == 1.0
    assert not any(name.startswith("appliance_board_temperature_celsius") for name in found)  # the exporter's own


async def test_an_unreachable_exporter_is_an_error_in_state_not_a_fault(tmp_path: Path) -> None:
    plan = quick(fake_plan(tmp_path), tt_telemetry_url="http://127.0.0.1:9/metrics")
    faults: list[str] = []
    watch = board_monitor(plan.boards, (0,), hostname="t3k-lab-07", on_fault=faults.append)
    view = await watch.sample()
    assert view.error is not None and view.error.startswith("tt-telemetry at http://127.0.0.1:9/metrics unreachable")
    assert faults == [] and view.boards == ()


async def test_status_prints_each_board_with_its_readings_trend_and_verdict(tmp_path: Path, cli: Cli) -> None:
    root = copy_tree("n150", tmp_path)
    watch = board_monitor(BoardsConfig(), (0,), root=root)
    for temperature in ("88200", "96100"):
        (hwmon_dir(root, "0") / "temp1_input").write_text(f"{temperature}\n")
        await watch.sample()
    with recorded_appliance(boards=watch.view) as rec:
        ran = await asyncio.to_thread(cli, "status", "--url", rec.url, env={"APPLIANCE_TOKEN": rec.token})
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert "boards from sysfs, every 5s" in lines
    assert (
        "  board 0 hot: 96.1 C (trip 105)  21.3 W  aiclk 500 MHz  heartbeat 0.0s ago  fw 18.10.0; temp 88.2→96.1 C, "
        "power 21.3→21.3 W over 2 samples; tenstorrent!0: 96.1 C, within 10 C of its trip point 105 C"
    ) in lines


async def test_a_board_lost_under_one_slot_stops_only_that_slots_engine(tmp_path: Path) -> None:
    """Two slots on the recorded T3K tree, a on devices 0-1 and b on 2-3; board 2's sysfs directory vanishes."""
    root = copy_tree("t3k", tmp_path)
    devices = {"a": (0, 1), "b": (2, 3)}
    plans = {name: quick(fake_plan(tmp_path / name), heartbeat_stall_s=3600.0) for name in devices}
    sups = {
        name: EngineSupervisor(plan, EngineLog(tmp_path / name / "logs"), name=f"slot {name}")
        for name, plan in plans.items()
    }
    monitors = {
        name: board_monitor(
            sup.plan.boards, devices[name], slot=name, every_chip=False, root=root, on_fault=sup.board_fault
        )
        for name, sup in sups.items()
    }
    app = create_slots_app("pair", sups, TOKEN, boards={name: m.view for name, m in monitors.items()})
    tasks = [asyncio.create_task(t) for t in (*(s.run() for s in sups.values()), *(m.run() for m in monitors.values()))]
    try:
        for sup in sups.values():
            await wait_for(sup, EngineState.READY, timeout=30)
        shutil.rmtree(board_dir(root, "2"))
        await wait_for(sups["b"], EngineState.FAILED, timeout=10)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://control") as client:
            a = parse(StateDocument, (await client.get("/slots/a/state", headers=AUTH)).content)
            b = parse(StateDocument, (await client.get("/slots/b/state", headers=AUTH)).content)
            page = (await client.get("/slots/a/metrics", headers=AUTH)).text
    finally:
        for sup in sups.values():
            sup.request("stop")
        for task in tasks[2:]:
            task.cancel()
        await asyncio.gather(*tasks[:2])
        for sup in sups.values():
            sup.log.close()
    assert a.state == "ready" and b.state == "failed" and b.fault is not None and b.fault.rule == "board-gone"
    assert b.last_error is not None and b.last_error.startswith("tenstorrent!2 disappeared from the host")
    assert a.boards is not None and [(x.board, x.slot, x.state) for x in a.boards.boards] == [
        ("0", "a", "ok"),
        ("1", "a", "ok"),
    ]
    assert b.boards is not None and [x.state for x in b.boards.boards] == ["gone", "ok"]
    assert 'appliance_board_state{board="0",slot="a",state="ok"} 1.0' in page and 'slot="b"' not in page
