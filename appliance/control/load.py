"""GET /load: the engine's load over a window the appliance keeps, brought up to date when asked.

Nothing runs between requests: a request scrapes the engine's /metrics once and adds the sample
to a 60 s MetricsWindow kept between requests, feeds the scheduler view the engine log lines
written since the one before, and derives the alerts. An appliance nobody watches spends no CPU
on this; one a console polls each second gets a sample each second, as the console's own window
did. Requests closer than `share_s` to the last scrape share it (the lifecycle alerts are still
their own): however many consoles poll, the engine is scraped and the window summarised at most
once per `share_s`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx

from appliance.control.capabilities import CapabilityView
from appliance.control.documents import LoadDocument, SchedulerDocument, SummaryDocument, validate
from appliance.control.sources import EngineMetrics, Supervised
from appliance.observe.alerts import alerts
from appliance.observe.engine_metrics import parse_metrics
from appliance.observe.metrics_window import FAMILIES, TPOT, TTFT, LoadSummary, MetricsWindow
from appliance.observe.scheduler_log import DecodeStalls, SchedulerLog
from appliance.runtime.supervisor import SupervisorSnapshot

__all__ = ["LoadTracker"]

_LOG_BACKLOG = 500  # lines of the log the first request reads back
_Scrape = tuple[LoadSummary | None, str | None, str | None]
"""The window's summary, why there is none, and the page scraped."""


class LoadTracker:
    """The window, the scheduler view and the alerts of one supervised engine."""

    def __init__(
        self,
        sup: Supervised,
        engine: EngineMetrics,
        clock: Callable[[], float],
        capabilities: CapabilityView,
        share_s: float = 0.0,
    ) -> None:
        self._sup = sup
        self._capabilities = capabilities
        self._engine = engine
        self._clock = clock
        self._share_s = share_s
        self._window = MetricsWindow()
        self._scheduler = SchedulerLog()
        self._seen: int | None = None
        self._lock = asyncio.Lock()
        self._last: tuple[float, _Scrape] | None = None

    async def document(self) -> LoadDocument:
        """Scrape now (or share a scrape younger than `share_s`), and summarise the window
        (None with the reason when the scrape failed)."""
        async with self._lock:  # one scrape at a time keeps the window's samples in time order
            summary, error, page = await self._shared()
        plan, snap = self._sup.plan, self._sup.snapshot()
        slo = plan.resolved.get("workload.slo_ttft_ms")
        differ = self._capabilities.document(page).differences
        found = (
            *_lifecycle_alerts(snap),
            *([f"{len(differ)} capabilities differ from the plan"] if differ else []),
            *alerts(snap.state.value, summary, plan.max_concurrency, None if slo is None else float(slo)),
        )
        return LoadDocument(
            summary=None if summary is None else validate(SummaryDocument, summary),
            metrics_error=error,
            scheduler=validate(SchedulerDocument, self._scheduler.view()),
            alerts=found,
        )

    def stalls(self) -> DecodeStalls:
        """Decode stalls counted in the engine log read so far."""
        return self._scheduler.stalls()

    def goodput(self, slo_ttft_s: float, slo_tpot_s: float) -> dict[str, float]:
        """Per SLO ("ttft", "tpot"), the share of the window's requests within it; an SLO no request was measured
        against is left out."""
        window = self._window
        shares = {"ttft": window.share_within(TTFT, slo_ttft_s), "tpot": window.share_within(TPOT, slo_tpot_s)}
        return {slo: share for slo, share in shares.items() if share is not None}

    async def _shared(self) -> _Scrape:
        # Real time, not `clock`: that one stamps samples (and a recorded engine's moves per page).
        now = time.monotonic()
        if self._last is None or now - self._last[0] >= self._share_s:
            self._last = now, await self._scrape()
            self._read_log()
        return self._last[1]

    async def _scrape(self) -> _Scrape:
        """The window's summary, why there is none, and the page scraped."""
        try:
            reply = await self._engine.fetch()
        except httpx.HTTPError as err:
            return None, f"engine /metrics unreachable: {type(err).__name__} {err}".rstrip(), None
        if reply.status_code != 200:
            return None, f"engine /metrics answered {reply.status_code}", None
        # Stamped after the answer, under the lock: samples enter the window in time order.
        self._window.add(parse_metrics(reply.text, self._clock(), keep=FAMILIES))
        return self._window.summary(), None, reply.text

    def _read_log(self) -> None:
        log = self._sup.log
        new = log.written - (self._seen or 0)
        lines = log.tail(min(new, _LOG_BACKLOG) if self._seen is None else new)  # the first read: a backlog
        self._seen = log.written
        for line in lines:
            self._scheduler.feed(line)


def _lifecycle_alerts(snap: SupervisorSnapshot) -> tuple[str, ...]:
    """What the lifecycle says needs an operator: a quarantine, the fault that ended a boot, a slow boot."""
    found = []
    if snap.quarantined:
        found.append("quarantined: needs hands")
    if snap.fault is not None:
        found.append(f"fault: {snap.fault.rule}")
    if snap.boot is not None and snap.boot.slow:
        found.append(f"boot slow: {snap.boot.elapsed_s:.0f}s, record {snap.boot.expected_s:.0f}s")
    return tuple(found)
