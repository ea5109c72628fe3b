"""The fault ladder: engine log lines that mean a boot cannot succeed, classified into a cause and a next step.

The rules are data (`build/engine-faults.yaml`), each with the public record or the recorded log it
came from. The supervisor checks every boot line against them and fails the boot at the first
match instead of waiting out the readiness budget: on Tenstorrent hosts device faults surface
seconds into a boot that may otherwise take an hour.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from pydantic import ConfigDict, TypeAdapter

from appliance.data_files import load_data_file
from appliance.resources import build_dir
from appliance.runtime.engine_log import EngineLog

RESET_TIMEOUT_S = 600.0
"""A board reset that takes longer than this has failed (tt-smi -r can hang on some hosts)."""

__all__ = ["RESET_TIMEOUT_S", "Fault", "FaultLadder", "FaultRule", "load_fault_ladder", "run_reset"]


@dataclass(frozen=True, slots=True)
class FaultRule:
    __pydantic_config__ = ConfigDict(extra="forbid")

    id: str
    pattern: str
    """A regular expression searched in each line; its named groups fill {placeholders}."""
    cause: str
    next_step: str
    device: bool
    """A device fault: a board reset may clear it (`supervisor.on_device_fault: reset_once`)."""
    source: str


@dataclass(frozen=True, slots=True)
class _Rules:
    __pydantic_config__ = ConfigDict(extra="forbid")

    rules: tuple[FaultRule, ...]


@dataclass(frozen=True, slots=True)
class Fault:
    """One classified line: what went wrong and what the operator does next."""

    rule: str
    cause: str
    next_step: str
    device: bool
    line: str

    def render(self) -> str:
        return f"{self.cause} [{self.rule}]; next: {self.next_step}"


class FaultLadder:
    """The rules in order; the first whose pattern matches a line classifies it."""

    def __init__(self, rules: tuple[FaultRule, ...]) -> None:
        self.rules = rules
        self._compiled = tuple((rule, re.compile(rule.pattern)) for rule in rules)

    def classify(self, line: str) -> Fault | None:
        for rule, pattern in self._compiled:
            if match := pattern.search(line):
                values = match.groupdict(default="?")
                return Fault(
                    rule.id, rule.cause.format(**values), rule.next_step.format(**values), rule.device, line.strip()
                )
        return None


_ADAPTER: TypeAdapter[_Rules] = TypeAdapter(_Rules)


@cache
def load_fault_ladder(path: Path | None = None) -> FaultLadder:
    """The ladder in `path` (default build/engine-faults.yaml); a bad file is a ConfigError naming it."""
    data = load_data_file(path or build_dir() / "engine-faults.yaml", _ADAPTER, "fault-ladder", "fault ladder")
    return FaultLadder(data.rules)


async def run_reset(argv: Sequence[str], log: EngineLog) -> str | None:
    """Run the board reset, its output into the engine log; None when it succeeded, else why not."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
    except OSError as err:
        return f"reset command {argv[0]!r} could not run: {err.strerror}"
    try:
        output, _ = await asyncio.wait_for(proc.communicate(), RESET_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return f"reset command {' '.join(argv)} did not finish within {RESET_TIMEOUT_S:.0f}s"
    for line in output.decode(errors="replace").splitlines():
        log.write(f"[reset] {line}")
    return None if proc.returncode == 0 else f"reset command {' '.join(argv)} exited with code {proc.returncode}"
