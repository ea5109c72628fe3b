"""A pinned checkpoint against its weights lock, as every boot, `check` and an upgrade's judge see it.

A boot hashes nothing: each file's presence and size against the lock, and the stamp the last full verification
wrote (a file changed since is refused), so a checkpoint of hundreds of GB costs no minutes of hashing on every
restart. `appliance fetch` hashes as it streams, and `appliance fetch --verify` re-hashes on demand.
"""

from __future__ import annotations

from pathlib import Path

from appliance.plan import WeightsPlan
from appliance.weights.errors import WeightsError
from appliance.weights.lock import Lock, read_lock
from appliance.weights.verify import verify

__all__ = ["recorded_lock", "verified"]


def verified(weights: WeightsPlan, *, full: bool) -> Lock:
    """The revision's lock once its stored copy matches it (full: every file re-hashed); else a WeightsError naming
    the file and what differs, and the command that mends it."""
    lock = recorded_lock(weights)
    if lock is None:
        raise WeightsError(
            f"{weights.checkpoint}@{weights.revision}: no weights lock at {weights.lock_file}; run "
            "`appliance fetch` to fetch it and record one"
        )
    verify(Path(weights.store), lock, full=full, jobs=weights.jobs)
    return lock


def recorded_lock(weights: WeightsPlan) -> Lock | None:
    """The revision's lock where the site has one (a malformed one is a one-line WeightsError naming it)."""
    path = Path(weights.lock_file)
    return read_lock(path) if path.exists() else None
