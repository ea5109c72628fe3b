"""The console against a live `appliance serve` on the real CPU engine, booted once for this module.

The engine logs per-step details (--enable-logging-iteration-details) and stats every second, so
the scheduler view has both its sources. Tests run in order: watch under load, then drain and
restart through the confirmation dialog.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from appliance.control.client import ControlClient, Target
from tui.app import ConsoleApp, make_console
from tui.screens.logs import LogsScreen
from tui.widgets.load import LoadPanel
from tui.widgets.panels import SchedulerPanel

from .appliance_process import ENGINE_TESTS, Served, running_appliance
from .console_pilot import shown, until
from .test_engine_cpu import MODEL

pytestmark = ENGINE_TESTS
EXTRA = ('engine.extra_args=[--gpu-memory-utilization,"0.2",--enforce-eager,--enable-logging-iteration-details]',
         "engine.env.VLLM_LOG_STATS_INTERVAL=1")  # fmt: skip


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with running_appliance(tmp_path_factory.mktemp("console-live"), *EXTRA) as served:
        yield served


def console(live: Served) -> ConsoleApp:
    return make_console(ControlClient([Target("live", live.control_url, live.token)]), refresh_s=0.5)


def generate(live: Served, requests: int) -> None:
    client = live.client()
    for i in range(requests):
        client.completions.create(model=MODEL, prompt=f"Request {i} " * 40, max_tokens=200,
                                  extra_body={"ignore_eos": True})  # fmt: skip


def observed_first_tokens(app: ConsoleApp) -> float:
    view = app.selected_view()
    summary = view.summary if view is not None else None
    return summary.ttft.observations if summary is not None and summary.ttft is not None else 0.0


async def test_the_console_shows_live_load_latency_scheduler_and_logs(live: Served) -> None:
    app = console(live)
    async with app.run_test(size=(140, 48)) as pilot:
        await until(lambda: (v := app.selected_view()) is not None and v.summary is not None)
        await asyncio.to_thread(generate, live, 12)
        await until(lambda: observed_first_tokens(app) >= 12)  # the polls after the load saw all of it
        view = app.selected_view()
        assert view is not None and view.polled.state is not None and view.polled.state.state == "ready"
        summary = view.summary
        assert summary is not None and summary.ttft is not None and summary.ttft.observations >= 12
        assert summary.generation_tps_history and max(summary.generation_tps_history) > 0
        assert "tok/s" in shown(app.screen.query_one(LoadPanel))
        await until(lambda: "with prefill" in shown(app.screen.query_one(SchedulerPanel)))
        await pilot.press("l")
        assert isinstance(app.screen, LogsScreen)
        await until(lambda: any("POST /v1/completions" in line for line in app.log_lines()))


async def test_drain_and_restart_from_the_console_reach_the_engine(live: Served) -> None:
    app = console(live)
    async with app.run_test(size=(140, 48)) as pilot:

        def state() -> str | None:
            view = app.selected_view()
            return view.polled.state.state if view is not None and view.polled.state is not None else None

        await until(lambda: state() == "ready")
        await pilot.press("d", "y")
        await until(lambda: state() == "stopped", timeout=120)
        await pilot.press("r", "y")
        await until(lambda: state() == "ready", timeout=300)


def test_status_prints_the_load_summary_for_scripts(live: Served) -> None:
    done = subprocess.run([sys.executable, "-m", "appliance.cli", "status", "--url", live.control_url, "--json"],
                          env=os.environ | {"APPLIANCE_TOKEN": live.token}, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    load = json.loads(done.stdout)["load"]
    assert load["window_s"] is None and load["running"] == 0 and load["missing"] == []
