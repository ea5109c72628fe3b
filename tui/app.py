"""The operator console: one appliance in detail, or every appliance of a site.

`make_console` builds it for the CLI and for the tests alike. Polls run in the `status-poll`
worker group and fetch only what the shown mode displays (the fleet also reads the site gateway's
exporter, when given); the engine log of the selected appliance streams in the `log-follow` group
while the log screen is shown. Both report back with messages, and screens only display what the
app hands them.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from dataclasses import replace

from textual import work
from textual.app import App
from textual.binding import Binding
from textual.reactive import var
from textual.screen import Screen

from appliance.control.client import Action, ApiError, ControlClient, Target
from appliance.control.gateway_view import GatewayReading, gateway_traffic
from tui.messages import GatewayPolled, LogLinesArrived, StatusPolled
from tui.poll import Poller
from tui.screens.base import ApplianceScreen
from tui.screens.config import ConfigScreen
from tui.screens.confirm import ConfirmScreen, describe
from tui.screens.dashboard import DashboardScreen
from tui.screens.fleet import FleetScreen
from tui.screens.logs import LogsScreen
from tui.view import ApplianceView, GatewayView, build_view

__all__ = ["ConsoleApp", "make_console", "run_console"]

_LOG_KEEP = 5000
_RECONNECT_S = 2.0
_DETAIL_EVERY = 3  # host facts and checks change slowly; polling them each second cost CPU for nothing
_GATEWAY_POLLS = 5  # the rates' window: one poll's counts flicker (a burst lands in one interval or the next)


class ConsoleApp(App[None]):
    CSS_PATH = "console.tcss"
    TITLE = "appliance console"
    MODES = {"fleet": FleetScreen, "dashboard": DashboardScreen, "logs": LogsScreen, "config": ConfigScreen}
    BINDINGS = [
        Binding("f", "switch_mode('fleet')", "Fleet"),
        Binding("o", "switch_mode('dashboard')", "Overview"),
        Binding("l", "switch_mode('logs')", "Logs"),
        Binding("c", "switch_mode('config')", "Config"),
        Binding("d", "confirm('drain')", "Drain"),
        Binding("r", "confirm('restart')", "Restart"),
        Binding("ctrl+r", "refresh", "Poll now", show=False),
        Binding("q", "quit", "Quit"),
    ]
    selected: var[str] = var("")

    def __init__(
        self, client: ControlClient, *, read_only: bool, refresh_s: float, gateway_metrics: str | None = None
    ) -> None:
        super().__init__()
        self.client = client
        self.poller = Poller(client)
        self.read_only = read_only
        self.refresh_s = refresh_s
        self.gateway_metrics = gateway_metrics
        self.views: dict[str, ApplianceView] = {}
        self._gateway_readings: deque[GatewayReading] = deque(maxlen=_GATEWAY_POLLS + 1)
        self._log_lines: deque[str] = deque(maxlen=_LOG_KEEP)
        self._polls = 0

    def on_mount(self) -> None:
        names = list(self.client.targets)
        site = len(names) > 1 or self.gateway_metrics is not None  # the gateway is shown with the site
        self.switch_mode("fleet" if site else "dashboard")
        self.selected = names[0]
        self.action_refresh()
        if self.refresh_s > 0:
            self.set_interval(self.refresh_s, self.action_refresh)

    async def on_unmount(self) -> None:
        await self.client.aclose()

    def selected_view(self) -> ApplianceView | None:
        return self.views.get(self.selected)

    def log_lines(self) -> Sequence[str]:
        return tuple(self._log_lines)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "confirm" and self.read_only:
            return None  # shown greyed out: the operator sees the action exists but is off here
        return True

    def action_refresh(self) -> None:
        if not any(w.group == "status-poll" and w.is_running for w in self.workers):
            self.poll_all()

    @work(exclusive=True, group="status-poll")
    async def poll_all(self) -> None:
        names, detail = self._wanted()
        self._polls += 1
        appliances = asyncio.gather(*(self.poller.poll(name, detail=detail) for name in names))
        if self.gateway_metrics is not None and isinstance(self._base(), FleetScreen):
            polls, gateway = await asyncio.gather(appliances, self._read_gateway(self.gateway_metrics))
            self.post_message(gateway)
        else:
            polls = await appliances
        for polled in polls:
            self.post_message(StatusPolled(polled))

    async def _read_gateway(self, url: str) -> GatewayPolled:
        try:
            return GatewayPolled(await self.client.gateway(url))
        except ApiError as err:
            return GatewayPolled(None, err.reason)

    def _wanted(self) -> tuple[tuple[str, ...], bool]:
        """The appliances the shown mode displays, and whether it shows their host facts and checks.

        Only what is on screen is fetched: the fleet needs every appliance's state and load, the
        other modes the selected appliance's, and only the dashboard its host facts and checks.
        """
        base = self._base()
        if isinstance(base, FleetScreen):
            return tuple(self.client.targets), False
        detail = isinstance(base, DashboardScreen) and self._polls % _DETAIL_EVERY == 0
        return (self.selected,), detail

    def on_status_polled(self, message: StatusPolled) -> None:
        polled, name = message.polled, message.polled.name
        previous = self.views.get(name)
        if not polled.detailed and previous is not None:
            polled = replace(polled, host=previous.polled.host, checks=previous.polled.checks)
        if previous is not None and previous.polled == polled:
            return  # the same documents as last time: nothing on screen would change
        self.views[name] = build_view(polled)
        screen = self._shown()
        if isinstance(screen, FleetScreen):
            screen.views = tuple(self.views[n] for n in self.client.targets if n in self.views)
        elif isinstance(screen, ApplianceScreen) and name == self.selected:
            screen.view = self.views[name]

    def on_gateway_polled(self, message: GatewayPolled) -> None:
        readings = self._gateway_readings
        if message.reading is not None:
            readings.append(message.reading)
        traffic = () if message.error is not None else gateway_traffic(readings)  # unread: the reason, no old figures
        view = GatewayView(self.gateway_metrics or "", traffic, max(len(readings) - 1, 0), message.error)
        screen = self._shown()
        if isinstance(screen, FleetScreen):
            screen.gateway = view

    def _base(self) -> Screen[object] | None:
        return self.screen_stack[0] if self.screen_stack else None  # under a dialog, the mode's screen

    def _shown(self) -> Screen[object] | None:
        # Messages still in flight while the app exits find no screen; they have nothing to update.
        return self.screen_stack[-1] if self.screen_stack else None

    def watch_selected(self) -> None:
        self._polls = 0  # the next poll fetches the new selection's host facts and checks
        self._follow_logs(restart=True)

    def on_logs_screen_shown(self, _: LogsScreen.Shown) -> None:
        self._follow_logs(restart=False)

    def on_logs_screen_hidden(self, _: LogsScreen.Hidden) -> None:
        self._follow_logs(restart=False)

    def _follow_logs(self, *, restart: bool) -> None:
        """Stream the selected appliance's log while the log screen is its mode's screen, and only then."""
        shown = isinstance(self._base(), LogsScreen) and bool(self.selected)
        if shown and not restart and any(w.group == "log-follow" and w.is_running for w in self.workers):
            return  # e.g. a dialog came and went over the log: the stream went on beneath it
        self.workers.cancel_group(self, "log-follow")
        self._log_lines.clear()
        if shown:
            self.follow_logs(self.selected)

    @work(exclusive=True, group="log-follow")
    async def follow_logs(self, name: str) -> None:
        """Stream the selected appliance's engine log, reconnecting after a break."""
        tail = 500
        while True:
            try:
                async for lines in self.client.follow_logs(name, tail):
                    self.post_message(LogLinesArrived(name, lines))
                reason = "the appliance closed the stream"
            except ApiError as err:
                reason = str(err)
            self.post_message(LogLinesArrived(name, [f"[console] log stream lost: {reason}; reconnecting"]))
            tail = 0  # after a reconnect, only new lines: the ones already shown stay
            await asyncio.sleep(_RECONNECT_S)

    def on_log_lines_arrived(self, message: LogLinesArrived) -> None:
        if message.name != self.selected:
            return  # a late batch from the previous selection
        self._log_lines.extend(message.lines)
        screen = self._shown()
        if isinstance(screen, LogsScreen):
            screen.add_lines(message.lines)

    def on_fleet_screen_selected(self, message: FleetScreen.Selected) -> None:
        self.selected = message.name
        self.switch_mode("dashboard")
        self.action_refresh()

    def action_confirm(self, action: Action) -> None:
        screen = self._shown()
        name = screen.highlighted() if isinstance(screen, FleetScreen) else self.selected
        view = self.views.get(name or "")
        if view is None:
            self.notify("no appliance polled yet", severity="warning")
            return
        title, body = describe(action, view)

        def decided(yes: bool | None) -> None:
            if yes:
                self.act(view.name, action)

        self.push_screen(ConfirmScreen(title, body, action.capitalize()), decided)

    @work(group="action")
    async def act(self, name: str, action: Action) -> None:
        try:
            state = await self.client.act(name, action)
        except ApiError as err:
            self.notify(str(err), severity="error", title=f"{action} failed")
            return
        self.notify(f"{name}: {action} accepted (state {state})", title=action)
        self.action_refresh()


def make_console(
    client: ControlClient, *, read_only: bool = False, refresh_s: float = 1.0, gateway_metrics: str | None = None
) -> ConsoleApp:
    """The console for the appliances `client` watches; refresh_s=0 polls only on ctrl+r. With `gateway_metrics`
    (the site gateway's exporter URL) the site view shows each model's queue and admitted and shed rates too."""
    return ConsoleApp(client, read_only=read_only, refresh_s=refresh_s, gateway_metrics=gateway_metrics)


def run_console(
    targets: Sequence[Target], *, read_only: bool, refresh_s: float, gateway_metrics: str | None = None
) -> None:
    """Run the console in this terminal until the operator quits (the `appliance console` entry point)."""
    make_console(
        ControlClient(targets), read_only=read_only, refresh_s=refresh_s, gateway_metrics=gateway_metrics
    ).run()
