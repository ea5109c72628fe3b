"""Read the host's Tenstorrent boards and resources without opening a device an engine may own.

Sources are the driver's device nodes (/dev/tenstorrent/<N>), its sysfs attributes
(/sys/class/tenstorrent/tenstorrent!<N>/tt_*), the kernel's hugepage and memory counters, and
optionally a `tt-smi -s` snapshot: all plain reads of cached values. `root` lets tests and
operators point this at a recorded tree.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # board_sensors reads snapshots of this module's types; it is imported where boards are read
    from appliance.host.board_sensors import BoardReading

__all__ = [
    "Board",
    "HostFacts",
    "HugePages",
    "SmiDevice",
    "SmiProcess",
    "SmiSnapshot",
    "device_lock_name",
    "discover_host",
    "free_disk",
    "parse_tt_smi",
]

_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


@dataclass(frozen=True, slots=True)
class Board:
    """One enumerated device (an MMIO-anchored board; an n300's second chip is not listed)."""

    index: int
    card_type: str | None
    """Board type from tt_card_type (n150, n300, p150, ...); None where the driver is too old."""
    firmware: str | None
    serial: str | None


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


@dataclass(frozen=True, slots=True)
class HugePages:
    """The kernel's 1 GiB hugepage pool (tt-kmd maps one page per device for host-device DMA)."""

    total: int
    free: int
    mount: str | None
    """A hugetlbfs mount with 1G pages (tt-metal uses /dev/hugepages-1G), None when none is mounted."""


@dataclass(frozen=True, slots=True)
class HostFacts:
    boards: tuple[Board, ...]
    kmd_version: str | None
    hugepages_1g: HugePages | None = None
    """None when the kernel has no 1 GiB pool."""
    mem_total_bytes: int | None = None
    mem_available_bytes: int | None = None
    tt_smi: SmiSnapshot | None = None
    tt_smi_error: str | None = None
    """Why there is no snapshot although tt-smi was asked for (not installed, timed out, bad output)."""
    readings: tuple[BoardReading, ...] = ()
    """Each board's health from sysfs and hwmon at discovery (plain reads: no device is opened)."""

    @property
    def board_type(self) -> str | None:
        """The single board type on this host, or None when there are none or they are mixed."""
        types = {b.card_type for b in self.boards}
        return types.pop() if len(types) == 1 else None


def discover_host(root: Path = Path("/"), *, tt_smi: str | None = None, timeout_s: float = 10.0) -> HostFacts:
    """Boards, driver, hugepages and memory as the kernel reports them; `tt_smi` also runs `tt-smi -s`.

    tt-smi is opt-in: it is a subprocess, and the cheap sysfs facts are enough for mesh=auto.
    """
    dev = root / "dev" / "tenstorrent"
    indices = sorted(int(p.name) for p in dev.iterdir() if p.name.isdigit()) if dev.is_dir() else []
    sysfs = root / "sys" / "class" / "tenstorrent"
    boards = tuple(
        Board(
            index=i,
            card_type=_read(sysfs / f"tenstorrent!{i}" / "tt_card_type"),
            firmware=_read(sysfs / f"tenstorrent!{i}" / "tt_fw_bundle_ver"),
            serial=_read(sysfs / f"tenstorrent!{i}" / "tt_serial"),
        )
        for i in indices
    )
    from appliance.host.board_sensors import read_boards

    meminfo = _meminfo(root / "proc" / "meminfo")
    snapshot, smi_error = _run_tt_smi(tt_smi, timeout_s) if tt_smi else (None, None)
    return HostFacts(
        boards=boards,
        kmd_version=_read(root / "sys" / "module" / "tenstorrent" / "version"),
        hugepages_1g=_hugepages(root),
        mem_total_bytes=meminfo.get("MemTotal"),
        mem_available_bytes=meminfo.get("MemAvailable"),
        tt_smi=snapshot,
        tt_smi_error=smi_error,
        readings=read_boards(root, tuple(indices)),
    )


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


def free_disk(path: Path) -> tuple[Path, int]:
    """Free bytes on the filesystem that holds (or will hold) `path`, and the directory measured."""
    probe = path.expanduser().absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe, shutil.disk_usage(probe).free


def device_lock_name(boards: tuple[Board, ...]) -> str:
    """Name of the lock an appliance holds while it owns these device nodes."""
    return "tenstorrent-" + "-".join(str(b.index) for b in boards)


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


def _run_tt_smi(command: str, timeout_s: float) -> tuple[SmiSnapshot | None, str | None]:
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


def _hugepages(root: Path) -> HugePages | None:
    pool = root / "sys" / "kernel" / "mm" / "hugepages" / "hugepages-1048576kB"
    total, free = _read(pool / "nr_hugepages"), _read(pool / "free_hugepages")
    if total is None or free is None:
        return None
    mounts = _read(root / "proc" / "mounts") or ""
    mount = next(
        (
            line.split()[1]
            for line in mounts.splitlines()
            if " hugetlbfs " in line and ("pagesize=1024M" in line or "pagesize=1G" in line)
        ),
        None,
    )
    return HugePages(total=int(total), free=int(free), mount=mount)


def _meminfo(path: Path) -> dict[str, int]:
    values: dict[str, int] = {}
    for line in (_read(path) or "").splitlines():
        name, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            values[name] = int(fields[0]) * (1024 if fields[1:] == ["kB"] else 1)
    return values


def _number(value: object) -> float | None:
    match = _NUMBER.search(str(value)) if value is not None else None
    return float(match.group()) if match else None


def _opt(value: object) -> str | None:
    return str(value) if value not in (None, "", "N/A") else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None
