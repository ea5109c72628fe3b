"""Whether tt-metal's tensor cache for a plan is built: a marker the first ready boot of its key writes.

The plan keys the cache folder by what invalidates it (plan.py `_tensor_cache`), so a folder holds one build; the
folder existing says little (tt-metal fills it tensor by tensor during the first boot, which a kill can cut short),
so the first boot that reaches ready marks it built, and `check`, `status`, the console and the boot ETA read that.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MARKER", "CacheState", "cache_state", "mark_built"]

MARKER = ".appliance-built.json"


@dataclass(frozen=True, slots=True)
class CacheState:
    path: str
    built: bool
    built_at: float | None = None
    """When the boot that built it reached ready (epoch seconds)."""
    boot_s: float | None = None
    """How long that boot took: the cold boot's cost, for the next key."""


def cache_state(path: str) -> CacheState:
    try:
        found = json.loads((Path(path) / MARKER).read_text())
    except (OSError, ValueError):
        return CacheState(path, built=False)  # no marker, or one a crash cut short: built again by the next boot
    return CacheState(path, True, float(found.get("at", 0.0)), float(found.get("boot_s", 0.0)))


def mark_built(path: str, boot_s: float, at: float) -> None:
    """Mark the cache at `path` built by a boot of `boot_s` that reached ready at `at` (atomically)."""
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"{MARKER}.tmp"
    tmp.write_text(json.dumps({"at": round(at, 3), "boot_s": round(boot_s, 3)}))
    os.replace(tmp, folder / MARKER)
