"""The engine log of the selected appliance: follow, filter, pause."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence

from textual import getters
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.reactive import var
from textual.widgets import Footer, Input, Log, Static

from tui.screens.base import ApplianceScreen
from tui.widgets.header import ApplianceHeader

__all__ = ["LogsScreen"]


class LogsScreen(ApplianceScreen):
    AUTO_FOCUS = "#log"  # not the filter: typed letters would land there instead of switching modes
    BINDINGS = [
        Binding("p", "toggle_pause", "Pause/follow"),
        Binding("slash", "focus_filter", "Filter"),
        Binding("escape", "leave_filter", "Back to log", show=False),
    ]
    paused: var[bool] = var(False)
    log_view = getters.query_one("#log", Log)
    filter_input = getters.query_one("#filter", Input)
    status = getters.query_one("#log-status", Static)

    def compose(self) -> ComposeResult:
        yield ApplianceHeader().data_bind(LogsScreen.view)
        yield Input(placeholder="filter: text or /regex/ (case-insensitive)", id="filter")
        yield Log(id="log", max_lines=5000)
        yield Static(id="log-status")
        yield Footer()

    class Shown(Message):
        """The log became the screen of its mode: the app follows the selected appliance's log."""

    class Hidden(Message):
        """Something else covers the log: the app stops following unless it is only a dialog."""

    def on_screen_resume(self) -> None:
        super().on_screen_resume()
        self._redraw()
        self.post_message(self.Shown())

    def on_screen_suspend(self) -> None:
        self.post_message(self.Hidden())

    def add_lines(self, lines: Sequence[str]) -> None:
        """New lines from the followed stream; held back while paused."""
        if not self.paused:
            self.log_view.write_lines(self._filtered(lines))
        self._show_status()

    def _filtered(self, lines: Sequence[str]) -> list[str]:
        text = self.filter_input.value
        if not text:
            return list(lines)
        pattern = re.compile(re.escape(text), re.IGNORECASE)
        if len(text) > 2 and text.startswith("/") and text.endswith("/"):
            with contextlib.suppress(re.error):  # an unfinished regex filters as plain text meanwhile
                pattern = re.compile(text[1:-1], re.IGNORECASE)
        return [line for line in lines if pattern.search(line)]

    def _redraw(self) -> None:
        self.log_view.clear()
        self.log_view.write_lines(self._filtered(self.console.log_lines()))
        self._show_status()

    def _show_status(self) -> None:
        mode = "PAUSED (p to follow)" if self.paused else "following"
        shown = self.filter_input.value or "none"
        self.status.update(f"{mode}   filter: {shown}   {self.log_view.line_count} lines shown")

    def on_input_changed(self, _: Input.Changed) -> None:
        self._redraw()

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        self.log_view.auto_scroll = not self.paused
        if not self.paused:
            self._redraw()  # catch up with what arrived while paused
        self._show_status()

    def action_focus_filter(self) -> None:
        self.filter_input.focus()

    def action_leave_filter(self) -> None:
        self.log_view.focus()
