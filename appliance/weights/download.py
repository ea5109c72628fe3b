"""One file of a fetch: resumed from its `.part`, hashed while it streams, checked, then renamed into staging.

A network fault keeps the `.part` and the next attempt asks for the rest (`Range: bytes=N-`), after hashing the
bytes already there; a source that answers with the whole file instead starts it again from 0. Attempts are
bounded, with exponential backoff and jitter (a fleet's hosts do not retry a mirror in step). Bytes that differ
from the lock or the listing are never kept.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from io import FileIO
from pathlib import Path
from typing import TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from appliance.weights.errors import DiskFull, TransientError, WeightsError
from appliance.weights.hashing import hash_into
from appliance.weights.layout import PART_SUFFIX
from appliance.weights.progress import FetchProgress
from appliance.weights.source import RemoteFile, Source

__all__ = ["Cancelled", "FileJob", "RetryPolicy", "download", "with_retries"]

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 5
    """Tries per request, the first included."""
    backoff_s: float = 1.0
    """The first wait; each next one doubles (up to `max_backoff_s`), plus up to `backoff_s` at random."""
    max_backoff_s: float = 30.0


class Cancelled(WeightsError):
    """Another file of the fetch failed: this one stops where it is (its `.part` kept)."""


@dataclass(frozen=True, slots=True)
class FileJob:
    """What every file of one fetch shares."""

    source: Source
    checkpoint: str
    revision: str
    staging: Path
    reference: str
    """What the expected sha256 came from, for messages: "the lock" or "the listing"."""
    progress: FetchProgress
    policy: RetryPolicy
    stop: threading.Event


def with_retries(policy: RetryPolicy, call: Callable[[], T], stop: threading.Event | None = None) -> T:
    """`call()`, again after each TransientError up to `policy.attempts`; then one WeightsError saying so.

    The waits end early when `stop` is set, so a failed fetch does not sit out another file's backoff."""
    waiter = stop or threading.Event()

    def sleep(seconds: float) -> None:
        waiter.wait(seconds)

    retrying = Retrying(
        stop=stop_after_attempt(policy.attempts),
        wait=wait_exponential(multiplier=policy.backoff_s, max=policy.max_backoff_s) + wait_random(0, policy.backoff_s),
        retry=retry_if_exception_type(TransientError),
        before_sleep=_log_retry,
        sleep=sleep,
        reraise=True,
    )
    try:
        return retrying(call)
    except TransientError as error:
        raise WeightsError(f"{error} (gave up after {policy.attempts} attempts)") from None


