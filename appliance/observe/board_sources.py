"""Where a board monitor reads: tt-telemetry when the site's file names it, else this host's sysfs and hwmon."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from pathlib import Path

import httpx

from appliance.config.schema import BoardsConfig
from appliance.host.board_sensors import BoardReading, read_boards
from appliance.host.tt_telemetry import fetch_tt_telemetry, parse_tt_telemetry
from appliance.observe.board_health import BoardMonitor, Reader

__all__ = ["board_monitor", "sysfs_reader", "telemetry_reader"]


def sysfs_reader(root: Path, boards: tuple[int, ...]) -> Reader:
    """Reads the boards' sysfs and hwmon files (in a thread: a wedged sysfs read must not stall the loop)."""

    async def read() -> tuple[BoardReading, ...]:
        return await asyncio.to_thread(read_boards, root, boards)

    return read


def telemetry_reader(
    url: str, boards: tuple[int, ...] | None, hostname: str | None, transport: httpx.AsyncBaseTransport | None = None
) -> Reader:
    """Reads the exporter's page; `boards` keeps the chips whose number is one of them (a slot's), None keeps all."""

    async def read() -> tuple[BoardReading, ...]:
        readings = parse_tt_telemetry(await fetch_tt_telemetry(url, transport), hostname)
        return tuple(r for r in readings if boards is None or (r.board.isdigit() and int(r.board) in boards))

    return read


def board_monitor(
    config: BoardsConfig,
    boards: tuple[int, ...],
    *,
    slot: str = "engine",
    every_chip: bool = True,
    root: Path = Path("/"),
    transport: httpx.AsyncBaseTransport | None = None,
    hostname: str | None = None,
    on_fault: Callable[[str], object] | None = None,
) -> BoardMonitor:
    """The monitor of an engine's boards: from `boards.tt_telemetry_url` when set, else from sysfs under `root`.

    `every_chip`: the engine owns the whole host, so every chip the exporter lists for it is its own.
    `hostname`: whose chips to keep of a page that covers several hosts (default: this host's name).
    """
    url = config.tt_telemetry_url
    if url:
        read = telemetry_reader(url, None if every_chip else boards, hostname or socket.gethostname(), transport)
        return BoardMonitor(config, read, f"tt-telemetry {url}", slot=slot, on_fault=on_fault)
    return BoardMonitor(config, sysfs_reader(root, boards), "sysfs", slot=slot, on_fault=on_fault)
