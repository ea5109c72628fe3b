"""How long boots take here: each boot's phase durations, recorded per config hash and host.

A Tenstorrent boot can spend most of an hour building its tensor cache; the first boot of a config
is the record the next one is measured against. While an engine boots, `progress()` says which phase
it is in, how long the same config took on this host before, and whether this boot is far slower
(an alert: a cache rebuilt every time, or a device that init keeps retrying).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.runtime.lifecycle import EngineEvent, EngineState
from appliance.runtime.tensor_cache import cache_state, mark_built

__all__ = ["KEEP", "SLOW_FACTOR", "BootClock", "BootProgress"]

KEEP = 5
"""Boots remembered per config and host; the ETA uses their median."""
SLOW_FACTOR = 2.0
"""A boot this many times its record (and at least SLOW_GRACE_S over it) raises the boot-slow alert."""
SLOW_GRACE_S = 10.0
_BOOT = (EngineState.STARTING, EngineState.LOADING, EngineState.WARMING)


@dataclass(frozen=True, slots=True)
class BootProgress:
    phase: str
    elapsed_s: float
    expected_s: float | None
    """Median boot time of this config on this host; None before its first recorded boot."""
    eta_s: float | None
    """Seconds left by the record (0 once over it); None without a record, or while the tensor cache is built."""
    slow: bool
    tensor_cache_built: bool | None = None
    """Whether tt-metal's tensor cache for this plan was built when the boot began (None: the CPU engine has none);
    a boot that builds it takes far longer than the record of warm boots, so it has no ETA."""

    @property
    def fraction(self) -> float | None:
        return None if not self.expected_s else min(1.0, self.elapsed_s / self.expected_s)


class BootClock:
    """Listens to one supervisor's lifecycle events and keeps the boot records file."""

    def __init__(
        self, path: Path, key: str, *, tensor_cache: str | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self._path = path
        self._key = key
        self._cache = tensor_cache
        self._cache_built: bool | None = None
        self._clock = clock
        self._started: float | None = None
        self._phases: dict[str, float] = {}
        self._phase: EngineState | None = None
        self._entered = 0.0

    def on_event(self, event: EngineEvent) -> None:
        if event.state is EngineState.STARTING:
            self._started, self._phases = event.at, {}
            self._cache_built = None if self._cache is None else cache_state(self._cache).built
        elif self._started is None:
            return
        if self._phase in _BOOT:
            self._phases[self._phase.value] = event.at - self._entered
        self._phase, self._entered = event.state, event.at
        if event.state is EngineState.READY:
            self._save(event.at - self._started)
            if self._cache is not None and not self._cache_built:
                mark_built(self._cache, event.at - self._started, event.at)  # the first ready after a cold cache
        if event.state not in _BOOT:
            self._started = None  # ready, failed or stopped: this boot is over

    def progress(self) -> BootProgress | None:
        """Where the current boot stands against the record; None when no boot is under way."""
        if self._started is None or self._phase is None:
            return None
        elapsed = self._clock() - self._started
        totals = [r["total_s"] for r in self._records().get(self._key, [])]
        expected = statistics.median(totals) if totals and self._cache_built is not False else None
        eta = None if expected is None else max(0.0, expected - elapsed)
        slow = expected is not None and elapsed > max(SLOW_FACTOR * expected, expected + SLOW_GRACE_S)
        return BootProgress(self._phase.value, elapsed, expected, eta, slow, self._cache_built)

    def _records(self) -> dict[str, list[dict[str, Any]]]:
        try:
            data = json.loads(self._path.read_text())
        except (OSError, ValueError):
            return {}  # no record yet, or a damaged one: the next ready boot writes it anew
        return data if isinstance(data, dict) else {}

    def _save(self, total: float) -> None:
        records = self._records()
        entry = {"total_s": round(total, 3), "phases": self._phases, "at": round(self._clock(), 3)}
        records[self._key] = [*records.get(self._key, []), entry][-KEEP:]
        tmp = self._path.with_suffix(".tmp")
        tmp.write_text(json.dumps(records, indent=1, sort_keys=True))
        os.replace(tmp, self._path)
