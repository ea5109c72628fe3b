"""What the console asks its appliances for and what it redraws: only what the shown screen needs.

Requests are counted at the recorded appliance's real control API (`create_app` over real HTTP,
testkit/recorded_appliance.py). The redraw tests hand the app a poll again, as a copy of what the
real API answered, the second time with only the uptime moved on.
"""

from __future__ import annotations

from dataclasses import replace

from textual.pilot import Pilot

from testkit.console_pilot import drawn, poll, recorded_console, until
from testkit.recorded_appliance import recorded_appliance
from tui.app import ConsoleApp
from tui.messages import StatusPolled
from tui.poll import Polled
from tui.widgets.header import ApplianceHeader
from tui.widgets.load import LoadPanel
from tui.widgets.panels import ChecksPanel, DevicesPanel, LatencyPanel, SchedulerPanel
from tui.widgets.trend import draw_trend

SIZE = (140, 48)
LIVE, DETAIL = "/live", "/live?detail=1"
"""One request a poll: state and load, and every third poll on the dashboard host facts and checks too."""


async def test_the_dashboard_never_opens_the_log_and_the_log_screen_fetches_no_host_facts() -> None:
    with recorded_appliance() as rec:
        app = recorded_console(rec)
        async with app.run_test(size=SIZE) as pilot:
            await poll(pilot, 3)
            assert sum(rec.requests.values()) == rec.requests[LIVE] + rec.requests[DETAIL] == 4  # at start, then 3
            assert rec.requests[DETAIL] >= 1
            await pilot.press("l")
            await until(lambda: len(app.log_lines()) >= 500)
            rec.requests.clear()
            await poll(pilot, 3)
            assert rec.requests == {LIVE: 3}  # the one log stream goes on, started before
            await pilot.press("o")
            await until(lambda: not following(app))
            assert app.log_lines() == ()


def following(app: ConsoleApp) -> bool:
    return any(w.group == "log-follow" and w.is_running for w in app.workers)


async def test_the_fleet_polls_every_appliance_and_a_dashboard_only_its_own() -> None:
    with recorded_appliance() as one, recorded_appliance() as two:
        app = recorded_console(one, two)
        async with app.run_test(size=SIZE) as pilot:
            await poll(pilot, 2)
            for rec in (one, two):
                assert rec.requests == {LIVE: 3}
            await pilot.press("down", "enter")
            await poll(pilot)  # lets the poll that Enter started finish
            assert app.current_mode == "dashboard"
            one.requests.clear()
            two.requests.clear()
            await poll(pilot, 3)
            assert sum(one.requests.values()) == 0
            assert two.requests[LIVE] + two.requests[DETAIL] == sum(two.requests.values()) == 3
            assert two.requests[DETAIL] >= 1


async def test_a_poll_with_the_same_documents_redraws_nothing_and_a_new_uptime_only_the_header() -> None:
    with recorded_appliance() as rec:
        app = recorded_console(rec)
        async with app.run_test(size=SIZE) as pilot:
            await poll(pilot, 2)
            view = app.selected_view()
            assert view is not None and view.polled.state is not None
            before = shown_content(app)
            await deliver(app, pilot, replace(view.polled))
            assert redrawn(before, shown_content(app)) == set() and app.selected_view() is view
            state = replace(view.polled.state, uptime_s=view.polled.state.uptime_s + 1)
            await deliver(app, pilot, replace(view.polled, state=state))
            assert redrawn(before, shown_content(app)) == {ApplianceHeader}


async def deliver(app: ConsoleApp, pilot: Pilot[None], polled: Polled) -> None:
    app.post_message(StatusPolled(polled))
    await pilot.pause()


def redrawn(before: dict[type, tuple[object, ...]], after: dict[type, tuple[object, ...]]) -> set[type]:
    """The panels that drew anything new: a redraw replaces a content object, an equal one or not."""
    return {kind for kind in before if any(b is not a for b, a in zip(before[kind], after[kind], strict=True))}


def shown_content(app: ConsoleApp) -> dict[type, tuple[object, ...]]:
    """The text object each panel last drew (a redraw replaces it)."""
    kinds = (ApplianceHeader, LoadPanel, LatencyPanel, SchedulerPanel, DevicesPanel, ChecksPanel)
    return {kind: drawn(app.screen.query_one(kind)) for kind in kinds}


def test_a_trend_puts_the_newest_samples_at_the_right_scaled_from_their_minimum_to_their_maximum() -> None:
    assert draw_trend([0.0, 15.0, 7.0, 8.0], 6, 2).splitlines() == ["   █ ▁", "  ▁███"]
    assert draw_trend([3.0, 3.0], 4, 1) == "  ▁▁"  # flat: on the bottom line
    assert draw_trend([float(n) for n in range(20)], 3, 1) == "▁▅█"  # only the last `width` samples
