"""The console against live `appliance serve`s on the real CPU engine (conftest's shared appliances).

It watches the read-only one under load: that engine logs per-step details
(--enable-logging-iteration-details) and stats every second, so the scheduler view has both its
sources. It drains and restarts the restartable one through the confirmation dialog, with streams
in flight that must all finish.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from appliance.control.client import ControlClient, Target
from testkit.appliance_process import API_KEY, MODEL, Served
from testkit.console_pilot import shown, until
from tui.app import ConsoleApp, make_console
from tui.screens.logs import LogsScreen
from tui.widgets.load import LoadPanel
from tui.widgets.panels import SchedulerPanel


def console(live: Served) -> ConsoleApp:
    return make_console(ControlClient([Target("live", live.control_url, live.token)]), refresh_s=0.5)


def generate(live: Served, requests: int) -> None:
    client = live.client()
    for i in range(requests):
        client.completions.create(
            model=MODEL, prompt=f"Request {i} " * 40, max_tokens=200, extra_body={"ignore_eos": True}
        )


def observed_first_tokens(app: ConsoleApp) -> float:
    view = app.selected_view()
    summary = view.summary if view is not None else None
    return summary.ttft.observations if summary is not None and summary.ttft is not None else 0.0


async def test_the_console_shows_live_load_latency_scheduler_and_logs(shared_appliance: Served) -> None:
    live = shared_appliance
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
        await pilot.press("l")  # the log is streamed from now on, while this screen shows it
        assert isinstance(app.screen, LogsScreen)
        await asyncio.to_thread(generate, live, 1)
        await until(lambda: any("POST /v1/completions" in line for line in app.log_lines()))


def stream_to_the_end(live: Served, i: int) -> str | None:
    """One long streamed completion on the restartable appliance's keyed port; its finish reason."""
    stream = live.client(API_KEY).completions.create(
        model=MODEL, prompt=f"Request {i}", max_tokens=200, stream=True, extra_body={"ignore_eos": True}
    )
    finish = None
    for chunk in stream:
        finish = chunk.choices[0].finish_reason or finish if chunk.choices else finish
    return finish


async def test_drain_and_restart_from_the_console_reach_the_engine_and_let_in_flight_requests_finish(
    restartable_appliance: Served,
) -> None:
    live = restartable_appliance
    app = console(live)
    async with app.run_test(size=(140, 48)) as pilot:

        def state() -> str | None:
            view = app.selected_view()
            return view.polled.state.state if view is not None and view.polled.state is not None else None

        await until(lambda: state() == "ready")
        with ThreadPoolExecutor(8) as pool:
            streams = [asyncio.wrap_future(pool.submit(stream_to_the_end, live, i)) for i in range(8)]
            await asyncio.sleep(1.0)
            await pilot.press("d", "y")
            finishes = await asyncio.wait_for(asyncio.gather(*streams), timeout=120)
        assert finishes == ["length"] * 8
        await until(lambda: state() == "stopped", timeout=120)
        await pilot.press("r", "y")
        await until(lambda: state() == "ready", timeout=300)
