"""The dashboard's boards panel: each board the engine owns with its state, readings and trends.

What the appliance's board monitor said in GET /state, laid out: nothing is judged here.
"""

from __future__ import annotations

from rich.text import Text

from appliance.control.board_documents import BoardHealthDocument
from tui.view import ApplianceView
from tui.widgets.panels import Panel
from tui.widgets.trend import draw_trend

__all__ = ["BOARD_STYLE", "BoardsPanel", "worst_board"]

BOARD_STYLE = {
    "ok": "green",
    "hot": "yellow",
    "stalled": "bold red",
    "tripped": "bold red",
    "gone": "bold red",
    "unknown": "dim",
}
_TREND = 24


class BoardsPanel(Panel):
    TITLE = "boards"

    def watch_view(self, view: ApplianceView | None) -> None:
        state = None if view is None else view.polled.state
        self.display = state is not None and state.boards is not None  # a CPU engine has no boards: no panel
        super().watch_view(view)

    def shows(self, view: ApplianceView) -> object:
        state = view.polled.state
        return None if state is None else state.boards

    def render_view(self, view: ApplianceView) -> Text:
        boards = view.polled.state.boards if view.polled.state is not None else None
        if boards is None:
            return Text("no boards watched (the CPU engine)", style="dim")
        text = Text(boards.heading() + "\n", "red" if boards.error else "dim")
        for board in boards.boards:
            text.append(f"{board.name:<9}")
            text.append(f"{board.state:<8}", BOARD_STYLE.get(board.state, ""))
            text.append(f" {board.readings()}\n")
            text.append(f"{'':<9}temp  {_trend(board.temperatures)}  power {_trend(board.powers)}\n", "cyan")
            if board.reason:
                text.append(f"{'':<9}{board.reason}\n", BOARD_STYLE.get(board.state, ""))
            if board.problems:
                text.append(f"{'':<9}unknown: {board.problems[0]}\n", "dim")
        return text


def _trend(values: tuple[float | None, ...]) -> str:
    known = [v for v in values if v is not None]
    return draw_trend(known, _TREND, 1) if known else "no samples".ljust(_TREND)


def worst_board(board: BoardHealthDocument | None) -> Text:
    """The fleet's cell for an appliance's worst board."""
    if board is None:
        return Text("–", "dim")
    temperature = f" {board.temperature_c:.0f} C" if board.temperature_c is not None else ""
    return Text(f"{board.name} {board.state}{temperature}", BOARD_STYLE.get(board.state, ""))
