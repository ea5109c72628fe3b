"""Supervisor fault handling against a real child script (faults vLLM cannot produce on demand)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from appliance.control.api import state_document
from appliance.runtime.engine_log import EngineLog
from appliance.runtime.lifecycle import EngineState
from appliance.runtime.supervisor import EngineSupervisor
from testkit.helpers import DATA, REPLAY_ENGINE, fake_plan, group_gone, wait_for

S = EngineState


Factory = Callable[..., EngineSupervisor]
IN_FLIGHT = ("vllm:num_requests_running", "vllm:num_requests_waiting")


@pytest.fixture
def supervisor(tmp_path: Path) -> Iterator[Factory]:
    """Supervisors of testkit/fake_engine.py with the given arguments; their logs close at teardown."""
    logs: list[EngineLog] = []

    def make(*fake_args: str, **kw: Any) -> EngineSupervisor:
        logs.append(EngineLog(tmp_path / "logs"))
        return EngineSupervisor(fake_plan(tmp_path, *fake_args, **kw), logs[-1])

    yield make
    for log in logs:
        log.close()


async def test_boot_goes_through_loading_and_warming_to_ready_then_stops_clean(supervisor: Factory) -> None:
    sup = supervisor("--child")
    run = asyncio.create_task(sup.run())
    await wait_for(sup, S.READY)
    pgid = sup.snapshot().pid
    assert pgid is not None
    # Its own process group, for the stop; the appliance's session, so the kernel's autogroup
    # scheduler does not weigh the engine's cores against the appliance's (spawn.py).
    assert os.getpgid(pgid) == pgid and os.getsid(pgid) == os.getsid(0)
    states = [e.state for e in sup.snapshot().events]
    assert states[:4] == [S.STARTING, S.LOADING, S.WARMING, S.READY]
    sup.request("stop")
    await run
    assert sup.snapshot().state is S.STOPPED
    assert group_gone(pgid)
    assert "Application startup complete." in sup.log.path.read_text()


async def test_a_crash_during_boot_fails_with_the_cause_and_is_not_restarted(supervisor: Factory) -> None:
    sup = supervisor("--mode", "boot-crash")
    run = asyncio.create_task(sup.run())
    await wait_for(sup, S.FAILED)
    await asyncio.sleep(0.5)
    snap = sup.snapshot()
    assert snap.state is S.FAILED and snap.restarts == 0
    assert snap.last_error is not None
    assert "code 3" in snap.last_error and "cannot load the model" in snap.last_error
    sup.request("stop")
    await run


async def test_a_crash_after_ready_restarts_until_the_crash_loop_limit(supervisor: Factory) -> None:
    # A run counts as healthy after 10 x backoff_max_s (5 s here): each crash, 2.5 s after the
    # engine's startup line and so at most 2.5 s after ready, stays inside the crash streak.
    sup = supervisor("--mode", "crash-after", "--after", "2.5", max_restarts=2, backoff_max_s=0.5)
    run = asyncio.create_task(sup.run())
    await wait_for(sup, S.FAILED, timeout=60)
    snap = sup.snapshot()
    assert snap.restarts == 2
    assert snap.last_error is not None and "crash loop: 3 crashes" in snap.last_error
    assert [e.state for e in snap.events].count(S.READY) == 3
    sup.request("stop")
    await run


async def test_a_kill_9_of_the_server_is_a_crash_though_its_child_holds_the_output_open(supervisor: Factory) -> None:
    """vLLM's EngineCore and worker outlive a kill -9 of the API server for a while, holding its stdout:
    the exit is seen at once (not after hang_timeout_s), the orphans are killed and the engine restarts."""
    sup = supervisor("--child", hang_timeout_s=600.0)
    run = asyncio.create_task(sup.run())
    await wait_for(sup, S.READY)
    pgid = sup.snapshot().pid
    assert pgid is not None
    os.kill(pgid, signal.SIGKILL)
    await wait_for(sup, S.RESTARTING, S.STARTING, S.LOADING, S.WARMING, timeout=30)
    assert group_gone(pgid)
    await wait_for(sup, S.READY)
    snap = sup.snapshot()
    assert snap.restarts == 1 and snap.pid != pgid
    assert any("exited with code -9" in e.reason for e in snap.events)
    sup.request("stop")
    await run


async def test_a_hung_engine_is_killed_and_restarted(supervisor: Factory) -> None:
    sup = supervisor("--mode", "hang-after", "--after", "3")
    run = asyncio.create_task(sup.run())
    await wait_for(sup, S.RESTARTING, timeout=30)
    last_error = sup.snapshot().last_error
    assert last_error is not None and "stopped answering /health" in last_error
    await wait_for(sup, S.READY)
    sup.request("stop")
    await run


async def test_an_engine_ignoring_sigterm_is_killed_after_the_grace_period(supervisor: Factory) -> None:
    sup = supervisor("--ignore-sigterm", "--child")
    run = asyncio.create_task(sup.run())
    await wait_for(sup, S.READY)
    pgid = sup.snapshot().pid
    assert pgid is not None
    loop = asyncio.get_running_loop()
    started = loop.time()
    sup.request("stop")
    await run
    assert 1.5 <= loop.time() - started < 10  # shutdown_timeout_s + stop_grace_s, then SIGKILL
    assert group_gone(pgid)


async def test_a_drain_the_engine_reports_finished_ends_stop_grace_s_later(supervisor: Factory) -> None:
    """The engine prints vLLM's recorded drain (testkit/data/vllm-cpu-drain.log), then stalls in its teardown:
    the group is killed stop_grace_s after the drain's last request, not after the whole shutdown_timeout_s."""
    sup = supervisor("--sigterm-log", str(DATA / "vllm-cpu-drain.log"), "--child", shutdown_timeout_s=600.0)
    run = asyncio.create_task(sup.run())
    await wait_for(sup, S.READY)
    pgid = sup.snapshot().pid
    assert pgid is not None
    sup.request("drain")
    await wait_for(sup, S.STOPPED, timeout=60)
    assert group_gone(pgid)
    assert "request processing complete" in sup.log.path.read_text()
    sup.request("stop")
    await run


