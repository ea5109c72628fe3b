"""Set-up steps (environments, engine builds, the embedded model) run as child processes with a progress display.

On a terminal, rich draws one row per step: what it is doing (its latest output line), items or bytes
done of the total where its output says, and the time elapsed. Anywhere else (CI, a pipe) each step
writes one line when it starts and one when it ends. A step's whole output goes to its log file, so
a failure names the step and the log to read. Independent steps run concurrently.

Only the standard library and rich are imported: the Makefile runs this from its tools venv
(build/setup/run_steps.py) before the appliance's own venv exists.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Column

from appliance.errors import LaunchError

__all__ = ["PROGRESS_PREFIX", "SetupStep", "StepFailed", "StepFailure", "StepOutcome", "run_steps"]

PROGRESS_PREFIX = "progress:"
"""A step's own scripts report counts as `progress: DONE/TOTAL UNIT` lines (e.g. bytes of a download)."""
# What a line counts: the steps' own progress lines, then uv's summary lines (how many packages it
# resolved: the total; then how many it prepared and installed: done).
_COUNTS = (
    (re.compile(r"^progress: (?P<done>\d+)/(?P<total>\d+) (?P<unit>\w+)"), None),
    (re.compile(r"^Resolved (?P<total>\d+) packages?"), "packages"),
    (re.compile(r"^(?:Prepared|Installed|Audited) (?P<done>\d+) packages?"), "packages"),
)
_STATUS_WIDTH = 60


@dataclass(frozen=True, slots=True)
class SetupStep:
    name: str
    argv: tuple[str, ...]
    log: Path
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """The whole environment of the child (empty: this process's)."""


@dataclass(frozen=True, slots=True)
class StepOutcome:
    name: str
    seconds: float
    last_line: str


@dataclass(frozen=True, slots=True)
class StepFailure:
    name: str
    code: int
    seconds: float
    last_line: str
    log: Path

    def render(self) -> str:
        return (
            f"set-up step '{self.name}' failed with exit code {self.code} after {self.seconds:.0f} s: "
            f"{self.last_line} (log: {self.log})"
        )


class StepFailed(LaunchError):
    """Set-up steps exited non-zero; the message names each, its exit code, its last line and its log."""

    def __init__(self, failures: tuple[StepFailure, ...]) -> None:
        super().__init__("; ".join(failure.render() for failure in failures))
        self.failures = failures


@dataclass(slots=True)
class _Count:
    done: int | None = None
    total: int | None = None
    unit: str = ""

    def read(self, line: str) -> None:
        """Take the counts a line reports, if any."""
        for pattern, unit in _COUNTS:
            if match := pattern.match(line):
                found = match.groupdict()
                self.unit = found.get("unit") or unit or self.unit
                self.total = int(found["total"]) if found.get("total") else self.total
                self.done = int(found["done"]) if found.get("done") else self.done
                return

    def describe(self) -> str:
        if self.done is None and self.total is None:
            return ""
        if self.unit == "bytes":
            total = "?" if self.total is None else f"{self.total / 1e6:.1f}"
            return f"{(self.done or 0) / 1e6:.1f}/{total} MB"
        total = "?" if self.total is None else str(self.total)
        return f"{self.done or 0}/{total} {self.unit}".rstrip()


class _Display:
    """Rich rows on a terminal, else one line per step start and end."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self._progress: Progress | None = None
        self._tasks: dict[str, TaskID] = {}
        self._lock = threading.Lock()

    @contextmanager
    def shown(self) -> Iterator[None]:
        if not self._console.is_terminal:
            yield
            return
        columns = (
            SpinnerColumn(),
            TextColumn("[bold]{task.description:<24}"),
            BarColumn(bar_width=12),
            TextColumn("{task.fields[count]:>16}"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[status]}", markup=False, table_column=Column(no_wrap=True, overflow="ellipsis")),
        )
        with Progress(*columns, console=self._console, refresh_per_second=8) as self._progress:
            yield

    def started(self, name: str) -> None:
        if self._progress is None:
            self._print(f"[setup] {name}: started")
            return
        with self._lock:
            self._tasks[name] = self._progress.add_task(name, total=None, count="", status="")

    def updated(self, name: str, line: str, count: _Count) -> None:
        if self._progress is None:
            return
        total = count.total if count.done is not None else None
        self._progress.update(
            self._tasks[name],
            completed=count.done or 0,
            total=total,
            count=count.describe(),
            status=line[:_STATUS_WIDTH],
        )

    def ended(self, name: str, seconds: float, line: str, count: _Count, code: int) -> None:
        verdict = "done" if code == 0 else f"failed (exit {code})"
        if self._progress is not None:
            task = self._tasks[name]
            self._progress.update(task, description=f"{name} {verdict}", status=line[:_STATUS_WIDTH])
            self._progress.stop_task(task)
            if code == 0:
                self._progress.update(task, completed=1, total=1)
            return
        counted = f", {count.describe()}" if count.describe() else ""
        self._print(f"[setup] {name}: {verdict} in {seconds:.1f} s{counted}: {line}")

    def _print(self, text: str) -> None:
        with self._lock:
            self._console.print(text, markup=False, highlight=False, soft_wrap=True)


def run_steps(steps: Sequence[SetupStep], console: Console, *, concurrent: bool = True) -> tuple[StepOutcome, ...]:
    """Run the steps (all at once, or in order), showing their progress; raise StepFailed naming every failed one."""
    display = _Display(console)
    with display.shown():
        if concurrent and len(steps) > 1:
            with ThreadPoolExecutor(max_workers=len(steps)) as pool:
                results = list(pool.map(lambda step: _run(step, display), steps))
        else:
            results = []
            for step in steps:
                results.append(_run(step, display))
                if isinstance(results[-1], StepFailure):
                    break
    if failed := tuple(result for result in results if isinstance(result, StepFailure)):
        raise StepFailed(failed)
    return tuple(result for result in results if isinstance(result, StepOutcome))


def _run(step: SetupStep, display: _Display) -> StepOutcome | StepFailure:
    """Run one step into its log; how it went."""
    step.log.parent.mkdir(parents=True, exist_ok=True)
    display.started(step.name)
    started, count = time.monotonic(), _Count()
    with step.log.open("w", encoding="utf-8") as log:
        code = _follow(step, log.write, lambda line: display.updated(step.name, line, count), count)
    last = _last_line(step.log)
    seconds = time.monotonic() - started
    display.ended(step.name, seconds, last, count, code)
    if code != 0:
        return StepFailure(step.name, code, seconds, last, step.log)
    return StepOutcome(step.name, seconds, last)


def _follow(step: SetupStep, write: Callable[[str], object], show: Callable[[str], None], count: _Count) -> int:
    """Run the child, copying its output to the log line by line and showing each line; its exit code."""
    try:
        child = subprocess.Popen(
            step.argv,
            env=dict(step.env) or None,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
    except OSError as error:
        write(f"cannot run {step.argv[0]}: {error.strerror}\n")
        return 127
    with child:
        assert child.stdout is not None  # piped above
        status = ""
        for raw in child.stdout:
            write(raw)
            if line := raw.strip():
                count.read(line)
                status = status if line.startswith(PROGRESS_PREFIX) else line
                show(status)
    return child.returncode


def _last_line(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(encoding="utf-8", errors="replace").splitlines()]
    meaningful = [line for line in lines if line and not line.startswith(PROGRESS_PREFIX)]
    return meaningful[-1] if meaningful else "no output"
