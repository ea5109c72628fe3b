"""Tell systemd what the appliance is doing, through sd_notify on $NOTIFY_SOCKET.

READY=1 when the engine is ready, STATUS=<state> on every lifecycle change, STOPPING=1 when a
stop begins. Outside systemd (no NOTIFY_SOCKET) there is no notifier at all.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from sdnotify import SystemdNotifier  # type: ignore[import-untyped]

from appliance.runtime.lifecycle import EngineEvent, EngineState

__all__ = ["LifecycleNotifier", "lifecycle_notifier"]

log = logging.getLogger(__name__)


class LifecycleNotifier:
    """A supervisor listener that forwards lifecycle changes to systemd."""

    def __init__(self, notifier: SystemdNotifier) -> None:
        self._notifier = notifier

    def on_event(self, event: EngineEvent) -> None:
        status = f"STATUS={event.state.value}: {event.reason[:200]}"
        self._send(f"READY=1\n{status}" if event.state is EngineState.READY else status)

    def stopping(self) -> None:
        self._send("STOPPING=1\nSTATUS=stopping")

    def _send(self, message: str) -> None:
        try:
            self._notifier.notify(message)
        except OSError as err:
            # systemd going away must not take the engine down with it.
            log.warning("sd_notify failed: %s", err)


def lifecycle_notifier(environ: Mapping[str, str]) -> LifecycleNotifier | None:
    """A notifier bound to $NOTIFY_SOCKET, or None when not run by systemd as Type=notify."""
    if not environ.get("NOTIFY_SOCKET"):
        return None
    try:
        # debug=True: report a bad socket instead of sdnotify's silent drop.
        return LifecycleNotifier(SystemdNotifier(debug=True))
    except OSError as err:
        log.warning("NOTIFY_SOCKET=%s is unusable: %s", environ["NOTIFY_SOCKET"], err)
        return None
