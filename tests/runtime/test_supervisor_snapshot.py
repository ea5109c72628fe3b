"""How others see the supervisor: a frozen snapshot, a subscription, a bounded event history.

Against a real supervisor of testkit/fake_engine.py, which boots through loading and warming in
well under a second.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.runtime.engine_log import EngineLog
from appliance.runtime.lifecycle import EngineEvent, EngineState
from appliance.runtime.supervisor import HISTORY, EngineSupervisor, SupervisorSnapshot
from testkit.helpers import fake_plan, wait_for

S = EngineState


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EngineLog]:
    engine_log = EngineLog(tmp_path / "logs")
    yield engine_log
    engine_log.close()


async def test_a_snapshot_is_frozen_and_tells_the_lifecycle(tmp_path: Path, log: EngineLog) -> None:
    sup = EngineSupervisor(fake_plan(tmp_path), log)
    before = sup.snapshot()
    assert before == SupervisorSnapshot(S.VALIDATING, pid=None, uptime_s=None, restarts=0, last_error=None, events=())
    run = asyncio.create_task(sup.run())
    await wait_for(sup, S.READY)
    ready = sup.snapshot()
    sup.request("stop")
    await run
    assert ready.pid is not None and ready.uptime_s is not None and ready.uptime_s >= 0
    assert [e.state for e in ready.events] == [S.STARTING, S.LOADING, S.WARMING, S.READY]
    assert before.state is S.VALIDATING  # an earlier snapshot does not change under its reader
    with pytest.raises(dataclasses.FrozenInstanceError):
        ready.state = S.FAILED  # type: ignore[misc]


async def test_subscribers_hear_every_change_until_they_unsubscribe(tmp_path: Path, log: EngineLog) -> None:
    sup = EngineSupervisor(fake_plan(tmp_path), log)
    early: list[EngineEvent] = []
    late: list[EngineEvent] = []
    unsubscribe = sup.subscribe(early.append)
    run = asyncio.create_task(sup.run())
    await wait_for(sup, S.READY)
    unsubscribe()
    unsubscribe()  # a second call is harmless
    sup.subscribe(late.append)
    sup.request("stop")
    await run
    assert [e.state for e in early] == [S.STARTING, S.LOADING, S.WARMING, S.READY]
    assert [(e.previous, e.state) for e in late] == [(S.READY, S.DRAINING), (S.DRAINING, S.STOPPED)]
    assert tuple(early + late) == sup.snapshot().events  # the same events the history holds


async def test_the_event_history_keeps_only_the_latest_events(tmp_path: Path, log: EngineLog) -> None:
    assert HISTORY == 200
    sup = EngineSupervisor(fake_plan(tmp_path), log, history=3)
    run = asyncio.create_task(sup.run())
    await wait_for(sup, S.READY)
    sup.request("drain")
    await wait_for(sup, S.STOPPED)
    sup.request("stop")
    await run
    assert [e.state for e in sup.snapshot().events] == [S.READY, S.DRAINING, S.STOPPED]
