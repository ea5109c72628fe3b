"""The engine's output: a rotating file on disk, a recent tail in memory, and live followers."""

from __future__ import annotations

import asyncio
import logging
import logging.handlers
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path

__all__ = ["EngineLog"]


class EngineLog:
    """Keeps every engine line in `<log_dir>/engine.log` (rotated) and the last `keep` in memory."""

    def __init__(self, log_dir: Path, *, keep: int = 2000, max_bytes: int = 10_000_000, backups: int = 5) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self.path = log_dir / "engine.log"
        self._tail: deque[str] = deque(maxlen=keep)
        self._written = 0
        self._followers: set[asyncio.Queue[str]] = set()
        self._handler = logging.handlers.RotatingFileHandler(self.path, maxBytes=max_bytes, backupCount=backups)
        self._handler.setFormatter(logging.Formatter("%(message)s"))

    @property
    def written(self) -> int:
        """Lines written so far: a reader that remembers it knows how many are new since."""
        return self._written

    def write(self, line: str) -> None:
        self._tail.append(line)
        self._written += 1
        self._handler.emit(logging.makeLogRecord({"msg": line, "levelno": logging.INFO}))
        for queue in self._followers:
            if not queue.full():  # a stalled follower loses lines rather than stalling the engine
                queue.put_nowait(line)

    def tail(self, n: int) -> list[str]:
        return list(self._tail)[-n:] if n > 0 else []

    async def follow(self) -> AsyncIterator[str]:
        """New lines as they arrive, until the consumer stops iterating."""
        queue: asyncio.Queue[str] = asyncio.Queue(maxsize=10_000)
        self._followers.add(queue)
        try:
            while True:
                yield await queue.get()
        finally:
            self._followers.discard(queue)

    def close(self) -> None:
        self._handler.close()
