"""The boards in GET /state and GET /metrics: the monitor's view as a document and as Prometheus series.

Series are in base units (`_celsius`, `_watts`, `_amperes`, `_volts`, `_hertz`, `_seconds`) and labelled by
board and slot. Where the boards are read from tt-telemetry, its exporter already publishes the readings under
its own names (Prometheus scrapes it: `appliance render prometheus`), so the appliance adds only its verdicts
(state, heartbeat age, thermal trips, source) instead of a second copy of every reading.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric

from appliance.control.board_documents import BOARD_STATES, BoardHealthDocument, BoardsDocument
from appliance.observe.board_health import BoardHealth, BoardsView

__all__ = ["BoardCollector", "boards_document"]

_LABELS = ["board", "slot"]
# series, help, the reading's field, scale to the base unit
_READINGS = (
    ("appliance_board_temperature_celsius", "ASIC temperature (hwmon temp1_input)", "temperature_c", 1.0),
    (
        "appliance_board_trip_temperature_celsius",
        "Thermal trip point (hwmon temp1_crit, else boards.trip_c)",
        "trip_c",
        1.0,
    ),
    ("appliance_board_power_watts", "Board power (hwmon power1_input)", "power_w", 1.0),
    ("appliance_board_current_amperes", "Board current (hwmon curr1_input)", "current_a", 1.0),
    ("appliance_board_voltage_volts", "Core voltage (hwmon in0_input)", "voltage_v", 1.0),
    ("appliance_board_aiclk_hertz", "AI clock (tt_aiclk)", "aiclk_mhz", 1e6),
)


def boards_document(view: BoardsView) -> BoardsDocument:
    """The view as GET /state carries it."""
    return BoardsDocument(
        view.source, view.slot, view.interval_s, tuple(_board(b) for b in view.boards), view.error, view.samples
    )


def _board(health: BoardHealth) -> BoardHealthDocument:
    r = health.reading
    return BoardHealthDocument(
        r.board,
        health.slot,
        health.state,
        health.reason,
        r.present,
        r.card_type,
        r.firmware,
        r.temperature_c,
        r.trip_c,
        r.power_w,
        r.current_a,
        r.voltage_v,
        r.aiclk_mhz,
        health.heartbeat_age_s,
        r.therm_trips,
        health.trips_since_start,
        r.dram_trained,
        r.problems,
        health.temperatures,
        health.powers,
        health.aiclks,
    )


class BoardCollector:
    """A prometheus_client Collector of the monitor's latest view (read at each scrape, never sampled by it)."""

    def __init__(self, view: Callable[[], BoardsView], trip_c: float) -> None:
        self._view, self._trip_c = view, trip_c

    def collect(self) -> Iterator[Metric]:
        view = self._view()
        source = InfoMetricFamily("appliance_board_source", "Where the appliance reads its boards", labels=["slot"])
        source.add_metric([view.slot], {"source": view.source.split()[0]})
        yield source
        docs = [_board(b) for b in view.boards]
        yield self._state(docs)
        yield _family(
            "appliance_board_heartbeat_age_seconds",
            "Time since the board's ARC heartbeat last advanced",
            ((d, d.heartbeat_age_s) for d in docs),
        )
        trips = CounterMetricFamily(
            "appliance_board_thermal_trips",
            "Thermal trips since the driver loaded (tt_therm_trip_count)",
            labels=_LABELS,
        )
        for d in docs:
            if d.therm_trips is not None:
                trips.add_metric([d.board, d.slot], d.therm_trips)
        yield trips
        if view.source == "sysfs":
            yield from self._readings(docs)

    @staticmethod
    def _state(docs: list[BoardHealthDocument]) -> Metric:
        state = GaugeMetricFamily(
            "appliance_board_state",
            "1 for the board's state (ok, hot, stalled, tripped, gone, unknown)",
            labels=[*_LABELS, "state"],
        )
        for d in docs:
            for name in BOARD_STATES:
                state.add_metric([d.board, d.slot, name], float(d.state == name))
        return state

    def _readings(self, docs: list[BoardHealthDocument]) -> Iterator[Metric]:
        for name, text, key, scale in _READINGS:
            values = ((d, getattr(d, key)) for d in docs)
            if key == "trip_c":
                values = ((d, d.trip_c or self._trip_c) for d in docs)
            yield _family(name, text, ((d, None if v is None else v * scale) for d, v in values))
        yield _family("appliance_board_up", "1 while the board is present", ((d, float(d.present)) for d in docs))
        yield _family(
            "appliance_board_dram_trained",
            "1 when the board's DRAM trained",
            ((d, None if d.dram_trained is None else float(d.dram_trained)) for d in docs),
        )
        info = InfoMetricFamily("appliance_board", "The board's type and firmware bundle", labels=_LABELS)
        for d in docs:
            info.add_metric(
                [d.board, d.slot], {"card_type": d.card_type or "unknown", "firmware": d.firmware or "unknown"}
            )
        yield info


def _family(name: str, text: str, values: Iterator[tuple[BoardHealthDocument, float | None]]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, text, labels=_LABELS)
    for d, value in values:
        if value is not None:  # unknown is absent, never a made-up 0
            family.add_metric([d.board, d.slot], value)
    return family
