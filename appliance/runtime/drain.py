"""What a drain left unfinished: the requests still in the engine when its deadline ended them.

The engine serves its clients directly (no proxy of the appliance sits in the data path), so the count
is the engine's own: its `/metrics` running and waiting gauges, read once a second while it drains.
vLLM aborts whatever is left when `--shutdown-timeout` (the supervisor's `shutdown_timeout_s`) passes
and exits, so the last reading before that is the number cancelled; a drain that finished (vLLM logs
it) cancelled none.
"""

from __future__ import annotations

import asyncio

import httpx
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["InFlight", "in_flight"]

_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting")
_INTERVAL_S = 1.0


class InFlight:
    """The engine's in-flight requests as last read, polled while `watch()` runs."""

    def __init__(self, http: httpx.AsyncClient, metrics_url: str) -> None:
        self._http = http
        self._url = metrics_url
        self.last: int | None = None
        """Running plus waiting at the latest readable scrape; None before one."""

    async def watch(self) -> None:
        """Scrape every second until cancelled."""
        while True:
            count = await in_flight(self._http, self._url)
            if count is not None:
                self.last = count
            await asyncio.sleep(_INTERVAL_S)


async def in_flight(http: httpx.AsyncClient, metrics_url: str) -> int | None:
    """Requests running plus waiting in the engine, from its /metrics; None when that cannot be read."""
    try:
        page = (await http.get(metrics_url, timeout=_INTERVAL_S)).text
        values = [s.value for f in text_string_to_metric_families(page) if f.name in _GAUGES for s in f.samples]
    except (httpx.HTTPError, ValueError):  # gone, or not a metrics page (an engine without /metrics)
        return None
    return round(sum(values)) if values else None
