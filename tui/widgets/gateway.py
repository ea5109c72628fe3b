"""The site view's gateway panel: each model's queue now, and its admitted and shed rates over the last polls.

The console reads the gateway's exporter through the control client (appliance.control.gateway_view computes the
rates); this only lays them out. An exporter that cannot be read is one line saying why, never a crash.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import var
from textual.widgets import DataTable, Static

from appliance.control.gateway_view import ModelTraffic
from tui.view import GatewayView
from tui.widgets.format import IDLE
from tui.widgets.rows import Cells, show_rows

__all__ = ["GatewayPanel"]

_COLUMNS = ("model", "queued", "admitted", "shed")


class GatewayPanel(Vertical):
    DEFAULT_CSS = """
    GatewayPanel { height: auto; display: none; }
    GatewayPanel > Static { padding: 0 1; background: $panel; }
    """
    view: var[GatewayView | None] = var(None)

    def compose(self) -> ComposeResult:
        yield Static(id="gateway-title")
        yield DataTable(id="gateway", cursor_type="none", zebra_stripes=True)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns(*_COLUMNS)
        table.can_focus = False  # the fleet's table keeps the cursor: Enter opens an appliance

    def watch_view(self, view: GatewayView | None) -> None:
        self.display = view is not None  # no --gateway-metrics: the site view as it always was
        if view is None:
            return
        title = f"gateway {view.url}: queued now; admitted and shed per second over the last {view.polls} polls"
        line = Text(title) if view.error is None else Text(f"gateway {view.url}: {view.error}", "red")
        line.no_wrap, line.overflow = True, "ellipsis"
        self.query_one("#gateway-title", Static).update(line)
        show_rows(self.query_one(DataTable), [(m.model, _row(m)) for m in view.models])


def _row(traffic: ModelTraffic) -> Cells:
    return (
        traffic.model,
        Text(str(traffic.queued), "yellow" if traffic.queued else ""),
        _rate(traffic.admitted_per_s, ""),
        _rate(traffic.shed_per_s, "red"),
    )


def _rate(per_s: float | None, busy: str) -> Text:
    """Per second; `–` while no interval counted (the first poll, or a counter reset)."""
    return Text(IDLE) if per_s is None else Text(f"{per_s:.1f}/s", busy if per_s > 0 else "")
