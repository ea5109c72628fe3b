"""The names a fetch turns into URLs and store paths, checked before any request: a revision is a commit id (never a
branch), a checkpoint an `org/name` repo id, a file path stays inside its folder. No pydantic here: `validate`
checks a checkpoint's name on every verdict.
"""

from __future__ import annotations

import re

from appliance.weights.errors import WeightsError
from appliance.weights.layout import PART_SUFFIX

__all__ = [
    "check_checkpoint",
    "check_file_path",
    "check_revision",
    "checkpoint_problem",
    "file_path_problem",
    "revision_problem",
]

_REVISION = re.compile(r"[0-9a-f]{40}")
# The hub's repo ids: letters, digits, '.', '_' and '-', starting with a letter or digit (no hidden folders).
_CHECKPOINT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


def revision_problem(revision: str) -> str | None:
    if _REVISION.fullmatch(revision):
        return None
    return "not a commit id: pin the 40 lowercase hex digits of a commit (a branch or a tag can move)"


def checkpoint_problem(checkpoint: str) -> str | None:
    if _CHECKPOINT.fullmatch(checkpoint) and ".." not in checkpoint:
        return None
    return "not a repo id: expected org/name of letters, digits, '.', '_' and '-', without '..'"


def file_path_problem(path: str) -> str | None:
    parts = path.split("/")
    if not path or path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in parts):
        return "not a relative path: no leading '/', no '.', '..' or empty segment, no backslash"
    if any(ord(c) < 32 for c in path):
        return "has a control character"
    if path.endswith(PART_SUFFIX):
        return f"ends in {PART_SUFFIX}, the store's suffix for a partial download"
    return None


def check_revision(revision: str) -> None:
    """A WeightsError naming `revision` unless it is a full commit id."""
    if problem := revision_problem(revision):
        raise WeightsError(f"revision {revision!r}: {problem}")


def check_checkpoint(checkpoint: str) -> None:
    """A WeightsError naming `checkpoint` unless it is an `org/name` repo id safe as a URL and a store path."""
    if problem := checkpoint_problem(checkpoint):
        raise WeightsError(f"checkpoint {checkpoint!r}: {problem}")


def check_file_path(path: str) -> None:
    """A WeightsError naming `path` unless it stays inside the folder it is joined to."""
    if problem := file_path_problem(path):
        raise WeightsError(f"file path {path!r}: {problem}")
