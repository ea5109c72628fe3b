"""One poll of one appliance: its state and load, and now and then its host facts and checks.

One GET /live carries them all; an appliance from before /live (404) is asked for each document.
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.control.client import ApiError, ControlClient
from appliance.control.documents import ChecksDocument, HostDocument, LiveDocument, LoadDocument, StateDocument

__all__ = ["Polled", "Poller"]


@dataclass(frozen=True, slots=True)
class Polled:
    """One poll of one appliance; `error` set means it could not be reached or read."""

    name: str
    url: str
    state: StateDocument | None = None
    load: LoadDocument | None = None
    metrics_error: str | None = None
    """Why there is no load summary: the appliance's own reason, or why /load could not be read."""
    host: HostDocument | None = None
    checks: ChecksDocument | None = None
    """None when the appliance has none yet."""
    error: str | None = None
    detailed: bool = False
    """Host facts and checks were asked for (they are polled less often than state and load)."""


class Poller:
    """Polls appliances through one client, remembering which ones are from before GET /live."""

    def __init__(self, client: ControlClient) -> None:
        self.client = client
        self._without_live: set[str] = set()

    async def poll(self, name: str, *, detail: bool) -> Polled:
        """State and load; with `detail`, host facts and preflight checks too."""
        url = self.client.targets[name].url
        try:
            live = None if name in self._without_live else await self._live(name, detail)
            if live is None:
                return await _each(self.client, name, url, detail)
        except ApiError as err:
            return Polled(name, url, error=err.reason)
        load = live.load
        return Polled(name, url, live.state, load, load.metrics_error, live.host, live.checks, detailed=detail)

    async def _live(self, name: str, detail: bool) -> LiveDocument | None:
        """GET /live; None from an appliance from before it (a 404, remembered: it is not asked again)."""
        try:
            return await self.client.live(name, detail=detail)
        except ApiError as err:
            if err.status != 404:
                raise
        self._without_live.add(name)
        return None


async def _each(client: ControlClient, name: str, url: str, detail: bool) -> Polled:
    """The poll of an appliance older than GET /live: one request per document."""
    state = await client.state(name)
    load, metrics_error = await _load(client, name)
    host = await client.host(name) if detail else None
    checks = await client.checks(name) if detail else None
    return Polled(name, url, state, load, metrics_error, host, checks, detailed=detail)


async def _load(client: ControlClient, name: str) -> tuple[LoadDocument | None, str | None]:
    try:
        load = await client.load(name)
    except ApiError as err:
        if err.status is None:
            raise  # not reached at all: the whole poll failed
        return None, err.reason  # e.g. an appliance older than GET /load
    return load, load.metrics_error
