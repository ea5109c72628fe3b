"""What the weights store holds, and pruning what no generation needs.

The caller decides what to keep (the current generation's revisions and the rollback's). Pruning takes each
revision's fetch lock before it removes anything, so it never pulls a folder from under a running fetch.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from filelock import FileLock, Timeout

from appliance.weights.errors import WeightsError
from appliance.weights.layout import (
    entry_dir,
    fetch_lock_file,
    fetch_lock_named,
    lock_path,
    staging_name,
    staging_root,
    stamp_file,
)
from appliance.weights.lock import read_lock
from appliance.weights.verify import verify

__all__ = ["Leftover", "PruneResult", "StoreListing", "StoredRevision", "list_store", "prune"]

LockState = Literal["verified", "changed since verified", "no lock"]
_REVISION = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True, slots=True)
class StoredRevision:
    checkpoint: str
    revision: str
    size_bytes: int
    state: LockState
    detail: str
    """Why it is not "verified": the quick check's message (empty otherwise)."""


@dataclass(frozen=True, slots=True)
class Leftover:
    """A staging folder: a fetch running (`running`), or one that was interrupted."""

    name: str
    """`org__name@revision`."""
    path: Path
    size_bytes: int
    running: bool


@dataclass(frozen=True, slots=True)
class StoreListing:
    revisions: tuple[StoredRevision, ...]
    leftovers: tuple[Leftover, ...]


@dataclass(frozen=True, slots=True)
class PruneResult:
    removed: tuple[Path, ...]
    freed_bytes: int
    busy: tuple[Path, ...]
    """What a running fetch holds, left in place."""


def list_store(store: Path, locks_dir: Path) -> StoreListing:
    """Every revision in `store` with its size and state against its lock in `locks_dir`, and staging leftovers."""
    revisions = []
    for checkpoint, revision in _entries(store):
        state, detail = _state(store, lock_path(locks_dir, checkpoint, revision))
        size = _size(entry_dir(store, checkpoint, revision))
        revisions.append(StoredRevision(checkpoint, revision, size, state, detail))
    leftovers = tuple(
        Leftover(folder.name, folder, _size(folder), _running(fetch_lock_named(store, folder.name)))
        for folder in _staging_folders(store)
    )
    return StoreListing(tuple(revisions), leftovers)


def _state(store: Path, lock_file: Path) -> tuple[LockState, str]:
    """The entry's state against the lock at `lock_file`; a malformed lock is the caller's error (one line)."""
    if not lock_file.is_file():
        return "no lock", ""
    lock = read_lock(lock_file)
    try:
        verify(store, lock, full=False)
    except WeightsError as problem:
        return "changed since verified", str(problem)
    return "verified", ""


def prune(store: Path, keep: Collection[tuple[str, str]]) -> PruneResult:
    """Remove every revision not in `keep` (checkpoint, revision) and every staging folder no fetch is running
    in, except a kept revision's that is not in the store yet: that is an interrupted fetch to resume."""
    resumable = {staging_name(c, r) for c, r in keep if not entry_dir(store, c, r).is_dir()}
    targets: list[tuple[Path, Path, Path | None]] = [
        *(
            (entry_dir(store, c, r), fetch_lock_file(store, c, r), stamp_file(store, c, r))
            for c, r in _entries(store)
            if (c, r) not in keep
        ),
        *(
            (folder, fetch_lock_named(store, folder.name), None)
            for folder in _staging_folders(store)
            if folder.name not in resumable
        ),
    ]
    removed: list[Path] = []
    busy: list[Path] = []
    freed = 0
    for folder, lock_file, stamp in targets:
        size = _remove(store, folder, lock_file, stamp)
        if size is None:
            busy.append(folder)
        else:
            removed.append(folder)
            freed += size
    return PruneResult(tuple(removed), freed, tuple(busy))


def _remove(store: Path, folder: Path, lock_file: Path, stamp: Path | None) -> int | None:
    """Remove `folder` (and an entry's stamp) under its fetch lock: the bytes freed, or None while a fetch holds it."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(lock_file)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return None
    try:
        size = _size(folder)
        shutil.rmtree(folder)
        if stamp is not None:
            stamp.unlink(missing_ok=True)
            _remove_empty_parents(folder.parent, store)
    finally:
        lock.release()
    return size


def _entries(store: Path) -> Iterator[tuple[str, str]]:
    """(checkpoint, revision) of every entry: `{store}/{org}/{name}/{revision}/`, hidden folders skipped."""
    for org in _folders(store):
        for name in _folders(org):
            for revision in _folders(name):
                if _REVISION.fullmatch(revision.name):
                    yield f"{org.name}/{name.name}", revision.name


def _folders(parent: Path) -> list[Path]:
    if not parent.is_dir():
        return []
    return sorted(p for p in parent.iterdir() if p.is_dir() and not p.name.startswith("."))


def _staging_folders(store: Path) -> list[Path]:
    root = staging_root(store)
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def _running(lock_file: Path) -> bool:
    """A fetch holds the lock (one that never existed is free)."""
    if not lock_file.exists():
        return False
    lock = FileLock(lock_file)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    lock.release()
    return False


def _size(folder: Path) -> int:
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(folder) for n in names)


def _remove_empty_parents(folder: Path, store: Path) -> None:
    """Remove `{org}/{name}/` and `{org}/` once they hold nothing."""
    while folder != store and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent
