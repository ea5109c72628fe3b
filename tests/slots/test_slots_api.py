"""The slots control API over real supervisors and real child processes (testkit/fake_engine.py,
so the routes can be checked in seconds; tests/slots/test_slots_serve.py does the same on vLLM):
GET /slots, each slot's routes under /slots/<slot>/, the token, and the root's 404."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from appliance.control.api import create_slots_app
from appliance.control.client import ControlClient, Target, slot_target
from appliance.runtime.engine_log import EngineLog
from appliance.runtime.lifecycle import EngineState
from appliance.runtime.supervisor import EngineSupervisor
from testkit.helpers import fake_plan, wait_for
from testkit.recorded_appliance import serving_here

TOKEN = "slots-token"


async def test_each_slot_is_served_and_acted_on_under_its_own_routes(tmp_path: Path) -> None:
    sups = {
        name: EngineSupervisor(fake_plan(tmp_path / name), EngineLog(tmp_path / name / "logs"), name=f"slot {name}")
        for name in ("a", "b")
    }
    runs = [asyncio.create_task(sup.run()) for sup in sups.values()]
    try:
        async with serving_here(create_slots_app("pair", sups, TOKEN)) as url:
            host = Target("host", url, TOKEN)
            async with ControlClient([host, slot_target(host, "a"), slot_target(host, "b")]) as client:
                await each_slot_is_served_under_its_own_routes(client, sups, url)
    finally:
        for sup in sups.values():
            sup.request("stop")
        await asyncio.gather(*runs)
        for sup in sups.values():
            sup.log.close()


async def each_slot_is_served_under_its_own_routes(
    client: ControlClient, sups: dict[str, EngineSupervisor], url: str
) -> None:
    for sup in sups.values():
        await wait_for(sup, EngineState.READY)
    listed = await client.slots("host")
    assert listed is not None and listed.name == "pair" and list(listed.slots) == ["a", "b"]
    assert listed.slots["a"].engine_url == sups["a"].plan.base_url and listed.slots["a"].pid is not None
    assert (await client.state("host/b")).pid == sups["b"].snapshot().pid
    assert await client.act("host/a", "drain") == "ready"
    await wait_for(sups["a"], EngineState.STOPPED)
    assert sups["b"].snapshot().state is EngineState.READY
    async with httpx.AsyncClient(base_url=url) as raw:
        root = await raw.get("/state", headers={"Authorization": f"Bearer {TOKEN}"})
        anonymous = await raw.get("/slots/b/state")
        logs = await raw.get("/slots/b/logs?tail=5", headers={"Authorization": f"Bearer {TOKEN}"})
    assert root.status_code == 404 and "/slots/a/state, /slots/b/state" in root.json()["error"]
    assert anonymous.status_code == 401
    assert logs.status_code == 200 and logs.text.strip()
    assert await client.slots("host/a") is None  # a slot's own routes have no /slots
