"""The control API through httpx's ASGI transport, with a real supervisor of testkit/fake_engine.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from appliance.control.api import create_app
from appliance.runtime.engine_log import EngineLog
from appliance.runtime.lifecycle import EngineState
from appliance.runtime.supervisor import EngineSupervisor
from testkit.helpers import fake_plan, wait_for

TOKEN = "test-token"


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[tuple[EngineSupervisor, httpx.AsyncClient]]:
    log = EngineLog(tmp_path / "logs")
    sup = EngineSupervisor(fake_plan(tmp_path), log)
    app = create_app(sup, TOKEN)
    run = asyncio.create_task(sup.run())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://control") as client:
        await wait_for(sup, EngineState.READY)
        yield sup, client
        sup.request("stop")
        await run
    log.close()


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_every_route_but_livez_needs_the_token(running: tuple[EngineSupervisor, httpx.AsyncClient]) -> None:
    _, client = running
    assert (await client.get("/livez")).status_code == 200
    for method, path in (
        ("GET", "/state"),
        ("GET", "/live"),
        ("GET", "/metrics"),
        ("GET", "/logs"),
        ("POST", "/drain"),
        ("POST", "/restart"),
    ):
        assert (await client.request(method, path)).status_code == 401
        assert (await client.request(method, path, headers=auth("nope"))).status_code == 401
        assert (await client.request(method, path, headers={"Authorization": TOKEN})).status_code == 401


async def test_state_reports_the_lifecycle_and_no_secret(
    running: tuple[EngineSupervisor, httpx.AsyncClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    sup, client = running
    state = (await client.get("/state", headers=auth())).json()
    assert state["state"] == "ready" and state["pid"] == sup.snapshot().pid and state["restarts"] == 0
    assert [e["to"] for e in state["events"]] == ["starting", "loading", "warming", "ready"]
    assert state["plan"]["secret_env"] == {"HF_TOKEN": "HF_TOKEN"}
    assert TOKEN not in str(state)


async def test_metrics_are_prometheus_text_with_state_and_boot_phases(
    running: tuple[EngineSupervisor, httpx.AsyncClient],
) -> None:
    _, client = running
    page = (await client.get("/metrics", headers=auth())).text
    assert 'appliance_engine_state{appliance_engine_state="ready"} 1.0' in page
    assert "appliance_engine_ready 1.0" in page
    assert "appliance_engine_restarts_total 0.0" in page
    assert 'appliance_boot_phase_seconds{phase="loading"}' in page
    assert 'appliance_config_info{checkpoint="appliance/tiny-llama"' in page


async def test_logs_tail_and_bad_parameters(running: tuple[EngineSupervisor, httpx.AsyncClient]) -> None:
    _, client = running
    tail = (await client.get("/logs?tail=2", headers=auth())).text.splitlines()
    assert tail == ["INFO Model loading took 0.01 GiB and 0.1 seconds", "INFO Application startup complete."]
    assert (await client.get("/logs?tail=many", headers=auth())).status_code == 400
    assert (await client.get("/drain", headers=auth())).status_code == 405
    assert (await client.get("/nothing", headers=auth())).status_code == 404


async def test_drain_is_accepted_and_carried_out(running: tuple[EngineSupervisor, httpx.AsyncClient]) -> None:
    sup, client = running
    reply = await client.post("/drain", headers=auth())
    assert reply.status_code == 202 and reply.json()["accepted"] == "drain"
    await wait_for(sup, EngineState.STOPPED)