def _log_retry(state: RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome else None
    wait = state.next_action.sleep if state.next_action else 0.0
    log.warning("%s; attempt %d failed, retrying in %.1f s", error, state.attempt_number, wait)


def download(job: FileJob, file: RemoteFile) -> tuple[str, int]:
    """Bring `file` into the staging folder, complete and checked: its sha256 and the bytes received for it.

    A failure stops the other files of the fetch."""
    if job.stop.is_set():
        raise Cancelled(f"{file.path}: cancelled")
    final = job.staging / file.path
    received = _Received()
    try:
        if final.is_file() and (digest := _staged(job, file, final)):
            return digest, 0
        final.parent.mkdir(parents=True, exist_ok=True)
        return with_retries(job.policy, lambda: _attempt(job, file, final, received), job.stop), received.count
    except BaseException:
        job.stop.set()  # here, not by the caller: a worker must not start a file queued behind this one
        raise


@dataclass(slots=True)
class _Received:
    """Bytes received for one file over all its attempts."""

    count: int = 0


def _staged(job: FileJob, file: RemoteFile, final: Path) -> str | None:
    """The sha256 of a file an earlier fetch completed, if it still matches; otherwise it is removed."""
    hasher = hashlib.sha256()
    size = hash_into(hasher, final)
    if size == file.size and file.sha256 in (None, hasher.hexdigest()):
        job.progress.started(file.path, file.size, size)
        job.progress.finished(file.path, file.size, 0, 0.0)
        return hasher.hexdigest()
    final.unlink()
    return None


def _attempt(job: FileJob, file: RemoteFile, final: Path, received: _Received) -> str:
    if job.stop.is_set():
        raise Cancelled(f"{file.path}: cancelled")
    part = final.with_name(final.name + PART_SUFFIX)
    hasher, offset = _resume_point(part, file.size)
    started, before = time.monotonic(), received.count
    job.progress.started(file.path, file.size, offset)
    if offset < file.size or not part.exists():
        hasher, offset = _receive(job, file, part, hasher, offset, received)
    if offset < file.size:
        raise TransientError(f"{file.path}: the transfer ended at {offset} of {file.size} bytes")
    digest = hasher.hexdigest()
    if file.sha256 is not None and digest != file.sha256:
        part.unlink()
        raise WeightsError(
            f"{file.path}: sha256 {digest[:12]}… differs from {job.reference} ({file.sha256[:12]}…): "
            f"{job.source.url(job.checkpoint, job.revision, file.path)} serves other bytes under "
            f"this revision; the file was not kept"
        )
    os.replace(part, final)
    job.progress.finished(file.path, file.size, received.count - before, time.monotonic() - started)
    return digest


def _receive(
    job: FileJob, file: RemoteFile, part: Path, hasher: hashlib._Hash, offset: int, received: _Received
) -> tuple[hashlib._Hash, int]:
    """Append the source's bytes from `offset` to the `.part` (all of them, from 0, where it cannot resume)."""
    with job.source.open(job.checkpoint, job.revision, file.path, offset) as body:
        if body.offset != offset:
            hasher, offset = hashlib.sha256(), 0
        # Each chunk is written and hashed in a thread of its own while the next one arrives: sha256 and the write
        # release the GIL, so a single large file streams at the socket's rate, not at the sum of the three.
        with _writable(part, offset) as out, ThreadPoolExecutor(1) as keeper:
            kept: Future[None] | None = None
            for chunk in body.chunks:
                if job.stop.is_set():
                    raise Cancelled(f"{file.path}: cancelled")
                offset += len(chunk)
                if offset > file.size:
                    part.unlink()
                    raise WeightsError(
                        f"{file.path}: the source sent more than the {file.size} bytes {job.reference} gives"
                    )
                if kept is not None:
                    kept.result()
                kept = keeper.submit(_keep, out, chunk, part, hasher)
                received.count += len(chunk)
                job.progress.advanced(file.path, len(chunk))
            if kept is not None:
                kept.result()
            _write(out, b"", part, sync=True)
    return hasher, offset


def _keep(out: FileIO, chunk: bytes, part: Path, hasher: hashlib._Hash) -> None:
    _write(out, chunk, part)
    hasher.update(chunk)


def _resume_point(part: Path, size: int) -> tuple[hashlib._Hash, int]:
    """A hasher fed with the `.part`'s bytes and their count; a `.part` longer than the file is dropped."""
    hasher = hashlib.sha256()
    if not part.exists():
        return hasher, 0
    if part.stat().st_size > size:
        part.unlink()
        return hasher, 0
    return hasher, hash_into(hasher, part)


def _writable(part: Path, offset: int) -> FileIO:
    """The `.part` open at `offset`, unbuffered: a full disk fails the write that meets it, not a later close."""
    try:
        out = FileIO(part, "r+b" if offset else "wb")
        out.truncate(offset)
        out.seek(offset)
    except OSError as error:
        raise _write_error(error, part) from None
    return out


def _write(out: FileIO, chunk: bytes, part: Path, *, sync: bool = False) -> None:
    try:
        view = memoryview(chunk)
        while view:
            view = view[out.write(view) :]
        if sync:  # the bytes are on disk before the rename that makes them count as complete
            os.fsync(out.fileno())
    except OSError as error:
        raise _write_error(error, part) from None


def _write_error(error: OSError, part: Path) -> WeightsError:
    if error.errno == errno.ENOSPC:
        return DiskFull(f"disk full writing {part}: free space in the store, then fetch again")
    return WeightsError(f"cannot write {part}: {error.strerror}")
