"""What the screens show of one appliance: the latest poll plus what the appliance modules derive."""

from __future__ import annotations

from dataclasses import dataclass

from appliance.observe.fleet import alerts
from appliance.observe.metrics_window import LoadSummary, MetricsWindow
from appliance.observe.scheduler_log import SchedulerView
from tui.client import Polled

__all__ = ["ApplianceView", "build_view"]


@dataclass(frozen=True, slots=True)
class ApplianceView:
    polled: Polled
    summary: LoadSummary | None
    alerts: tuple[str, ...]
    scheduler: SchedulerView | None

    @property
    def name(self) -> str:
        return self.polled.name


def build_view(polled: Polled, window: MetricsWindow, scheduler: SchedulerView | None) -> ApplianceView:
    """Fold a poll into the appliance's window and derive its summary and alerts."""
    if polled.sample is not None:
        window.add(polled.sample)
    summary = window.summary() if polled.sample is not None else None
    state = polled.state
    if state is None:
        return ApplianceView(polled, None, (polled.error or "unreachable",), scheduler)
    slo = state.config.get("workload.slo_ttft_ms")
    found = alerts(state.state, summary, state.max_concurrency, float(slo) if slo is not None else None)
    return ApplianceView(polled, summary, found, scheduler)
