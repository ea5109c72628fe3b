"""The health of the boards an engine owns, sampled while it serves: a bounded history, heartbeat ages, verdicts.

Each sample is a set of `BoardReading`s from one source: sysfs and hwmon (plain reads, no device open), or the
site's tt-telemetry exporter where it runs. A board whose ARC heartbeat stops advancing, whose thermal trip count
rises, or that disappears is a device fault, handed as one line to `on_fault` (the supervisor's fault ladder
classifies it, as it does the engine's own lines). A stall or a vanished board is said again every
`heartbeat_stall_s` while it lasts, so a boot after a reset meets it too; a trip is said once per trip. A hot
board is a warning only. A reading the source could not make is unknown, with one warning per file.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from appliance.config.schema import BoardsConfig
from appliance.host.board_sensors import BoardReading
from appliance.host.tt_telemetry import TelemetryUnavailable

__all__ = ["TREND", "BoardHealth", "BoardMonitor", "BoardState", "BoardsView", "Reader"]

log = logging.getLogger(__name__)
BoardState = Literal["ok", "hot", "stalled", "tripped", "gone", "unknown"]
Reader = Callable[[], Awaitable[tuple[BoardReading, ...]]]
TREND = 60
"""Samples of each trend a view carries (the history keeps `boards.history`)."""


@dataclass(frozen=True, slots=True)
class BoardHealth:
    """One board's verdict, its latest reading and its trends (oldest first)."""

    slot: str
    state: BoardState
    reason: str
    reading: BoardReading
    heartbeat_age_s: float | None
    """Seconds since the heartbeat last advanced; None before it has been read."""
    trips_since_start: int = 0
    """Thermal trips since the appliance began watching the board."""
    temperatures: tuple[float | None, ...] = ()
    powers: tuple[float | None, ...] = ()
    aiclks: tuple[float | None, ...] = ()


@dataclass(frozen=True, slots=True)
class BoardsView:
    """Every owned board at the last sample, and which source said so."""

    source: str
    """"sysfs", "tt-telemetry <url>", or "none" (no boards to watch)."""
    slot: str
    interval_s: float
    boards: tuple[BoardHealth, ...] = ()
    error: str | None = None
    """Why the last sample failed (the exporter unreachable); the boards keep their previous readings."""
    samples: int = 0


@dataclass(slots=True)
class _Track:
    """What the monitor remembers of one board between samples."""

    history: deque[tuple[float, BoardReading]]
    beat: float | None = None
    beat_at: float = 0.0
    trips_at_start: int | None = None
    said_at: float | None = None
    """When the board's ongoing fault (stall, gone) was last handed on."""
    hot: bool = False
    trips: tuple[int | None, int | None] = (None, None)
    """tt_therm_trip_count at the previous sample and at this one."""


