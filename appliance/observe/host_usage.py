"""Host CPU and memory, and the engine's resident memory, read with psutil.

This is the devices view on a host without Tenstorrent boards (the CPU engine). CPU busy is a
ratio between two reads, so the sampler keeps the previous read (psutil's own cpu_percent keeps
that state module-wide, which two samplers would share).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil

__all__ = ["HostUsage", "UsageSampler", "group_rss"]


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
    """Each read reports CPU busy since the one before."""

    def __init__(self) -> None:
        self._last: tuple[float, float] | None = None

    def read(self, engine_pgid: int | None) -> HostUsage:
        times = psutil.cpu_times()
        # guest time is already counted inside user and nice on Linux
        total = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
        busy = total - times.idle - getattr(times, "iowait", 0.0)
        cpu = None
        if self._last is not None and total > self._last[1]:
            cpu = (busy - self._last[0]) / (total - self._last[1])
        self._last = (busy, total)
        memory = psutil.virtual_memory()
        return HostUsage(
            cpu_busy=cpu,
            cores=psutil.cpu_count() or 1,
            load_1m=os.getloadavg()[0],
            memory_total_bytes=memory.total,
            memory_available_bytes=memory.available,
            engine_rss_bytes=None if engine_pgid is None else group_rss(engine_pgid),
        )


def group_rss(pgid: int) -> int:
    """Resident bytes of every live process in process group `pgid`."""
    rss = 0
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid:
                rss += proc.memory_info().rss
        except (psutil.Error, ProcessLookupError):
            continue  # the process exited between the listing and the read
    return rss
