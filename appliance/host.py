"""Read the host's Tenstorrent boards without opening a device an engine may own.

Sources are the driver's device nodes (/dev/tenstorrent/<N>) and its sysfs attributes
(/sys/class/tenstorrent/tenstorrent!<N>/tt_*), which are plain reads of cached values.
`root` lets tests point this at a recorded tree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["Board", "HostFacts", "discover_host"]


@dataclass(frozen=True, slots=True)
class Board:
    """One enumerated device (an MMIO-anchored board; an n300's second chip is not listed)."""

    index: int
    card_type: str | None
    """Board type from tt_card_type (n150, n300, p150, ...); None where the driver is too old."""
    firmware: str | None
    serial: str | None


@dataclass(frozen=True, slots=True)
class HostFacts:
    boards: tuple[Board, ...]
    kmd_version: str | None

    @property
    def board_type(self) -> str | None:
        """The single board type on this host, or None when there are none or they are mixed."""
        types = {b.card_type for b in self.boards}
        return types.pop() if len(types) == 1 else None


def discover_host(root: Path = Path("/")) -> HostFacts:
    """Boards and driver version as the kernel reports them."""
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
    return HostFacts(boards=boards, kmd_version=_read(root / "sys" / "module" / "tenstorrent" / "version"))


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None
