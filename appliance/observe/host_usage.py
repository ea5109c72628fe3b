"""Host CPU and memory, and the engine's resident memory, read from /proc.

This is the devices view on a host without Tenstorrent boards (the CPU engine). CPU busy is a
ratio between two reads, so the sampler keeps the previous read; `root` lets tests point it at
a recorded tree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HostUsage", "UsageSampler"]

_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True, slots=True)
class HostUsage:
    cpu_busy: float | None
    """Fraction of all cores busy since the previous read; None on the first read."""
    cores: int
    load_1m: float
    memory_total_bytes: int
    memory_available_bytes: int
    engine_rss_bytes: int | None
    """Resident memory of every process in the engine's process group; None without an engine."""


class UsageSampler:
    """Reads /proc; each read reports CPU busy since the one before."""

    def __init__(self, root: Path = Path("/")) -> None:
        self._proc = root / "proc"
        self._last: tuple[int, int] | None = None

    def read(self, engine_pgid: int | None) -> HostUsage:
        busy, total = self._cpu_times()
        cpu = None
        if self._last is not None and total > self._last[1]:
            cpu = (busy - self._last[0]) / (total - self._last[1])
        self._last = (busy, total)
        memory = self._meminfo()
        return HostUsage(
            cpu_busy=cpu,
            cores=os.cpu_count() or 1,
            load_1m=float((self._proc / "loadavg").read_text().split()[0]),
            memory_total_bytes=memory["MemTotal"],
            memory_available_bytes=memory["MemAvailable"],
            engine_rss_bytes=None if engine_pgid is None else self._group_rss(engine_pgid),
        )

    def _cpu_times(self) -> tuple[int, int]:
        fields = [int(v) for v in (self._proc / "stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        total = sum(fields[:8])  # guest time is already inside user/nice
        return total - idle, total

    def _meminfo(self) -> dict[str, int]:
        values: dict[str, int] = {}
        for line in (self._proc / "meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("MemTotal", "MemAvailable"):
                values[key] = int(rest.split()[0]) * 1024
        return values

    def _group_rss(self, pgid: int) -> int:
        rss = 0
        for stat in self._proc.glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # the process exited between the listing and the read
            if int(fields[2]) == pgid:
                rss += int(fields[21]) * _PAGE  # field 24 of stat (rss in pages), after pid and comm
        return rss
