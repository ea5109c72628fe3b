"""What the screens show of one appliance: the latest poll, with the load and alerts it carries; and of the site
gateway: each model's traffic."""

from __future__ import annotations

from dataclasses import dataclass

from appliance.control.documents import SchedulerDocument, SummaryDocument
from appliance.control.gateway_view import ModelTraffic
from tui.poll import Polled

__all__ = ["ApplianceView", "GatewayView", "build_view"]


@dataclass(frozen=True, slots=True)
class ApplianceView:
    polled: Polled
    summary: SummaryDocument | None
    alerts: tuple[str, ...]
    scheduler: SchedulerDocument | None

    @property
    def name(self) -> str:
        return self.polled.name


def build_view(polled: Polled) -> ApplianceView:
    """The view of a poll: the appliance computed the summary and alerts; an unreachable one has its error."""
    if polled.state is None:
        return ApplianceView(polled, None, (polled.error or "unreachable",), None)
    load = polled.load
    if load is None:  # e.g. an appliance older than GET /load: say so rather than show "ok"
        return ApplianceView(polled, None, (polled.metrics_error or "no load",), None)
    return ApplianceView(polled, load.summary, load.alerts, load.scheduler)


@dataclass(frozen=True, slots=True)
class GatewayView:
    """The site gateway's exporter at `url`: each model's traffic over `polls` polls, or why it could not be read."""

    url: str
    models: tuple[ModelTraffic, ...]
    polls: int
    error: str | None = None
