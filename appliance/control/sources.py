"""What the control API reads: a supervisor, its engine's /metrics page, and the host.

Each is a seam: `appliance serve` passes the real ones; tests point them at recorded captures
(a supervisor with a recorded lifecycle, an httpx.MockTransport serving recorded pages), so the
real API is what they exercise.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import httpx

from appliance.control.upgrade_documents import GenerationDocument, UpgradeDocument
from appliance.host.discovery import HostFacts, discover_host
from appliance.observe.board_health import BoardsView
from appliance.observe.host_usage import HostUsage
from appliance.plan import LaunchPlan
from appliance.runtime.engine_log import EngineLog
from appliance.runtime.supervisor import Command, Listener, SupervisorSnapshot

__all__ = ["EngineMetrics", "Sources", "Supervised", "Upgrades"]


class Supervised(Protocol):
    """What the API needs of a supervisor (EngineSupervisor is one)."""

    @property
    def plan(self) -> LaunchPlan: ...

    @property
    def log(self) -> EngineLog: ...

    def snapshot(self) -> SupervisorSnapshot: ...

    def subscribe(self, listener: Listener) -> Callable[[], None]: ...

    def request(self, command: Command) -> None: ...


class Upgrades(Protocol):
    """What the API needs of the upgrade runner (appliance.rollout.runner.Upgrader is one)."""

    def in_rotation(self) -> bool: ...

    @property
    def site_dir(self) -> str | None:
        """The site directory every generation's overrides are composed with (absolute); None: none."""
        ...

    def generations(self) -> tuple[GenerationDocument, GenerationDocument | None, UpgradeDocument | None]:
        """The current generation, the previous one and the last upgrade."""
        ...

    async def start(
        self, overrides: tuple[str, ...], against: str | None, gates: Mapping[str, object], check: bool
    ) -> UpgradeDocument:
        """Judge the generation `overrides` compose to under the plugin state `against` and, unless `check`, start
        upgrading to it."""
        ...


@dataclass(frozen=True, slots=True)
class Sources:
    """Where the API reads what the supervisor does not know."""

    engine: httpx.AsyncBaseTransport | None = None
    """How the engine's /metrics is fetched; None: HTTP to the plan's base URL. It is closed after
    each fetch, which httpx.MockTransport and httpx.ASGITransport survive."""
    host: Callable[[], HostFacts] = discover_host
    usage: Callable[[int | None], HostUsage] | None = None
    """Host CPU and memory with the engine group's RSS; None: a UsageSampler of this host."""
    clock: Callable[[], float] = time.monotonic
    """Stamps each engine sample (seconds; only differences matter)."""
    share_s: float = 0.5
    """GET /load within this long of the last scrape answers from it (0: every request scrapes)."""
    boards: Callable[[], BoardsView] | None = None
    """The latest view of the board monitor of the engine's boards; None: no boards watched (the CPU engine)."""


class EngineMetrics:
    """GETs the engine's /metrics page."""

    def __init__(self, base_url: str, transport: httpx.AsyncBaseTransport | None) -> None:
        self._url = f"{base_url}/metrics"
        self._transport = transport
        # Built once, and only for real HTTP: a client building its own costs ~50 ms of CPU per request.
        self._tls: ssl.SSLContext | bool = ssl.create_default_context() if transport is None else True

    async def fetch(self) -> httpx.Response:
        """The engine's answer, whatever its status; httpx.HTTPError when it cannot be reached."""
        async with httpx.AsyncClient(transport=self._transport, verify=self._tls, timeout=5.0, trust_env=False) as http:
            return await http.get(self._url)
