"""Confirmation before drain or restart, saying what will happen to this appliance."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from appliance.control.client import Action
from tui.view import ApplianceView
from tui.widgets.format import number

__all__ = ["ConfirmScreen", "describe"]


class ConfirmScreen(ModalScreen[bool]):
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical { width: 76; height: auto; border: thick $warning; background: $surface; padding: 1 2; }
    ConfirmScreen Horizontal { height: auto; align-horizontal: right; margin-top: 1; }
    ConfirmScreen Button { margin-left: 2; }
    """
    BINDINGS = [Binding("escape", "dismiss(False)", "Cancel"), Binding("y", "dismiss(True)", "Yes")]

    def __init__(self, title: str, body: str, confirm: str) -> None:
        super().__init__()
        self._title = title
        self._body = body
        self._confirm = confirm

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(self._title, style="bold"), id="title")
            yield Static(self._body, markup=False, id="body")
            with Horizontal():
                yield Button("Cancel", id="no")
                yield Button(self._confirm, id="yes", variant="error")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()  # the safe choice is the default

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


def describe(action: Action, view: ApplianceView) -> tuple[str, str]:
    """Title and body of the confirmation: the consequences, with this appliance's own numbers."""
    state = view.polled.state
    if state is None:
        return f"{action.capitalize()} {view.name}", "The appliance is unreachable; the request will likely fail."
    grace = state.config.get("supervisor.shutdown_timeout_s")
    kill = state.config.get("supervisor.stop_grace_s")
    summary = view.summary
    load = (
        f"Now {number(summary.running)} requests running and {number(summary.waiting)} waiting."
        if summary is not None
        else "Its current load is unknown (no engine metrics)."
    )
    drain = (
        f"The engine (pid {state.pid}, {state.state}) gets SIGTERM: it refuses new requests and lets in-flight "
        f"ones finish for up to {grace if grace is not None else '?'} s; whatever remains of its process group "
        f"is killed {kill if kill is not None else '?'} s later. {load}"
    )
    if action == "drain":
        body = f"{drain}\nThe control API stays up and the engine stays stopped until you restart it."
    else:
        body = (
            f"{drain}\nThen the same plan (config {state.config_hash}, {state.checkpoint} on {state.mesh}) boots "
            "again; the appliance serves nothing until it is ready (minutes on Tenstorrent hardware)."
        )
    return f"{action.capitalize()} {view.name}?", body
