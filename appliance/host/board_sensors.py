"""One reading of a board's health from what tt-kmd already publishes: sysfs, hwmon, a tt-smi snapshot.

Every value is a plain file read of a cached attribute (`/sys/class/tenstorrent/tenstorrent!N/tt_*` and the
hwmon directory under its PCI device), so reading while an engine owns the board disturbs nothing; tt-smi
opens the device and is only read from a snapshot taken before boot. An attribute that is missing, unreadable
or not a number is None in the reading, with one problem naming the file; it is never a fault.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.host.tt_smi import SmiSnapshot

__all__ = ["BoardReading", "read_board", "read_boards", "readings_from_smi"]


@dataclass(frozen=True, slots=True)
class BoardReading:
    """A board at one moment; None where the source does not say (or said nonsense, see `problems`)."""

    board: str
    """The device number (/dev/tenstorrent/N), or tt-telemetry's chip label."""
    present: bool
    """False when the board's sysfs directory (or the exporter's chip) has gone."""
    card_type: str | None = None
    firmware: str | None = None
    temperature_c: float | None = None
    trip_c: float | None = None
    """The board's own thermal trip point (hwmon temp1_crit, tt-smi's therm_trip_l1_limit)."""
    power_w: float | None = None
    current_a: float | None = None
    voltage_v: float | None = None
    aiclk_mhz: float | None = None
    heartbeat: float | None = None
    """The ARC firmware's heartbeat counter: it advances while the firmware runs."""
    therm_trips: int | None = None
    """Thermal trips since the driver loaded (tt_therm_trip_count)."""
    dram_trained: bool | None = None
    problems: tuple[str, ...] = ()
    """One line per attribute that could not be read, naming its file or field."""


# sysfs file -> (reading field, scale to the field's unit); hwmon files are relative to the hwmon directory.
_SYSFS: Mapping[str, tuple[str, float]] = {
    "tt_aiclk": ("aiclk_mhz", 1.0),
    "tt_heartbeat": ("heartbeat", 1.0),
    "tt_therm_trip_count": ("therm_trips", 1.0),
}
_HWMON: Mapping[str, tuple[str, float]] = {
    "temp1_input": ("temperature_c", 1e-3),
    "temp1_crit": ("trip_c", 1e-3),
    "power1_input": ("power_w", 1e-6),
    "curr1_input": ("current_a", 1e-3),
    "in0_input": ("voltage_v", 1e-3),
}


def read_boards(root: Path, indices: tuple[int, ...]) -> tuple[BoardReading, ...]:
    """A reading of each board in `indices` under `root` (/ on a host, a recorded tree in tests)."""
    sysfs = root / "sys" / "class" / "tenstorrent"
    return tuple(read_board(sysfs / f"tenstorrent!{i}", str(i)) for i in indices)


def read_board(node: Path, board: str) -> BoardReading:
    """One board's sysfs directory and its hwmon: the reading, with a problem per unreadable attribute."""
    if not node.is_dir():
        return BoardReading(board, present=False, problems=(f"{node} is gone",))
    problems: list[str] = []
    values: dict[str, Any] = {"card_type": _text(node / "tt_card_type"), "firmware": _text(node / "tt_fw_bundle_ver")}
    for name, (key, scale) in _SYSFS.items():
        values[key] = _number(node / name, scale, problems.append)
    hwmon = sorted((node / "device" / "hwmon").glob("hwmon*"))
    if not hwmon:
        problems.append(f"{node / 'device' / 'hwmon'}: no hwmon directory (temperature, power unknown)")
    for name, (key, scale) in _HWMON.items():
        if hwmon and (name != "temp1_crit" or (hwmon[0] / name).exists()):  # not every driver sets a trip point
            values[key] = _number(hwmon[0] / name, scale, problems.append)
    trips = values.pop("therm_trips")
    return BoardReading(
        board, True, therm_trips=None if trips is None else int(trips), problems=tuple(problems), **values
    )


def readings_from_smi(snapshot: SmiSnapshot) -> tuple[BoardReading, ...]:
    """The boards of a tt-smi snapshot, one reading per chip (an n300's `L` and `R` are chips 2N and 2N+1)."""
    return tuple(
        BoardReading(
            str(i),
            True,
            d.board_type or None,
            d.firmware,
            d.asic_temperature_c,
            d.trip_c,
            d.power_w,
            d.current_a,
            d.voltage_v,
            d.aiclk_mhz,
            d.heartbeat,
            None,
            d.dram_trained,
            d.problems,
        )
        for i, d in enumerate(snapshot.devices)
    )


def _text(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def _number(path: Path, scale: float, problem: Callable[[str], None]) -> float | None:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        problem(f"{path}: missing")
        return None
    except OSError as err:
        problem(f"{path}: unreadable ({err.strerror})")
        return None
    try:
        value = float(text)
    except ValueError:
        problem(f"{path}: {text[:40]!r} is not a number")
        return None
    if value != value or value in (float("inf"), float("-inf")) or value < 0:
        problem(f"{path}: {text[:40]!r} is not a reading")
        return None
    return value * scale
