"""The site view with the gateway: the console under Pilot watching a real site (testkit/gateway_site.py) and reading
the real gateway's exporter while a burst saturates a model; and with an exporter that is not there."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from textual.widgets import DataTable

from appliance.control.client import ControlClient
from appliance.control.site_file import load_site_file, target
from testkit.console_pilot import poll, recorded_console, shown
from testkit.gateway_site import TOKEN, Engine, metered_gateway
from testkit.helpers import free_port
from testkit.recorded_appliance import recorded_appliance
from tui.app import make_console
from tui.screens.fleet import FleetScreen
from tui.widgets.gateway import GatewayPanel

SIZE = (140, 48)
SLOW = Engine("a", "tiny-a", max_concurrency=2, delay_s=1.0)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, str]]:
    """The site file, the gateway's URL and its exporter's URL."""
    folder = tmp_path_factory.mktemp("console-gateway")
    with metered_gateway([SLOW], folder, "gateway.ttft_slo_s=1") as (site, url, metrics):
        yield site, url, f"http://{metrics}/metrics"


def gateway_row(app: object) -> tuple[str, ...]:
    assert isinstance(app, FleetScreen)
    table = app.query_one(GatewayPanel).query_one(DataTable)
    return tuple(str(cell) for cell in table.get_row(SLOW.model))


async def test_the_site_view_shows_a_saturated_models_queue_and_shed_rate(site: tuple[Path, str, str]) -> None:
    site_file, url, metrics = site
    targets = [target(entry, {"APPLIANCE_TOKEN": TOKEN}) for entry in load_site_file(site_file)]
    app = make_console(ControlClient(targets), refresh_s=0, gateway_metrics=metrics)
    async with app.run_test(size=SIZE) as pilot, httpx.AsyncClient(timeout=30) as http:
        await poll(pilot)  # the counters before the burst
        assert isinstance(app.screen, FleetScreen)

        async def post() -> int:
            reply = await http.post(f"{url}/v1/completions", json={"model": SLOW.model, "prompt": "x"})
            return reply.status_code

        burst = [asyncio.create_task(post()) for _ in range(5)]  # 2 admitted, 3 queue past the 1 s bound
        await asyncio.sleep(0.3)
        await poll(pilot)
        model, queued, _, _ = gateway_row(app.screen)
        assert (model, queued) == (SLOW.model, "3")
        assert sorted(await asyncio.gather(*burst)) == [200, 200, 429, 429, 429]
        await poll(pilot)
        _, queued, admitted, shed = gateway_row(app.screen)
        assert queued == "0" and float(admitted.removesuffix("/s")) > 0 and float(shed.removesuffix("/s")) > 0
        # The poll at start, then three: three intervals counted.
        assert "admitted and shed per second over the last 3 polls" in shown(app.screen.query_one(GatewayPanel))
        assert app.screen.query_one("#fleet", DataTable).get_row_at(0)[0] == SLOW.name


async def test_an_exporter_that_is_not_there_is_one_line_in_the_site_view() -> None:
    closed = f"http://127.0.0.1:{free_port()}/metrics"
    with recorded_appliance() as rec:
        app = recorded_console(rec, gateway_metrics=closed)
        async with app.run_test(size=SIZE) as pilot:
            await poll(pilot, 2)
            assert isinstance(app.screen, FleetScreen)
            panel = app.screen.query_one(GatewayPanel)
            assert panel.display and shown(panel).strip().startswith(f"gateway {closed}: unreachable: ")
            assert panel.query_one(DataTable).row_count == 0
            assert app.screen.query_one("#fleet", DataTable).row_count == 1  # the appliances are still shown
