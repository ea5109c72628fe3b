"""sha256 of files on disk, at the speed of `sha256sum`: large reads into one buffer, files hashed side by side.

hashlib releases the GIL while it hashes a large buffer, so threads hash several files at once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

__all__ = ["hash_into", "sha256_file", "sha256_files"]

READ_BYTES = 8 << 20


def hash_into(hasher: hashlib._Hash, path: Path) -> int:
    """Feed the file's bytes to `hasher`; how many there were."""
    buffer = bytearray(READ_BYTES)
    view = memoryview(buffer)
    total = 0
    with path.open("rb", buffering=0) as file:
        while count := file.readinto(buffer):
            hasher.update(view[:count])
            total += count
    return total


def sha256_file(path: Path) -> str:
    hasher = hashlib.sha256()
    hash_into(hasher, path)
    return hasher.hexdigest()


def sha256_files(paths: Sequence[Path], jobs: int = 4) -> list[str]:
    """Each file's sha256, in the order given, `jobs` files at a time."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(sha256_file, paths))
