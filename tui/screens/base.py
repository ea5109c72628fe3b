"""The screens that show one appliance: the app hands each the selected appliance's view."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, cast

from textual.reactive import var
from textual.screen import Screen

from tui.view import ApplianceView

__all__ = ["ApplianceScreen", "ConsoleState"]


class ConsoleState(Protocol):
    """What screens may read from the app (the app module imports the screens, not the reverse)."""

    read_only: bool

    def selected_view(self) -> ApplianceView | None: ...

    def log_lines(self) -> Sequence[str]: ...


class ApplianceScreen(Screen[None]):
    view: var[ApplianceView | None] = var(None)

    @property
    def console(self) -> ConsoleState:
        return cast(ConsoleState, self.app)

    def on_screen_resume(self) -> None:
        # A mode screen misses updates while another mode is shown; catch up when it returns.
        self.view = self.console.selected_view()
