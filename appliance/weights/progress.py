"""How a fetch shows its progress: rich rows on a terminal, one plain line per finished file elsewhere.

On a terminal each file being downloaded has a row (bytes, rate, time left) under a row for the whole revision;
a finished file leaves its row for a line above them. In CI or a pipe only those lines are written.
The fetch calls these methods from its download threads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Protocol

from rich.console import Console
from rich.filesize import decimal
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

__all__ = ["FetchDisplay", "FetchProgress", "QuietProgress"]


class FetchProgress(Protocol):
    def shown(self, total: int, done: int) -> AbstractContextManager[None]:
        """The display for the whole fetch: `total` bytes, of which `done` were already staged."""
        ...

    def started(self, path: str, size: int, done: int) -> None: ...

    def advanced(self, path: str, count: int) -> None: ...

    def finished(self, path: str, size: int, transferred: int, seconds: float) -> None: ...


class QuietProgress:
    """No display (tests, or a caller that reports the result itself)."""

    def shown(self, total: int, done: int) -> AbstractContextManager[None]:
        return nullcontext()

    def started(self, path: str, size: int, done: int) -> None:
        return None

    def advanced(self, path: str, count: int) -> None:
        return None

    def finished(self, path: str, size: int, transferred: int, seconds: float) -> None:
        return None


class FetchDisplay:
    """The display on `console` (the CLI passes stderr's)."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self._progress: Progress | None = None
        self._total: TaskID | None = None
        self._tasks: dict[str, TaskID] = {}
        self._lock = threading.Lock()

    @contextmanager
    def shown(self, total: int, done: int) -> Iterator[None]:
        if not self._console.is_terminal:
            yield
            return
        columns = (
            TextColumn("{task.description:<32.32}", markup=False),
            BarColumn(bar_width=20),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
        )
        with Progress(*columns, console=self._console, refresh_per_second=8) as self._progress:
            self._total = self._progress.add_task("all files", total=total, completed=done)
            yield

    def started(self, path: str, size: int, done: int) -> None:
        if self._progress is None:
            return
        with self._lock:
            if path in self._tasks:  # a retry: the same row starts again
                self._progress.reset(self._tasks[path], total=size, completed=done)
            else:
                self._tasks[path] = self._progress.add_task(path, total=size, completed=done)

    def advanced(self, path: str, count: int) -> None:
        if self._progress is not None and self._total is not None:
            self._progress.advance(self._tasks[path], count)
            self._progress.advance(self._total, count)

    def finished(self, path: str, size: int, transferred: int, seconds: float) -> None:
        rate = f"{decimal(int(transferred / seconds))}/s" if transferred and seconds > 0 else "already staged"
        line = f"[fetch] {path}: {decimal(size)} ({rate})"
        with self._lock:
            if self._progress is not None:
                self._progress.remove_task(self._tasks.pop(path))
            self._console.print(line, markup=False, highlight=False, soft_wrap=True)
