"""Where the store keeps each revision, its verification stamp, a fetch's staging folder and its lock.

    {store}/{org}/{name}/{revision}/                    the files, present only when complete and verified
    {store}/{org}/{name}/.{revision}.verified.json      the stamp of the last full verification (verify.py)
    {store}/.staging/{org}__{name}@{revision}/          a fetch in progress or interrupted: `path` and `path.part`
    {store}/.locks/{org}__{name}@{revision}.lock        held by the one fetch of that revision at a time

Staging lies inside the store, so an entry appears by one rename on one filesystem.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "PART_SUFFIX",
    "entry_dir",
    "fetch_lock_file",
    "fetch_lock_named",
    "lock_path",
    "staging_dir",
    "staging_name",
    "staging_root",
    "stamp_file",
]

PART_SUFFIX = ".part"
"""A file still being downloaded: `staging/path.part`, renamed to `staging/path` once its sha256 is checked."""


def entry_dir(store: Path, checkpoint: str, revision: str) -> Path:
    return store / checkpoint / revision


def stamp_file(store: Path, checkpoint: str, revision: str) -> Path:
    return store / checkpoint / f".{revision}.verified.json"


def staging_name(checkpoint: str, revision: str) -> str:
    return f"{checkpoint.replace('/', '__')}@{revision}"


def staging_root(store: Path) -> Path:
    """The folder holding every fetch's staging folder (one per revision, named by `staging_name`)."""
    return store / ".staging"


def staging_dir(store: Path, checkpoint: str, revision: str) -> Path:
    return staging_root(store) / staging_name(checkpoint, revision)


def fetch_lock_file(store: Path, checkpoint: str, revision: str) -> Path:
    return fetch_lock_named(store, staging_name(checkpoint, revision))


def fetch_lock_named(store: Path, name: str) -> Path:
    """The fetch lock of the staging folder called `name`."""
    return store / ".locks" / f"{name}.lock"


def lock_path(locks_dir: Path, checkpoint: str, revision: str) -> Path:
    """A revision's weights lock in the site's locks folder."""
    return locks_dir / checkpoint / f"{revision}.lock.json"
