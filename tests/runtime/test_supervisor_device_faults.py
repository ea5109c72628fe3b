"""Device faults end a boot at once with a cause and a next step; reset_once resets, retries, then quarantines.

The engine here is a real child process: the real ttnn wheel opening a device on this board-less
host, or testkit/replay_engine.py printing a line from the public record (no machine here can fail
the way a Tenstorrent board does).
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import replace
from pathlib import Path

from appliance.runtime.engine_log import EngineLog
from appliance.runtime.lifecycle import EngineState
from appliance.runtime.supervisor import EngineSupervisor
from testkit.helpers import REPLAY_ENGINE, fake_plan, group_gone, wait_for

FABRIC = (
    "2026-08-24 22:39:51.216 | critical |          Always | TT_THROW: Fabric Router Sync: Timeout after 10000 ms on "
    "Device 3: expected status 0xa2b2c2d2. Master chan=7 got 0xa0b0c0d0. (assert.hpp:104)"
)


async def boot_until_failed(sup: EngineSupervisor, log: EngineLog, timeout: float = 60.0) -> float:
    run = asyncio.create_task(sup.run())
    started = time.monotonic()
    try:
        await wait_for(sup, EngineState.FAILED, timeout=timeout)
        return time.monotonic() - started
    finally:
        sup.request("stop")
        await run
        log.close()


async def test_the_real_ttnn_failing_to_find_chips_fails_the_boot_with_the_next_step(
    tmp_path: Path, ttnn_engine: Path
) -> None:
    plan = fake_plan(tmp_path, ready_timeout_s=600.0)
    plan = replace(plan, argv=(str(ttnn_engine), "-c", "import ttnn; ttnn.open_device(device_id=0)"))
    log = EngineLog(tmp_path / "logs")
    sup = EngineSupervisor(plan, log)
    took = await boot_until_failed(sup, log)
    snap = sup.snapshot()
    assert snap.fault is not None and snap.fault.rule == "no-chips" and took < 120  # the budget was 600 s
    assert snap.last_error is not None and "ttnn sees no Tenstorrent chip" in snap.last_error
    assert "/dev/tenstorrent" in snap.last_error and not snap.quarantined


async def test_a_fault_line_ends_a_boot_that_would_have_waited_out_its_budget(tmp_path: Path) -> None:
    recorded = tmp_path / "fabric.log"
    recorded.write_text(FABRIC + "\n")
    plan = replace(fake_plan(tmp_path, ready_timeout_s=600.0), argv=(sys.executable, str(REPLAY_ENGINE), str(recorded)))
    log = EngineLog(tmp_path / "logs")
    sup = EngineSupervisor(plan, log)
    pids: list[int] = []  # the engine's, taken at its first change (it may be gone before a poll would see it)
    sup.subscribe(lambda _: pids.extend([pid] if (pid := sup.snapshot().pid) and not pids else []))
    run = asyncio.create_task(sup.run())
    started = time.monotonic()
    try:
        await wait_for(sup, EngineState.FAILED, timeout=60)
        took = time.monotonic() - started
    finally:
        sup.request("stop")
        await run
        log.close()
    snap = sup.snapshot()
    assert took < 30 and snap.fault is not None and snap.fault.rule == "fabric-router-timeout"
    assert snap.last_error is not None and snap.last_error.startswith(
        "the ethernet fabric handshake timed out on device 3"
    )
    assert "tt-smi -r" in snap.last_error and snap.restarts == 0
    assert pids and group_gone(pids[0])  # the still-running "device init" was killed, not left holding the board


async def test_reset_once_resets_the_boards_retries_and_then_quarantines(tmp_path: Path) -> None:
    recorded, marker = tmp_path / "fabric.log", tmp_path / "resets"
    recorded.write_text(FABRIC + "\n")
    reset = (
        sys.executable,
        "-c",
        f"open({str(marker)!r}, 'a').write('x'); print('Re-initializing boards after reset')",
    )
    plan = fake_plan(tmp_path, ready_timeout_s=600.0, on_device_fault="reset_once", reset_command=reset)
    plan = replace(plan, argv=(sys.executable, str(REPLAY_ENGINE), str(recorded)))
    log = EngineLog(tmp_path / "logs")
    sup = EngineSupervisor(plan, log)
    run = asyncio.create_task(sup.run())
    try:
        await wait_for(sup, EngineState.FAILED, timeout=60)
        snap = sup.snapshot()
        assert marker.read_text() == "x"  # the reset ran exactly once
        assert [e.state for e in snap.events].count(EngineState.STARTING) == 2
        assert snap.quarantined and snap.last_error is not None and snap.last_error.startswith("quarantined")
        assert any("[reset] Re-initializing boards after reset" in line for line in log.tail(50))
        # An operator's restart lifts the quarantine and may reset once more. The replayed fault fails the new
        # boot within milliseconds, so the restart is read from the event stream, not from a polled state.
        lifted: list[bool] = []
        sup.subscribe(
            lambda event: (
                lifted.append(not sup.snapshot().quarantined)
                if event.state in (EngineState.STARTING, EngineState.RESTARTING)
                else None
            )
        )
        sup.request("restart")
        deadline = asyncio.get_running_loop().time() + 10
        while not lifted and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        assert lifted and lifted[0], "the restart neither started the engine again nor lifted the quarantine"
    finally:
        sup.request("stop")
        await run
        log.close()