class BoardMonitor:
    """Samples the owned boards every `boards.interval_s` from `read`, and judges each sample."""

    def __init__(
        self,
        config: BoardsConfig,
        read: Reader,
        source: str,
        *,
        slot: str = "engine",
        clock: Callable[[], float] = time.monotonic,
        on_fault: Callable[[str], object] | None = None,
    ) -> None:
        self.config, self.source, self.slot = config, source, slot
        self._read, self._clock, self._on_fault = read, clock, on_fault
        self._tracks: dict[str, _Track] = {}
        self._view = BoardsView(source, slot, config.interval_s)
        self._warned: set[str] = set()

    def view(self) -> BoardsView:
        return self._view

    async def run(self) -> None:
        """Sample until cancelled."""
        while True:
            await self.sample()
            await asyncio.sleep(self.config.interval_s)

    async def sample(self) -> BoardsView:
        """Read every board once, judge it, hand on its faults; the view afterwards."""
        try:
            readings = await self._read()
        except (TelemetryUnavailable, OSError) as err:  # reported in the view; the last readings stay
            if str(err) not in self._warned:
                self._warned.add(str(err))
                log.warning("boards (%s): %s", self.source, err)
            self._view = BoardsView(
                self.source, self.slot, self.config.interval_s, self._view.boards, str(err), self._view.samples
            )
            return self._view
        now = self._clock()
        seen = {r.board for r in readings}
        gone = [BoardReading(b, present=False) for b in self._tracks if b not in seen]  # vanished from the exporter
        boards = tuple(self._judge(r, now) for r in (*readings, *gone))
        self._view = BoardsView(self.source, self.slot, self.config.interval_s, boards, None, self._view.samples + 1)
        return self._view

    def _judge(self, reading: BoardReading, now: float) -> BoardHealth:
        track = self._tracks.get(reading.board)
        if track is None:
            track = self._tracks[reading.board] = _Track(deque(maxlen=self.config.history), beat_at=now)
        for problem in reading.problems:
            self._warn(problem)
        if reading.present:
            track.history.append((now, reading))
            self._beat(track, reading, now)
        state, reason = self._verdict(track, reading, now)
        self._hand_on(track, reading, state, reason, now)
        readings = [r for _, r in list(track.history)[-TREND:]]
        age = None if track.beat is None else now - track.beat_at
        trips = (
            0
            if track.trips_at_start is None or reading.therm_trips is None
            else max(reading.therm_trips - track.trips_at_start, 0)
        )
        last = reading if reading.present or not track.history else track.history[-1][1]
        return BoardHealth(
            self.slot,
            state,
            reason,
            last if reading.present else _absent(last),
            age,
            trips,
            tuple(r.temperature_c for r in readings),
            tuple(r.power_w for r in readings),
            tuple(r.aiclk_mhz for r in readings),
        )

    @staticmethod
    def _beat(track: _Track, reading: BoardReading, now: float) -> None:
        if reading.heartbeat is not None and reading.heartbeat != track.beat:  # backwards too: a reset restarts it
            track.beat, track.beat_at = reading.heartbeat, now
        if reading.therm_trips is not None:
            if track.trips_at_start is None:
                track.trips_at_start = reading.therm_trips
            track.trips = (track.trips[1], reading.therm_trips)

    def _verdict(self, track: _Track, reading: BoardReading, now: float) -> tuple[BoardState, str]:
        name = f"tenstorrent!{reading.board}" if reading.board.isdigit() else f"chip {reading.board}"
        cfg = self.config
        if not reading.present and not track.history:  # never seen: an older driver without the attributes
            return "unknown", f"{name}: not readable from {self.source}"
        if not reading.present:
            return "gone", f"{name}: the board is gone ({self._where()})"
        if track.beat is not None and now - track.beat_at >= cfg.heartbeat_stall_s:
            return "stalled", (
                f"{name}: ARC heartbeat stalled for {now - track.beat_at:.1f}s (tt_heartbeat stuck at {track.beat:.0f})"
            )
        before, after = track.trips
        if before is not None and after is not None and after > before:  # a driver reload restarts the count
            return "tripped", (
                f"{name}: thermal trip (tt_therm_trip_count {before} -> {after}) at {_celsius(reading.temperature_c)}"
            )
        trip = reading.trip_c or cfg.trip_c
        if reading.temperature_c is not None and reading.temperature_c >= trip - cfg.hot_margin_c:
            return (
                "hot",
                f"{name}: {_celsius(reading.temperature_c)}, within {cfg.hot_margin_c:g} C of its trip "
                f"point {trip:g} C",
            )
        if reading.temperature_c is None and reading.heartbeat is None and reading.aiclk_mhz is None:
            return "unknown", f"{name}: no attribute could be read"
        return "ok", ""

    def _hand_on(self, track: _Track, reading: BoardReading, state: BoardState, reason: str, now: float) -> None:
        """Faults to `on_fault` (a trip once, a stall or loss again every heartbeat_stall_s); a hot board logged."""
        if state in ("stalled", "gone"):
            due = track.said_at is None or now - track.said_at >= self.config.heartbeat_stall_s
            if due:
                track.said_at = now
                self._fault(reason)
        else:
            track.said_at = None
        if state == "tripped":
            self._fault(reason)
        if (state == "hot") != track.hot:
            track.hot = state == "hot"
            if track.hot:
                log.warning("boards: %s (a warning: the engine keeps serving)", reason)

    def _fault(self, reason: str) -> None:
        log.error("boards: %s", reason)
        if self._on_fault is not None:
            self._on_fault(f"[boards] {reason}")

    def _warn(self, problem: str) -> None:
        where = problem.split(": ", 1)[0]
        if where not in self._warned:
            self._warned.add(where)
            log.warning("boards: %s; shown as unknown", problem)

    def _where(self) -> str:
        if self.source == "sysfs":
            return "its sysfs directory vanished while serving"
        return "its chip left the exporter's page, or its PCIe link is down"


def _absent(last: BoardReading) -> BoardReading:
    return BoardReading(last.board, False, last.card_type, last.firmware)


def _celsius(value: float | None) -> str:
    return "unknown temperature" if value is None else f"{value:.1f} C"
