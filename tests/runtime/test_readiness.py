"""Readiness leads the drain: /readyz turns 503 the moment a drain begins, and the engine keeps
serving for `supervisor.deregister_s` so balancers can take the appliance out of rotation first."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from appliance.control.api import create_app
from appliance.runtime.engine_log import EngineLog
from appliance.runtime.lifecycle import EngineState
from appliance.runtime.supervisor import EngineSupervisor
from testkit.helpers import fake_plan, wait_for


@pytest.mark.parametrize("command", ["drain", "restart", "stop"])
async def test_readiness_is_withdrawn_before_the_engine_stops_accepting(tmp_path: Path, command: str) -> None:
    plan = fake_plan(tmp_path, deregister_s=1.0)
    log = EngineLog(tmp_path / "logs")
    sup = EngineSupervisor(plan, log)
    transport = httpx.ASGITransport(app=create_app(sup, "token"))
    run = asyncio.create_task(sup.run())
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://control") as control,
        httpx.AsyncClient() as http,
    ):
        assert (await control.get("/readyz")).status_code == 503  # booting: not in rotation yet
        await wait_for(sup, EngineState.READY)
        assert (await control.get("/readyz")).status_code == 200
        sup.request(command)  # what POST /drain, /restart and SIGTERM do
        await wait_for(sup, EngineState.DRAINING, timeout=5)
        asked = time.monotonic()
        assert (await control.get("/readyz")).status_code == 503
        assert (await http.get(plan.health_url)).status_code == 200  # still serving while balancers notice
        while sup.snapshot().pid is not None and sup.snapshot().state is EngineState.DRAINING:
            await asyncio.sleep(0.05)
        assert time.monotonic() - asked >= 0.75
        if command == "restart":
            await wait_for(sup, EngineState.READY)
            assert (await control.get("/readyz")).status_code == 200  # back in rotation
        sup.request("stop")
        await run
    log.close()
