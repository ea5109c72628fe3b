"""GET /load: windows, percentiles, the scheduler split and alerts, computed by the appliance.

Recorded /metrics pages enter at the API's engine seam (testkit/recorded_appliance.py), one second
apart; expected values are the ones worked out by hand from their bucket lines in
tests/observe/test_console_maths.py. The engine-down cases use a real supervisor of testkit/fake_engine.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from appliance.control.api import create_app
from appliance.control.client import ControlClient, Target
from appliance.control.documents import LoadDocument
from appliance.runtime.engine_log import EngineLog
from appliance.runtime.lifecycle import EngineState
from appliance.runtime.supervisor import EngineSupervisor
from testkit.helpers import fake_plan, free_port, wait_for
from testkit.recorded_appliance import LOG_LINES, PAGES, RecordedApi, recorded_api, serving_here
from tests.observe.test_console_maths import FRESH

TOKEN = "load-test-token"


@asynccontextmanager
async def watching(pages: Sequence[str] = PAGES, **plan: object) -> AsyncIterator[tuple[RecordedApi, ControlClient]]:
    """The recorded appliance's real API (its plan changed by `plan`) and a client on it."""
    with recorded_api(TOKEN, pages=pages) as api:
        api.supervisor.plan = replace(api.supervisor.plan, **plan)  # type: ignore[arg-type]  # read per request
        async with serving_here(api.app) as url, ControlClient([Target("rec", url, TOKEN)]) as client:
            yield api, client


async def loads(client: ControlClient, times: int) -> LoadDocument:
    for _ in range(times - 1):
        await client.load("rec")
    return await client.load("rec")


async def test_load_needs_the_token() -> None:
    with recorded_api(TOKEN) as api:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app), base_url="http://rec") as http:
            assert (await http.get("/load")).status_code == 401
        assert api.engine.served == 0


async def test_the_engine_is_scraped_only_when_load_is_asked_for() -> None:
    async with watching() as (api, client):
        await client.state("rec")
        await client.host("rec")
        await asyncio.sleep(0.2)
        assert api.engine.served == 0  # nothing runs between requests
        await loads(client, 2)
        assert api.engine.served == 2


async def test_percentiles_come_from_the_window_the_appliance_keeps_between_requests() -> None:
    async with watching() as (_, client):
        summary = (await loads(client, 6)).summary  # pages 0-5, one second apart
    assert summary is not None and summary.window_s == 5.0
    assert summary.ttft is not None and summary.ttft.observations == 24
    assert summary.ttft.p50 == pytest.approx(0.02 + 0.02 * 4 / 12)
    assert summary.ttft.p99 == pytest.approx(0.08 + 0.02 * 0.76)
    assert len(summary.generation_tps_history) == 5 and summary.restarted is False and summary.missing == ()


async def test_the_scheduler_split_comes_from_the_engine_log_and_follows_new_lines() -> None:
    async with watching() as (api, client):
        first = (await client.load("rec")).scheduler
        steps = [line for line in LOG_LINES[-500:] if "Iteration(" in line]  # the backlog a first request reads
        assert first.steps == len(steps) and first.prefill_step_ms is None  # the capture ends decoding
        assert first.stats_line is not None and first.stats_line.startswith("Engine 000: Avg prompt throughput")
        prefill = next(line for line in LOG_LINES if "Iteration(" in line and " 0 context tokens" not in line)
        api.supervisor.log.write(prefill)
        after = (await client.load("rec")).scheduler
    assert after.steps == len(steps) + 1 and after.prefill_steps == first.prefill_steps + 1
    assert after.prefill_step_ms is not None


async def test_a_counter_reset_inside_the_window_raises_the_restart_alert() -> None:
    async with watching(pages=(PAGES[5], FRESH)) as (_, client):
        load = await loads(client, 2)
    assert load.summary is not None and load.summary.restarted
    assert "engine restarted" in load.alerts


async def test_alerts_follow_the_appliances_own_envelope_and_slo() -> None:
    async with watching(pages=(PAGES[0], PAGES[4]), max_concurrency=8) as (_, client):
        assert "at max concurrency" in (await loads(client, 2)).alerts  # 8 running in page 4
    async with watching(pages=(PAGES[0], PAGES[4])) as (_, client):
        assert (await loads(client, 2)).alerts == ()


async def test_load_says_why_there_is_no_summary(tmp_path: Path) -> None:
    log = EngineLog(tmp_path / "logs")
    plan = fake_plan(tmp_path)
    sup = EngineSupervisor(plan, log)
    run = asyncio.create_task(sup.run())
    down = EngineSupervisor(replace(plan, base_url=f"http://127.0.0.1:{free_port()}"), log)  # never started
    try:
        async with (
            serving_here(create_app(sup, TOKEN)) as fake,
            serving_here(create_app(down, TOKEN)) as control,
            ControlClient([Target("fake", fake, TOKEN), Target("down", control, TOKEN)]) as client,
        ):
            await wait_for(sup, EngineState.READY)
            load, gone = await client.load("fake"), await client.load("down")
    finally:
        sup.request("stop")
        await run
        log.close()
    # testkit/fake_engine.py has no /metrics
    assert load.summary is None and load.metrics_error == "engine /metrics answered 404"
    assert load.alerts == ("no engine metrics",) and load.scheduler.steps == 0
    assert gone.summary is None and gone.alerts == ()  # not ready: no alert for missing metrics
    assert gone.metrics_error is not None and gone.metrics_error.startswith("engine /metrics unreachable: ConnectError")
