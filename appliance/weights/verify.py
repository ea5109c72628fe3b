"""Whether a store entry still holds exactly what its lock names.

The quick check is what every boot runs: it hashes nothing. Each locked file must exist with its size, no other
file may be there (a stray `*.py` beside a config runs under trust_remote_code), and each file's (size, mtime_ns,
inode) must be what the stamp recorded when the entry was last fetched or fully verified. Rewriting a file in
place changes its mtime, so the quick check sees it; only a file whose mtime was put back escapes it, and the full
check (`appliance fetch --verify`) re-hashes every byte, then writes a new stamp.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pydantic import AwareDatetime, ConfigDict, TypeAdapter, ValidationError

from appliance.weights.errors import WeightsError
from appliance.weights.hashing import sha256_files
from appliance.weights.layout import entry_dir, staging_dir, stamp_file
from appliance.weights.lock import Lock, lock_digest

__all__ = ["is_partial", "verify", "write_stamp"]

_REFETCH = "run `appliance fetch` to fetch it again"
_REHASH = "run `appliance fetch --verify` to re-hash it"


@dataclass(frozen=True, slots=True)
class _Stamp:
    __pydantic_config__ = ConfigDict(extra="forbid", strict=True)

    lock_digest: str
    verified_at: AwareDatetime
    files: Mapping[str, tuple[int, int, int]]
    """Each file's (size, mtime_ns, inode) when its sha256 was last checked."""


_STAMP: TypeAdapter[_Stamp] = TypeAdapter(_Stamp)


def is_partial(store: Path, checkpoint: str, revision: str) -> bool:
    """A fetch of the revision began and did not finish: staging is there, the entry is not."""
    return staging_dir(store, checkpoint, revision).is_dir() and not entry_dir(store, checkpoint, revision).is_dir()


def verify(store: Path, lock: Lock, *, full: bool, jobs: int = 4) -> None:
    """Nothing when the entry matches `lock`; else a WeightsError naming the first fault and what mends it."""
    name = f"{lock.checkpoint}@{lock.revision}"
    entry = entry_dir(store, lock.checkpoint, lock.revision)
    if is_partial(store, lock.checkpoint, lock.revision):
        raise WeightsError(f"{name}: partial: a fetch was interrupted; run `appliance fetch` to finish it")
    if not entry.is_dir():
        raise WeightsError(f"{name}: not in the store {store}; run `appliance fetch` to fetch it")
    found = _stats(entry)
    for file in lock.files:
        if file.path not in found:
            raise WeightsError(f"{name}: {file.path} is missing from {entry}; {_REFETCH}")
        if found[file.path].st_size != file.size:
            size = found[file.path].st_size
            raise WeightsError(f"{name}: {file.path} has {size} bytes, the lock says {file.size}; {_REFETCH}")
    if extra := sorted(set(found) - {f.path for f in lock.files}):
        raise WeightsError(f"{name}: {extra[0]} is in {entry} but not in the lock; run `appliance fetch` to remove it")
    if full:
        _rehash(store, lock, jobs)
    else:
        _compare_stamp(store, lock, found)


def write_stamp(store: Path, lock: Lock) -> None:
    """Record the entry's files as they are now as verified against `lock` (its files were just hashed)."""
    entry = entry_dir(store, lock.checkpoint, lock.revision)
    found = _stats(entry)
    stamp = _Stamp(lock_digest(lock), datetime.now(UTC), {path: _key(found[path]) for path in sorted(found)})
    path = stamp_file(store, lock.checkpoint, lock.revision)
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(_STAMP.dump_json(stamp, indent=1))
    os.replace(temporary, path)


def _rehash(store: Path, lock: Lock, jobs: int) -> None:
    entry = entry_dir(store, lock.checkpoint, lock.revision)
    digests = sha256_files([entry / f.path for f in lock.files], jobs)
    for file, digest in zip(lock.files, digests, strict=True):
        if digest != file.sha256:
            raise WeightsError(
                f"{lock.checkpoint}@{lock.revision}: {file.path}: sha256 {digest[:12]}… differs from "
                f"the lock ({file.sha256[:12]}…); {_REFETCH}"
            )
    write_stamp(store, lock)


def _compare_stamp(store: Path, lock: Lock, found: Mapping[str, os.stat_result]) -> None:
    name = f"{lock.checkpoint}@{lock.revision}"
    path = stamp_file(store, lock.checkpoint, lock.revision)
    try:
        stamp = _STAMP.validate_json(path.read_bytes())
    except FileNotFoundError:
        raise WeightsError(f"{name}: never verified against its lock; {_REHASH}") from None
    except (OSError, ValidationError):
        raise WeightsError(f"{name}: its verification stamp {path} is unreadable; {_REHASH}") from None
    if stamp.lock_digest != lock_digest(lock):
        raise WeightsError(f"{name}: verified against another lock; {_REHASH}")
    for file in lock.files:
        if stamp.files.get(file.path) != _key(found[file.path]):
            raise WeightsError(f"{name}: {file.path} changed since it was verified; {_REHASH}")


def _stats(entry: Path) -> dict[str, os.stat_result]:
    """Every file under `entry` by its path relative to it (symbolic links followed)."""
    found: dict[str, os.stat_result] = {}
    for folder, _, names in os.walk(entry):
        for name in names:
            path = Path(folder, name)
            found[path.relative_to(entry).as_posix()] = path.stat()
    return found


def _key(stat: os.stat_result) -> tuple[int, int, int]:
    return stat.st_size, stat.st_mtime_ns, stat.st_ino
