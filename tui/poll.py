"""One poll of one appliance: its state and load, and now and then its host facts and checks."""

from __future__ import annotations

from dataclasses import dataclass

from appliance.control.client import ApiError, ControlClient
from appliance.control.documents import ChecksDocument, HostDocument, LoadDocument, StateDocument

__all__ = ["Polled", "poll"]


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


async def poll(client: ControlClient, name: str, *, detail: bool) -> Polled:
    """State and load; with `detail`, host facts and preflight checks too."""
    url = client.targets[name].url
    try:
        state = await client.state(name)
        load, metrics_error = await _load(client, name)
        host = await client.host(name) if detail else None
        checks = await client.checks(name) if detail else None
    except ApiError as err:
        return Polled(name, url, error=err.reason)
    return Polled(name, url, state, load, metrics_error, host, checks, detailed=detail)


async def _load(client: ControlClient, name: str) -> tuple[LoadDocument | None, str | None]:
    try:
        load = await client.load(name)
    except ApiError as err:
        if err.status is None:
            raise  # not reached at all: the whole poll failed
        return None, err.reason  # e.g. an appliance older than GET /load
    return load, load.metrics_error
