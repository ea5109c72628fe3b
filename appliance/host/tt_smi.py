"""`tt-smi -s` snapshots: the devices, telemetry and the processes holding a device, as tt-smi prints them.

tt-smi has no schema contract, so a section of another shape is read as empty, with a problem naming it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["SmiDevice", "SmiProcess", "SmiSnapshot", "parse_tt_smi", "run_tt_smi"]

_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


@dataclass(frozen=True, slots=True)
class SmiDevice:
    """One chip in a tt-smi snapshot; an n300 shows up as two chips, `n300 L` and `n300 R`."""

    bus_id: str | None
    board_type: str
    board_id: str | None
    firmware: str | None
    asic_temperature_c: float | None
    power_w: float | None
    aiclk_mhz: float | None
    current_a: float | None = None
    voltage_v: float | None = None
    heartbeat: float | None = None
    trip_c: float | None = None
    """limits.therm_trip_l1_limit: the chip's thermal trip point."""
    dram_trained: bool | None = None
    """board_info.dram_status."""
    problems: tuple[str, ...] = ()
    """One line per telemetry field the snapshot lacks or holds no number in, naming it."""

    @property
    def board_name(self) -> str:
        """The board type without the Wormhole L/R chip suffix, lowercased (n300, p150, ...)."""
        return self.board_type.split()[0].lower() if self.board_type.strip() else "unknown"


@dataclass(frozen=True, slots=True)
class SmiProcess:
    """A process tt-smi saw holding a device node."""

    pid: int
    user: str | None
    device: str | None
    cmdline: str


@dataclass(frozen=True, slots=True)
class SmiSnapshot:
    kmd_version: str | None
    """From host_info.Driver ("TT-KMD 2.5.0" -> "2.5.0")."""
    tt_smi_version: str | None
    devices: tuple[SmiDevice, ...]
    processes: tuple[SmiProcess, ...]


def parse_tt_smi(text: str) -> SmiSnapshot:
    """Parse a `tt-smi -s` JSON snapshot; raise ValueError when it is not one."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"not JSON: {err}") from None
    if not isinstance(data, dict) or not isinstance(data.get("device_info"), list):
        raise ValueError("no device_info list")
    ignored: list[str] = []  # tt-smi has no schema contract: a section of another shape is read as empty
    driver = str(_section(data.get("host_info"), "host_info", ignored).get("Driver") or "")
    listed = data.get("processes")
    processes: list[Any] = listed if isinstance(listed, list) else []
    return SmiSnapshot(
        kmd_version=driver.split()[-1] if driver.strip() else None,
        tt_smi_version=_opt(_section(data.get("host_sw_vers"), "host_sw_vers", ignored).get("tt_smi")),
        devices=tuple(_smi_device(d, i) for i, d in enumerate(data["device_info"])),
        processes=tuple(
            SmiProcess(int(p["pid"]), _opt(p.get("user")), _opt(p.get("device")), str(p.get("cmdline", "")))
            for p in processes
            if isinstance(p, dict) and str(p.get("pid", "")).isdigit()
        ),
    )


def _smi_device(raw: object, index: int) -> SmiDevice:
    where = f"device_info[{index}]"
    problems: list[str] = []
    entry = _section(raw, where, problems)
    board = _section(entry.get("board_info"), f"{where}.board_info", problems)
    telemetry = _section(entry.get("telemetry"), f"{where}.telemetry", problems)
    limits = entry.get("limits") or {}
    limits = limits if isinstance(limits, dict) else {}

    def reading(section: Mapping[str, Any], key: str, path: str) -> float | None:
        value = _number(section.get(key))
        if value is None and section:
            problems.append(f"{path}.{key}: " + (f"{section[key]!r} is not a number" if key in section else "missing"))
        return value

    dram = board.get("dram_status")
    return SmiDevice(
        bus_id=_opt(board.get("bus_id")),
        board_type=str(board.get("board_type") or ""),
        board_id=_opt(board.get("board_id")),
        firmware=_opt((entry.get("firmwares") or {}).get("fw_bundle_version")),
        asic_temperature_c=reading(telemetry, "asic_temperature", f"{where}.telemetry"),
        power_w=reading(telemetry, "power", f"{where}.telemetry"),
        aiclk_mhz=reading(telemetry, "aiclk", f"{where}.telemetry"),
        current_a=_number(telemetry.get("current")),
        voltage_v=_number(telemetry.get("voltage")),
        heartbeat=reading(telemetry, "heartbeat", f"{where}.telemetry"),
        trip_c=_number(limits.get("therm_trip_l1_limit")),
        dram_trained=dram if isinstance(dram, bool) else None,
        problems=tuple(problems),
    )


def _section(value: object, where: str, problems: list[str]) -> dict[str, Any]:
    """A snapshot's object at `where`, or {} and a problem naming it: tt-smi has no schema contract."""
    if isinstance(value, dict):
        return value
    problems.append(f"{where}: {'missing' if value is None else 'not an object'}")
    return {}


def run_tt_smi(command: str, timeout_s: float) -> tuple[SmiSnapshot | None, str | None]:
    exe = shutil.which(command)
    if exe is None:
        return None, f"{command} is not installed"
    try:
        done = subprocess.run(
            [exe, "-s", "--snapshot_no_tty"], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return None, f"{command} -s did not answer within {timeout_s:g}s"
    if done.returncode != 0:
        return None, f"{command} -s exited {done.returncode}: {' '.join(done.stderr.split())[-200:]}"
    try:
        return parse_tt_smi(done.stdout), None
    except ValueError as err:
        return None, f"{command} -s printed no snapshot ({err})"


def _number(value: object) -> float | None:
    match = _NUMBER.search(str(value)) if value is not None else None
    return float(match.group()) if match else None


def _opt(value: object) -> str | None:
    return str(value) if value not in (None, "", "N/A") else None
