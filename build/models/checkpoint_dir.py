"""What the model recipes share: the content hash of a checkpoint folder, stable JSON, and the
atomic swap of a freshly built folder onto the served one.

The recipes run in the engine's interpreter, beside this file (a script's own folder is first on
its import path); this module needs nothing beyond the standard library and PyYAML (both in every engine).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import yaml

__all__ = [
    "COMPLETE_MARKER",
    "BuildMismatch",
    "build_into",
    "content_hash",
    "ensure_checkpoint",
    "file_sha256",
    "generated_main",
    "write_json",
]

COMPLETE_MARKER = ".complete"
_CHUNK = 1 << 20


def write_json(path: Path, data: object) -> None:
    """Write JSON with stable formatting (sorted keys, trailing newline)."""
    path.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def content_hash(directory: Path) -> str:
    """sha256 over the relative names and contents of every file except the marker."""
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and p.name != COMPLETE_MARKER):
        digest.update(path.relative_to(directory).as_posix().encode() + b"\0")
        digest.update(file_sha256(path).encode() + b"\n")
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """sha256 of one file, read in chunks (checkpoints are hundreds of MB)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def build_into(out: Path, write: Callable[[Path], None], expect: str | None = None) -> str:
    """Run `write` on an empty folder beside `out`, then put it in `out`'s place; return its hash.

    The served folder is never half-written: the engine sees either the old checkpoint or the new
    one, and a failed build leaves nothing behind. An `out` that already holds exactly the new
    content is left alone; a build whose hash differs from `expect` raises and replaces nothing.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        write(tmp)
        for path in tmp.iterdir():
            path.chmod(0o644)
        tmp.chmod(0o755)  # mkdtemp makes it 0700
        digest = content_hash(tmp)
        if expect is not None and digest != expect:
            raise BuildMismatch(digest)
        if out.is_dir() and read_marker(out) == digest and content_hash(out) == digest:
            return digest
        _swap(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    marker = out / f"{COMPLETE_MARKER}.tmp"
    marker.write_text(digest + "\n", encoding="utf-8")
    os.replace(marker, out / COMPLETE_MARKER)
    return digest


def ensure_checkpoint(out: Path, expect: str, build: Callable[[], str]) -> tuple[str, bool]:
    """(hash of `out`, whether it was built): left alone when it hashes to `expect`, else `build()`."""
    if out.is_dir() and content_hash(out) == expect:
        return expect, False
    return build(), True


def generated_main(
    record: Path, writer: Callable[[], Callable[[Path], None]], what: str, argv: list[str] | None = None
) -> int:
    """A generated model's recipe: check `--out` against `record`'s `built_sha256`, or build it with `writer()`.

    `writer` is called only when a build is due, so a check imports nothing heavy (torch and tokenizers load
    with the writer's module). Prints the folder with its hash and whether it was built; one line and exit 1
    when a build does not reproduce the recorded hash.
    """
    parser = argparse.ArgumentParser(description=f"Check, or build, {what}.")
    parser.add_argument("--out", type=Path, required=True, help="checkpoint directory to check or (re)build")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    expect = yaml.safe_load(record.read_text(encoding="utf-8"))["built_sha256"]
    try:
        digest, built = ensure_checkpoint(out, expect, lambda: build_into(out, writer(), expect=expect))
    except BuildMismatch as err:
        print(
            f"the build produced {err.digest}, but {record} records built_sha256 {expect}; if the cpu "
            "engine's pins changed on purpose, record the new hash",
            file=sys.stderr,
        )
        return 1
    print(f"{args.out} {digest} {'built' if built else 'intact'}")
    return 0


class BuildMismatch(Exception):
    """A build whose content hash is not the one recorded for it."""

    def __init__(self, digest: str) -> None:
        super().__init__(digest)
        self.digest = digest


def read_marker(directory: Path) -> str | None:
    """The hash recorded in DIR/.complete, or None."""
    marker = directory / COMPLETE_MARKER
    return (marker.read_text(encoding="utf-8").strip() or None) if marker.is_file() else None


def _swap(new: Path, out: Path) -> None:
    if not out.exists():
        new.rename(out)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    old.rmdir()
    out.rename(old)
    new.rename(out)
    shutil.rmtree(old)
