"""The boards' own health before boot: the facts the board monitor watches while serving, read once.

From sysfs and hwmon at discovery (the tt-smi snapshot where hwmon says nothing, and for DRAM training): temperature
against the trip point, power, AI clock, heartbeat, thermal trips since the driver loaded, firmware. A board
near its trip point or with past trips is a warning; DRAM that did not train fails (the engine cannot load on
it); an attribute that cannot be read is unknown, naming its file.
"""

from __future__ import annotations

from typing import Any

from appliance.host.board_sensors import BoardReading, readings_from_smi
from appliance.preflight.results import CheckResult, HostCheckInput, check

__all__ = ["board_health_check"]

_TITLE = "Board health"


def board_health_check(given: HostCheckInput) -> CheckResult:
    """host.boards: each board's temperature, power, clock, heartbeat and trips, judged as the monitor would."""
    if given.validated.engine == "cpu":
        return check("host.boards", _TITLE, "pass", "the CPU engine uses no board", blocking=True)
    readings, cfg, smi = given.host.readings, given.plan.boards, given.host.tt_smi
    label, source = "tenstorrent!", "sysfs and hwmon"
    if smi is not None and all(r.temperature_c is None for r in readings):  # no hwmon: the snapshot has telemetry
        readings, label, source = readings_from_smi(smi), "tt-smi chip ", "tt-smi snapshot"
    if not readings:
        return check("host.boards", _TITLE, "unknown", "no board to read", "See host.mesh", blocking=True)
    untrained = _untrained(given)
    hot = [
        r
        for r in readings
        if r.temperature_c is not None and r.temperature_c >= _trip(r, cfg.trip_c) - cfg.hot_margin_c
    ]
    tripped = [r for r in readings if r.therm_trips]
    problems = [p for r in readings for p in r.problems]
    evidence: dict[str, Any] = {"source": source} | {f"{label}{r.board}": _facts(r, cfg.trip_c) for r in readings}
    if untrained:
        return check(
            "host.boards",
            _TITLE,
            "fail",
            f"DRAM did not train on chip(s) {', '.join(untrained)} (tt-smi board_info.dram_status)",
            "Reset with `tt-smi -r`; DRAM that keeps failing training needs the board repaired",
            blocking=True,
            **evidence,
        )
    if hot or tripped:
        said = [f"{label}{r.board} at {r.temperature_c:.1f} C (trip {_trip(r, cfg.trip_c):g} C)" for r in hot]
        said += [f"{label}{r.board} tripped {r.therm_trips} time(s) since the driver loaded" for r in tripped]
        return check(
            "host.boards",
            _TITLE,
            "warn",
            "; ".join(said),
            "Check the host's airflow and fans before serving",
            blocking=True,
            **evidence,
        )
    if problems:
        return check(
            "host.boards",
            _TITLE,
            "unknown",
            f"{len(problems)} attribute(s) unreadable: {problems[0]}",
            "Check tt-kmd's version (older drivers lack some attributes)",
            blocking=True,
            unreadable=problems,
            **evidence,
        )
    hottest = max(readings, key=lambda r: r.temperature_c or 0.0)
    return check(
        "host.boards",
        _TITLE,
        "pass",
        f"{len(readings)} board(s), hottest {label}{hottest.board} at {hottest.temperature_c:.1f} C",
        blocking=True,
        **evidence,
    )


def _untrained(given: HostCheckInput) -> list[str]:
    smi = given.host.tt_smi
    return [str(i) for i, d in enumerate(smi.devices) if d.dram_trained is False] if smi else []


def _trip(reading: BoardReading, default: float) -> float:
    return reading.trip_c or default


def _facts(r: BoardReading, trip_c: float) -> str:
    def value(v: float | None, unit: str, digits: int = 1) -> str:
        return "unknown" if v is None else f"{v:.{digits}f} {unit}"

    return (
        f"{r.card_type or 'unknown'}, fw {r.firmware or 'unknown'}, {value(r.temperature_c, 'C')} (trip "
        f"{_trip(r, trip_c):g} C), {value(r.power_w, 'W')}, aiclk {value(r.aiclk_mhz, 'MHz', 0)}, heartbeat "
        f"{value(r.heartbeat, '', 0).strip()}, thermal trips {'unknown' if r.therm_trips is None else r.therm_trips}"
    )
