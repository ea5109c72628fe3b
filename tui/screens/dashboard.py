"""The single-appliance dashboard: header, load, latency, scheduler, boards, devices, checks."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Grid, VerticalScroll
from textual.widgets import Footer

from tui.screens.base import ApplianceScreen
from tui.widgets.boards import BoardsPanel
from tui.widgets.header import ApplianceHeader
from tui.widgets.load import LoadPanel
from tui.widgets.panels import ChecksPanel, DevicesPanel, LatencyPanel, SchedulerPanel

__all__ = ["DashboardScreen"]


class DashboardScreen(ApplianceScreen):
    def compose(self) -> ComposeResult:
        yield ApplianceHeader().data_bind(DashboardScreen.view)
        with VerticalScroll(), Grid(id="panels"):
            yield LoadPanel().data_bind(DashboardScreen.view)
            yield LatencyPanel().data_bind(DashboardScreen.view)
            yield SchedulerPanel(id="scheduler").data_bind(DashboardScreen.view)
            yield BoardsPanel(id="boards").data_bind(DashboardScreen.view)
            yield DevicesPanel().data_bind(DashboardScreen.view)
            yield ChecksPanel().data_bind(DashboardScreen.view)
        yield Footer()
