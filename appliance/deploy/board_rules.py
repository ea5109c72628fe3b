"""The board alerts of a site: heartbeat stalled, temperature near the trip point, thermal trips rising, DRAM
untrained, firmware differing across the site; each with its runbook.

On the appliances' own series (`appliance_board_*`, read from sysfs and hwmon), or, where the site runs
tt-telemetry (its site file names each host's exporter), on the exporter's series (`tt_arc_heartbeat`,
`tt_asic_temperature_celsius`, `tt_dram_trained`, `tt_fw_bundle_firmware_info`) scraped as `<site>-tt-telemetry`
with each appliance's label, instead of a second copy of them. Thermal trips stay on the appliances' series: the
exporter's documented series have no trip count.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["BoardAlertOptions", "alert", "board_alerts"]


class BoardAlertOptions(Protocol):
    """What the board rules read of `render prometheus`'s options (`AlertOptions` is one)."""

    @property
    def board_for(self) -> str: ...
    @property
    def board_stall_window(self) -> str: ...
    @property
    def restart_window(self) -> str: ...
    @property
    def board_stall(self) -> float: ...
    @property
    def board_trip(self) -> float: ...
    @property
    def board_margin(self) -> float: ...


def alert(name: str, expr: str, hold: str, severity: str, summary: str, runbook: str) -> dict[str, Any]:
    """One alerting rule as Prometheus reads it, its runbook an annotation."""
    return {
        "alert": name,
        "expr": expr,
        "for": hold,
        "labels": {"severity": severity},
        "annotations": {"summary": summary, "runbook": runbook},
    }


def board_alerts(site: str, o: BoardAlertOptions, tt_telemetry: bool) -> list[dict[str, Any]]:
    """The board rules of `site`, with `render prometheus`'s intervals and thresholds."""
    hold, window, stall_s, trip_c, margin_c = o.board_for, o.restart_window, o.board_stall, o.board_trip, o.board_margin
    on, tt = f'job="{site}"', f'job="{site}-tt-telemetry"'
    where = "{{ $labels.appliance }} board {{ $labels.board }}"
    chip = "{{ $labels.appliance }} chip {{ $labels.chip }}"
    reset = (
        "The appliance has already stopped the engine on it (the fault ladder: `appliance status` shows the "
        "rule and next step). Reset the board with `tt-smi -r`; if it does not come back, the board needs hands "
        "(`tt-smi -s`, reflash its firmware with tt-flash, reseat or replace it)."
    )
    hot = (
        "The board throttles or trips next. Check the host's airflow, fans and inlet temperature, and the load "
        "(`appliance status` shows its temperature trend); a board hotter than its neighbours under the same "
        "load needs its cooling looked at. A warning: the engine keeps serving."
    )
    return [
        alert(
            "ApplianceBoardHeartbeatStalled",
            f"changes(tt_arc_heartbeat{{{tt}}}[{o.board_stall_window}]) == 0"
            if tt_telemetry
            else f"appliance_board_heartbeat_age_seconds{{{on}}} > {stall_s:g}",
            "0m",
            "critical",
            f"{chip if tt_telemetry else where}: ARC heartbeat stalled",
            "The board's ARC firmware stopped. " + reset,
        ),
        alert(
            "ApplianceBoardNearTrip",
            f"tt_asic_temperature_celsius{{{tt}}} >= {trip_c - margin_c:g}"
            if tt_telemetry
            else f"appliance_board_temperature_celsius{{{on}}} >= "
            f"appliance_board_trip_temperature_celsius{{{on}}} - {margin_c:g}",
            hold,
            "warning",
            f"{chip if tt_telemetry else where} at " + "{{ $value }} C, near its thermal trip point",
            hot,
        ),
        alert(
            "ApplianceBoardThermalTrips",
            f"increase(appliance_board_thermal_trips_total{{{on}}}[{window}]) > 0",
            "0m",
            "critical",
            f"{where} tripped thermally",
            "The board cut its clocks to cool down; the engine on "
            "it was stopped (the fault ladder). " + hot.split(". A warning")[0] + ". Then restart it.",
        ),
        alert(
            "ApplianceBoardDramUntrained",
            f"tt_dram_trained{{{tt}}} == 0" if tt_telemetry else f"appliance_board_dram_trained{{{on}}} == 0",
            "0m",
            "critical",
            f"{chip if tt_telemetry else where}: DRAM did not train",
            "The board's GDDR failed training: models "
            "fail to load or corrupt results. Reset with `tt-smi -r` and look at gddr_telemetry in `tt-smi -s`; "
            "DRAM that keeps failing training means the board goes back for repair.",
        ),
        alert(
            "ApplianceBoardFirmwareDiffers",
            f"count(count by (version) (tt_fw_bundle_firmware_info{{{tt}}})) > 1"
            if tt_telemetry
            else f"count(count by (firmware) (appliance_board_info{{{on}}})) > 1",
            hold,
            "warning",
            f"site {site}: boards run " + "{{ $value }} different firmware bundles",
            "The matrix pins firmware per "
            "row and a mesh across boards needs one bundle: find the odd boards (the Grafana board row, or "
            "`appliance check` per host) and tt-flash them to the site's bundle.",
        ),
    ]
