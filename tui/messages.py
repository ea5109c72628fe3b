"""Messages workers send up to the console app."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from appliance.control.gateway_view import GatewayReading
from tui.poll import Polled

__all__ = ["GatewayPolled", "LogLinesArrived", "StatusPolled"]


@dataclass
class StatusPolled(Message):
    """A poll of one appliance finished (reachable or not)."""

    polled: Polled

    def can_replace(self, message: Message) -> bool:
        # Only the newest poll of an appliance matters when the app falls behind.
        return isinstance(message, StatusPolled) and message.polled.name == self.polled.name


@dataclass
class GatewayPolled(Message):
    """A read of the site gateway's exporter finished: its reading, or why there is none."""

    reading: GatewayReading | None
    error: str | None = None


@dataclass
class LogLinesArrived(Message):
    """Engine log lines from the followed appliance."""

    name: str
    lines: list[str]
