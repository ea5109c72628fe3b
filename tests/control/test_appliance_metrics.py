"""The control API's GET /metrics: the series a fleet alerts on, in Prometheus's conventions (checked by
promtool), with the values the appliance computes; the decode-stall and goodput arithmetic behind them."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from appliance.control.api import create_app
from appliance.observe.engine_metrics import KV_USAGE, Histogram, parse_metrics
from appliance.observe.metrics_window import share_within
from appliance.observe.scheduler_log import SchedulerLog
from appliance.runtime.engine_log import EngineLog
from appliance.runtime.lifecycle import EngineState
from appliance.runtime.supervisor import EngineSupervisor
from testkit.helpers import REPLAY_ENGINE, fake_plan, promtool, wait_for
from testkit.recorded_appliance import PAGES, recorded_api
from tests.runtime.test_supervisor_device_faults import FABRIC

TOKEN = "recorded-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SERIES = (
    "appliance_engine_state",
    "appliance_engine_ready",
    "appliance_engine_state_seconds",
    "appliance_engine_restarts_total",
    "appliance_engine_draining",
    "appliance_quarantined",
    "appliance_boot_phase_seconds",
    "appliance_decode_stalls_total",
    "appliance_decode_stall_seconds_total",
    "appliance_decode_seconds_total",
    "appliance_requests_running",
    "appliance_requests_waiting",
    "appliance_kv_cache_usage_ratio",
    "appliance_slo_seconds",
    "appliance_goodput_ratio",
    "appliance_config_info",
)
"""Every series the recorded appliance exports (the generation series need an upgrader: test_rollout_runner)."""


def samples(page: str) -> dict[str, float]:
    """Each sample of an exposition page, by name with its labels as exposed."""
    found = {}
    for family in text_string_to_metric_families(page):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            found[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return found


async def test_the_recorded_appliance_exports_every_series_in_prometheus_conventions() -> None:
    scrapes = 4
    with recorded_api(TOKEN) as api:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app), base_url="http://control") as client:
            for _ in range(scrapes):  # each scrape reads the engine's next recorded page
                page = (await client.get("/metrics", headers=AUTH)).text
    checked = promtool("check", "metrics", stdin=page)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    found = samples(page)
    assert set(SERIES) <= {name.split("{", 1)[0] for name in found}
    assert found["appliance_engine_ready"] == 1.0 and found['appliance_engine_state{appliance_engine_state="ready"}']
    engine_page = parse_metrics(PAGES[scrapes - 1], 0.0)
    assert found["appliance_kv_cache_usage_ratio"] == pytest.approx(engine_page.gauges[KV_USAGE])
    assert found['appliance_slo_seconds{slo="ttft"}'] == 2.0  # workload=chat's slo_ttft_ms, in seconds
    assert 0.0 <= found['appliance_goodput_ratio{slo="ttft"}'] <= 1.0
    assert TOKEN not in page


async def test_a_quarantine_and_the_faults_that_led_to_it_are_series(tmp_path: Path) -> None:
    """The device-fault scenario of tests/runtime/test_supervisor_device_faults.py: a recorded fabric timeout, the one
    reset `reset_once` allows, the same fault again."""
    recorded = tmp_path / "fabric.log"
    recorded.write_text(FABRIC + "\n")
    reset = (sys.executable, "-c", "print('Re-initializing boards after reset')")
    plan = fake_plan(tmp_path, ready_timeout_s=600.0, on_device_fault="reset_once", reset_command=reset)
    log = EngineLog(tmp_path / "logs")
    sup = EngineSupervisor(replace(plan, argv=(sys.executable, str(REPLAY_ENGINE), str(recorded))), log)
    app = create_app(sup, TOKEN)
    run = asyncio.create_task(sup.run())
    try:
        await wait_for(sup, EngineState.FAILED, timeout=60)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://control") as client:
            page = (await client.get("/metrics", headers=AUTH)).text
    finally:
        sup.request("stop")
        await run
        log.close()
    assert promtool("check", "metrics", stdin=page).returncode == 0
    found = samples(page)
    assert found["appliance_quarantined"] == 1.0 and found["appliance_engine_ready"] == 0.0
    assert found['appliance_faults_total{device="true",rule="fabric-router-timeout"}'] == 2.0  # before and after


def test_decode_stalls_are_prefill_steps_between_decodes_with_their_share_of_decode_time() -> None:
    log = SchedulerLog()
    step = (
        "Engine 000: Iteration({i}): {cr} context requests, {ct} context tokens, {gr} generation requests, "
        "{gt} generation tokens, iteration elapsed time: {ms} ms"
    )
    for i, (cr, ct, gr, ms) in enumerate(
        [
            (1, 90, 0, 50),
            (0, 0, 1, 10),
            (1, 400, 0, 200),
            (1, 300, 0, 100),
            (0, 0, 2, 10),
            (0, 0, 2, 10),
            (0, 0, 0, 1),
            (1, 50, 0, 40),
        ]
    ):
        log.feed(step.format(i=i, cr=cr, ct=ct, gr=gr, gt=gr, ms=ms))
    stalls = log.stalls()
    # The first prefill held no decode back, nor the last (nothing was decoding); the two in between did, once.
    assert stalls.stalls == 1
    assert stalls.stall_s == pytest.approx(0.3)
    assert stalls.decode_s == pytest.approx(0.33)


def test_the_share_within_an_slo_interpolates_inside_its_bucket_as_histogram_quantile_does() -> None:
    hist = Histogram(bounds=(0.1, 0.5, 1.0, float("inf")), cumulative=(2.0, 6.0, 8.0, 10.0), count=10.0, sum=5.0)
    assert share_within(hist, 0.3) == pytest.approx(0.4)  # 2 below 0.1, half of the 4 in (0.1, 0.5]
    assert share_within(hist, 1.0) == pytest.approx(0.8)
    assert share_within(hist, 5.0) == pytest.approx(0.8)  # beyond the last finite bound nothing more is known
    assert share_within(Histogram((1.0, float("inf")), (0.0, 0.0), 0.0, 0.0), 1.0) is None