async def test_vllms_fd_limit_advice_is_not_given_as_the_cause_of_a_slow_boot(tmp_path: Path) -> None:
    """A boot that prints vLLM's recorded boot log (its ulimit warning mentions `OSError: [Errno 24]`) and
    never answers: the failure quotes the log's last lines, not the advice."""
    plan = fake_plan(tmp_path, ready_timeout_s=3.0)
    plan = replace(plan, argv=(sys.executable, str(REPLAY_ENGINE), str(DATA / "vllm-cpu-boot.log")))
    log = EngineLog(tmp_path / "logs")
    sup = EngineSupervisor(plan, log)
    run = asyncio.create_task(sup.run())
    await wait_for(sup, S.FAILED, timeout=60)
    sup.request("stop")
    await run
    log.close()
    error = sup.snapshot().last_error
    assert error is not None and "not ready within 3s" in error and "Errno 24" not in error, error
    assert "Errno 24" in log.path.read_text()


async def test_not_ready_within_the_budget_fails(supervisor: Factory) -> None:
    sup = supervisor("--mode", "no-ready", ready_timeout_s=2.0)
    run = asyncio.create_task(sup.run())
    await wait_for(sup, S.FAILED, timeout=20)
    last_error = sup.snapshot().last_error
    assert last_error is not None and "not ready within 2s" in last_error
    sup.request("stop")
    await run


async def test_drain_then_restart_from_stopped(supervisor: Factory) -> None:
    sup = supervisor()
    run = asyncio.create_task(sup.run())
    await wait_for(sup, S.READY)
    sup.request("drain")
    await wait_for(sup, S.STOPPED)
    sup.request("restart")
    await wait_for(sup, S.READY)
    sup.request("stop")
    await run
    assert [e.state for e in sup.snapshot().events].count(S.READY) == 2


async def test_a_drain_deadline_that_ends_requests_in_flight_reports_how_many(supervisor: Factory) -> None:
    """The engine serves a page recorded under load and never finishes its drain: what that page holds in
    flight is what the deadline cancelled (the real engine under SIGTERM: tests/runtime/test_drain_deadline.py)."""
    page = DATA / "console" / "metrics-5.txt"
    held = sum(
        s.value for f in text_string_to_metric_families(page.read_text()) if f.name in IN_FLIGHT for s in f.samples
    )
    sup = supervisor("--ignore-sigterm", "--metrics", str(page), shutdown_timeout_s=2.0)
    run = asyncio.create_task(sup.run())
    await wait_for(sup, S.READY)
    sup.request("drain")
    await wait_for(sup, S.STOPPED, timeout=30)
    snapshot = sup.snapshot()
    assert held > 0 and snapshot.drain_cancelled == held
    said = f"drained; the drain deadline (2s) cancelled {held:.0f} requests still in flight"
    assert snapshot.events[-1].reason == said
    assert state_document(snapshot, sup.plan).drain_cancelled == held  # what GET /state answers
    sup.request("stop")
    await run
