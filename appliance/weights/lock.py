"""The weights lock: one revision of a checkpoint and every file's size and sha256, kept as JSON beside the config.

A lock is to weights what go.sum is to modules: the first fetch of a revision records what it received (the
sha256 computed while streaming; for LFS files the hub's own sha256 must match), and every later fetch, on any
host and from any mirror, must receive the same bytes. The revision is a commit id, never a branch, so the lock
names one tree that cannot move.

A lock's names are checked as names.py checks them before any request.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, AwareDatetime, ConfigDict, Field, TypeAdapter, ValidationError

from appliance.weights.errors import WeightsError
from appliance.weights.names import checkpoint_problem, file_path_problem, revision_problem

__all__ = [
    "Lock",
    "LockedFile",
    "lock_digest",
    "read_lock",
    "write_lock",
]


def _validator(problem_of: Callable[[str], str | None]) -> AfterValidator:
    def check(value: str) -> str:
        if problem := problem_of(value):
            raise ValueError(problem)
        return value

    return AfterValidator(check)


def _sorted_once(files: tuple[LockedFile, ...]) -> tuple[LockedFile, ...]:
    paths = [f.path for f in files]
    if paths != sorted(set(paths)):
        raise ValueError("files must be sorted by path, each path once")
    return files


_STRICT = ConfigDict(extra="forbid", strict=True)


@dataclass(frozen=True, slots=True)
class LockedFile:
    __pydantic_config__ = _STRICT

    path: Annotated[str, _validator(file_path_problem)]
    """Relative to the revision's folder, with '/' between folders."""
    size: Annotated[int, Field(ge=0)]
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


@dataclass(frozen=True, slots=True)
class Lock:
    __pydantic_config__ = _STRICT

    checkpoint: Annotated[str, _validator(checkpoint_problem)]
    revision: Annotated[str, _validator(revision_problem)]
    recorded_at: AwareDatetime
    source: str
    """Where the first fetch got the files, for a reader: any source serving the same bytes will do."""
    files: Annotated[tuple[LockedFile, ...], AfterValidator(_sorted_once)]
    """Sorted by path (code point order), so a lock's JSON is one text per content."""


_ADAPTER: TypeAdapter[Lock] = TypeAdapter(Lock)


def lock_digest(lock: Lock) -> str:
    """The sha256 of the canonical JSON of the lock's files: what a verification stamp was made against."""
    files = [{"path": f.path, "sha256": f.sha256, "size": f.size} for f in lock.files]
    return hashlib.sha256(json.dumps(files, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def read_lock(path: Path) -> Lock:
    """The lock at `path`; a WeightsError naming the file and its first fault where it is missing or malformed."""
    try:
        text = path.read_bytes()
    except OSError as error:
        raise WeightsError(f"weights lock {path}: cannot read it: {error.strerror}") from None
    try:
        return _ADAPTER.validate_json(text)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the file"
        # a dataclass calls an unknown key an unexpected keyword argument: say what it means in a file
        fault = "not a key of a weights lock" if first["type"] == "unexpected_keyword_argument" else first["msg"]
        raise WeightsError(f"weights lock {path}: {where}: {' '.join(fault.split())}") from None


def write_lock(path: Path, lock: Lock) -> None:
    """Replace the lock at `path` atomically: a reader, or a writer killed mid-write, sees the old or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}-", delete=False) as file:
        json.dump(_ADAPTER.dump_python(lock, mode="json"), file, indent=2)
        file.write("\n")
        file.flush()
        os.fsync(file.fileno())
    os.replace(file.name, path)
