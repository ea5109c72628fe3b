"""Fetch one revision of a checkpoint into the store: resumable, checked against its lock, and atomic.

Files land in the revision's staging folder; the entry appears by one rename once every file is complete and
matches, so a fetch killed at any point (kill -9 included) leaves no entry, and the next one resumes its `.part`
files. One fetch per revision runs at a time (an inter-process file lock): a second one waits, then finds the
entry complete. Faults: a network fault keeps the staging folder for the next fetch; bytes that differ from the
lock or the listing lose only that file; a full disk removes the staging folder, to give the space back. No
other revision in the store is ever touched.

An entry that fails its quick check (a file lost, resized or changed since it was verified) is mended: it moves
back into staging, where its files are re-hashed and only the ones that differ are fetched again. Nothing serves
from such an entry meanwhile: `serve` runs the same quick check and refuses it.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from filelock import FileLock, Timeout
from rich.filesize import decimal

from appliance.weights.download import Cancelled, FileJob, RetryPolicy, download, with_retries
from appliance.weights.errors import DiskFull, WeightsError
from appliance.weights.hashing import sha256_files
from appliance.weights.layout import PART_SUFFIX, entry_dir, fetch_lock_file, staging_dir
from appliance.weights.lock import Lock, LockedFile
from appliance.weights.names import check_checkpoint, check_file_path, check_revision
from appliance.weights.progress import FetchProgress, QuietProgress
from appliance.weights.source import RemoteFile, Source
from appliance.weights.verify import verify, write_stamp

__all__ = ["FetchResult", "fetch"]

log = logging.getLogger(__name__)
_RETRY = RetryPolicy()


@dataclass(frozen=True, slots=True)
class FetchResult:
    lock: Lock
    """The lock given, or the one recorded from this fetch: the caller writes it (`write_lock`)."""
    entry: Path
    downloaded_bytes: int
    """Bytes received from the source by this fetch (0 where the entry was already there)."""
    joined: bool
    """The entry was already complete: fetched before, or by a fetch this one waited for."""


def fetch(
    source: Source,
    checkpoint: str,
    revision: str,
    store: Path,
    lock: Lock | None,
    *,
    jobs: int = 4,
    progress: FetchProgress | None = None,
    disk_reserve_bytes: int = 0,
    retry: RetryPolicy = _RETRY,
) -> FetchResult:
    """Bring `checkpoint@revision` into `store`, every file matching `lock` (or, without one, the listing).

    `disk_reserve_bytes`: space that must stay free beyond the files (the caller's tensor-cache estimate).
    """
    check_checkpoint(checkpoint)
    check_revision(revision)
    if lock is not None and (lock.checkpoint, lock.revision) != (checkpoint, revision):
        raise WeightsError(f"{checkpoint}@{revision}: the lock given is for {lock.checkpoint}@{lock.revision}")
    entry, staging = entry_dir(store, checkpoint, revision), staging_dir(store, checkpoint, revision)
    with _held(fetch_lock_file(store, checkpoint, revision), f"{checkpoint}@{revision}"):
        if entry.is_dir() and (done := _present(source, store, checkpoint, revision, lock, jobs)):
            return done
        if entry.is_dir():
            log.info("%s@%s fails its check: mending it from %s", checkpoint, revision, source.location)
            shutil.rmtree(staging, ignore_errors=True)
            staging.parent.mkdir(parents=True, exist_ok=True)
            os.rename(entry, staging)
        files = _wanted(source, checkpoint, revision, lock, retry)
        staging.mkdir(parents=True, exist_ok=True)
        _tidy(staging, files)
        _check_space(
            store,
            sum(f.size - _staged_bytes(staging, f) for f in files),
            disk_reserve_bytes,
            f"{checkpoint}@{revision}",
        )
        job = FileJob(
            source,
            checkpoint,
            revision,
            staging,
            "the listing" if lock is None else "the lock",
            progress or QuietProgress(),
            retry,
            threading.Event(),
        )
        digests, received = _download_all(job, files, jobs)
        made = lock or Lock(
            checkpoint,
            revision,
            datetime.now(UTC),
            source.location,
            tuple(LockedFile(f.path, f.size, digests[f.path]) for f in files),
        )
        _settle(staging, files)
        entry.parent.mkdir(parents=True, exist_ok=True)
        os.rename(staging, entry)
        _sync_dir(entry.parent)
        write_stamp(store, made)
    return FetchResult(made, entry, received, joined=False)


@contextmanager
def _held(lock_file: Path, name: str) -> Iterator[None]:
    """The revision's fetch lock, held for the block: another process's fetch of it is waited for."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    file_lock = FileLock(lock_file)
    try:
        file_lock.acquire(timeout=0)
    except Timeout:
        log.info("%s: another fetch of it is running; waiting for it", name)
        file_lock.acquire()
    try:
        yield
    finally:
        file_lock.release()


def _present(
    source: Source, store: Path, checkpoint: str, revision: str, lock: Lock | None, jobs: int
) -> FetchResult | None:
    """The result for an entry already in the store, or None where it fails its quick check.

    Without a lock, its files are hashed where they lie into one (trust on first use, as a first fetch does)."""
    entry = entry_dir(store, checkpoint, revision)
    if lock is None:
        paths = sorted(p.relative_to(entry).as_posix() for p in entry.rglob("*") if p.is_file())
        digests = sha256_files([entry / p for p in paths], jobs)
        files = tuple(LockedFile(p, (entry / p).stat().st_size, d) for p, d in zip(paths, digests, strict=True))
        made = Lock(checkpoint, revision, datetime.now(UTC), source.location, files)
        write_stamp(store, made)
        return FetchResult(made, entry, 0, joined=True)
    try:
        verify(store, lock, full=False)
    except WeightsError as problem:
        log.info("%s", problem)
        return None
    return FetchResult(lock, entry, 0, joined=True)


def _wanted(source: Source, checkpoint: str, revision: str, lock: Lock | None, retry: RetryPolicy) -> list[RemoteFile]:
    """The files to fetch: the lock's, else the source's listing, every path checked before any file request."""
    if lock is not None:
        return [RemoteFile(f.path, f.size, f.sha256) for f in lock.files]
    files = sorted(with_retries(retry, lambda: source.list_files(checkpoint, revision)), key=lambda f: f.path)
    for file in files:
        check_file_path(file.path)
    if not files:
        raise WeightsError(f"{checkpoint}@{revision}: {source.location} lists no files")
    return files


def _tidy(staging: Path, files: Sequence[RemoteFile]) -> None:
    """Remove from staging what is no file of this revision (left by another listing, or stray in a mended entry)."""
    keep = {p for f in files for p in (f.path, f.path + PART_SUFFIX)}
    for path in sorted(staging.rglob("*"), reverse=True):
        relative = path.relative_to(staging).as_posix()
        if path.is_dir() and not path.is_symlink():
            if not any(k.startswith(relative + "/") for k in keep):
                shutil.rmtree(path)
        elif relative not in keep:
            path.unlink()


def _check_space(store: Path, missing: int, reserve: int, name: str) -> None:
    """Refuse, before any file request, a fetch the store's filesystem has no room for."""
    free = shutil.disk_usage(store).free
    if missing + reserve > free:
        raise WeightsError(
            f"{name}: not enough disk space in {store}: {decimal(missing)} to download and "
            f"{decimal(reserve)} to keep free, {decimal(free)} free; prune old revisions or "
            "free space, then fetch again"
        )


def _staged_bytes(staging: Path, file: RemoteFile) -> int:
    for path in (staging / file.path, staging / (file.path + PART_SUFFIX)):
        if path.is_file():
            return min(path.stat().st_size, file.size)
    return 0


def _download_all(job: FileJob, files: Sequence[RemoteFile], jobs: int) -> tuple[dict[str, str], int]:
    """Every file's sha256 and the bytes received; the first failure stops the others and is raised."""
    shown = job.progress.shown(sum(f.size for f in files), sum(_staged_bytes(job.staging, f) for f in files))
    with shown, ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(download, job, f): f for f in files}
        try:
            wait(futures, return_when=FIRST_EXCEPTION)
        finally:  # done, failed or interrupted: the files still running stop at their next chunk
            job.stop.set()
            for future in futures:
                future.cancel()
    errors = [e for f in futures if not f.cancelled() and (e := f.exception()) is not None]
    if errors:
        first = next((e for e in errors if not isinstance(e, Cancelled)), errors[0])
        if isinstance(first, DiskFull):
            shutil.rmtree(job.staging, ignore_errors=True)
        raise first
    done = {futures[f].path: f.result() for f in futures}
    return {path: digest for path, (digest, _) in done.items()}, sum(count for _, count in done.values())


def _settle(staging: Path, files: Sequence[RemoteFile]) -> None:
    """Set each file's mtime a second back. A file rewritten in the clock tick the stamp is written in would
    otherwise keep the mtime the stamp records (git's "racy clean" problem), and the quick check would miss it."""
    settled = time.time_ns() - 1_000_000_000
    for file in files:
        os.utime(staging / file.path, ns=(settled, settled))


def _sync_dir(folder: Path) -> None:
    """Make a rename in `folder` durable (a power cut after it must not bring the staging folder back)."""
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
