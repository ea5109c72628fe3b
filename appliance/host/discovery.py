"""Read the host's Tenstorrent boards and resources without opening a device an engine may own.

Sources are the driver's device nodes (/dev/tenstorrent/<N>), its sysfs attributes
(/sys/class/tenstorrent/tenstorrent!<N>/tt_*), the kernel's hugepage and memory counters, and
optionally a `tt-smi -s` snapshot: all plain reads of cached values. `root` lets tests and
operators point this at a recorded tree.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from appliance.host.board_sensors import BoardReading, read_boards
from appliance.host.tt_smi import SmiSnapshot, run_tt_smi

__all__ = [
    "Board",
    "HostFacts",
    "HugePages",
    "device_lock_name",
    "discover_host",
    "free_disk",
]


@dataclass(frozen=True, slots=True)
class Board:
    """One enumerated device (an MMIO-anchored board; an n300's second chip is not listed)."""

    index: int
    card_type: str | None
    """Board type from tt_card_type (n150, n300, p150, ...); None where the driver is too old."""
    firmware: str | None
    serial: str | None


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
    meminfo = _meminfo(root / "proc" / "meminfo")
    snapshot, smi_error = run_tt_smi(tt_smi, timeout_s) if tt_smi else (None, None)
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


def free_disk(path: Path) -> tuple[Path, int]:
    """Free bytes on the filesystem that holds (or will hold) `path`, and the directory measured."""
    probe = path.expanduser().absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe, shutil.disk_usage(probe).free


def device_lock_name(boards: tuple[Board, ...]) -> str:
    """Name of the lock an appliance holds while it owns these device nodes."""
    return "tenstorrent-" + "-".join(str(b.index) for b in boards)


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


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None
