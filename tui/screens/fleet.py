"""Every appliance of a site, one line each; Enter drills into one. Below, with `--gateway-metrics`, the site
gateway's traffic per model."""

from __future__ import annotations

from rich.text import Text
from textual import getters
from textual.app import ComposeResult
from textual.message import Message
from textual.reactive import var
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from appliance.control.documents import StateDocument
from tui.view import ApplianceView, GatewayView
from tui.widgets.boards import worst_board
from tui.widgets.format import STATE_STYLE, millis, number, percent
from tui.widgets.gateway import GatewayPanel
from tui.widgets.rows import Cells, show_rows

__all__ = ["FleetScreen"]

_COLUMNS = ("appliance", "state", "model", "mesh", "generation", "load", "p99 TTFT", "KV", "worst board", "alerts")


class FleetScreen(Screen[None]):
    views: var[tuple[ApplianceView, ...]] = var(())
    gateway: var[GatewayView | None] = var(None)
    """The site gateway's traffic per model, when the console was given its exporter (`--gateway-metrics`)."""
    table = getters.query_one("#fleet", DataTable)

    class Selected(Message):
        """The operator picked an appliance to look at."""

        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

    def compose(self) -> ComposeResult:
        yield Static("fleet: enter opens an appliance", id="fleet-title")
        yield DataTable(id="fleet", cursor_type="row", zebra_stripes=True)
        yield GatewayPanel()
        yield Footer()

    def on_mount(self) -> None:
        self.table.add_columns(*_COLUMNS)

    def watch_views(self, views: tuple[ApplianceView, ...]) -> None:
        show_rows(self.table, [(view.name, _row(view)) for view in views])

    def watch_gateway(self, gateway: GatewayView | None) -> None:
        self.query_one(GatewayPanel).view = gateway

    def highlighted(self) -> str | None:
        """The appliance under the cursor: drain and restart act on it from this screen."""
        if not self.table.row_count:
            return None
        return self.table.coordinate_to_cell_key(self.table.cursor_coordinate).row_key.value

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.post_message(self.Selected(event.row_key.value))


def _row(view: ApplianceView) -> Cells:
    state, summary = view.polled.state, view.summary
    if state is None:
        return (
            view.name,
            Text("unreachable", STATE_STYLE["unreachable"]),
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            Text(view.polled.error or "", "red"),
        )
    load = "no metrics"
    if summary is not None:
        limit = state.max_concurrency if state.max_concurrency is not None else "?"
        load = f"{number(summary.running)}/{limit} · {number(summary.generation_tps, '.0f')} tok/s"
    ttft = millis(summary.ttft.p99) if summary is not None and summary.ttft is not None else "–"
    kv = percent(summary.kv_usage) if summary is not None else "n/a"
    alerts = Text(" · ".join(view.alerts), "yellow") if view.alerts else Text("ok", "green")
    board = worst_board(state.boards.worst() if state.boards is not None else None)
    return (
        view.name,
        Text(state.state, STATE_STYLE.get(state.state, "")),
        state.checkpoint,
        state.mesh,
        _generation(state),
        load,
        ttft,
        kv,
        board,
        alerts,
    )


def _generation(state: StateDocument) -> str | Text:
    """The generation serving, or old -> new and the step while an upgrade runs: which of a site's appliances are on
    which generation, at a glance."""
    upgrade = state.upgrade
    if upgrade is not None and upgrade.outcome == "running":
        return Text(f"{upgrade.old.id[:6]}→{upgrade.new.id[:6]} {upgrade.step or ''}".rstrip(), "cyan")
    return state.generation.id if state.generation is not None else "–"
