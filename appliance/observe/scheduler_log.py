"""What the engine's log says about its scheduler: prefill vs decode work per step.

/metrics has only the tokens-per-step histogram. vLLM's log adds, per engine, a periodic stats
line (every VLLM_LOG_STATS_INTERVAL seconds while busy) and, with
`--enable-logging-iteration-details` in engine.extra_args, one line per step splitting it into
context (prefill) and generation (decode) work. Formats: vllm/v1/metrics/loggers.py (0.32.0).
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, replace

__all__ = ["DecodeStalls", "SchedulerLog", "SchedulerView", "StepLine"]

_STATS = re.compile(r"(?:Engine \d+|\d+ Engines Aggregated): Avg prompt throughput: [\d.]+ tokens/s, .*")
_STEP = re.compile(
    r"Engine (?P<engine>\d+): Iteration\((?P<index>\d+)\): (?P<ctx_reqs>\d+) context requests, "
    r"(?P<ctx_tokens>\d+) context tokens, (?P<gen_reqs>\d+) generation requests, (?P<gen_tokens>\d+) generation "
    r"tokens, iteration elapsed time: (?P<ms>[\d.]+) ms"
)


@dataclass(frozen=True, slots=True)
class StepLine:
    engine: int
    index: int
    context_requests: int
    context_tokens: int
    generation_requests: int
    generation_tokens: int
    elapsed_ms: float


@dataclass(frozen=True, slots=True)
class SchedulerView:
    stats_line: str | None
    """The latest periodic stats line, from `Engine NNN:` on."""
    steps: int
    """Logged steps summarised below (the most recent ones)."""
    prefill_steps: int
    """Steps that computed any prompt (context) tokens, alone or mixed with decode."""
    context_tokens_per_step: float
    generation_tokens_per_step: float
    prefill_step_ms: float | None
    decode_step_ms: float | None
    """Mean duration of decode-only steps."""


@dataclass(frozen=True, slots=True)
class DecodeStalls:
    """Totals since the appliance started reading the log: the Prometheus counters of decode stalls.

    A stall is a prefill-only step between two steps that decoded on the same engine: running
    streams waited for it and got no token (phase-exclusive scheduling). Decode time is the time of
    every step while streams were decoding, stalls included, so stall time over it is the stalls'
    share of inter-token time.
    """

    stalls: int
    stall_s: float
    decode_s: float


class SchedulerLog:
    """Keeps the last stats line and the last `keep` step lines of an engine log stream."""

    def __init__(self, keep: int = 500) -> None:
        self._stats: str | None = None
        self._steps: deque[StepLine] = deque(maxlen=keep)
        self._held: dict[int, list[float]] = {}  # per engine: prefill-only steps (s) since its last decode
        self._decoding: set[int] = set()  # engines whose latest step decoded
        self._stalls = DecodeStalls(0, 0.0, 0.0)

    def feed(self, line: str) -> None:
        if (step := _STEP.search(line)) is not None:
            g = step.groupdict()
            self._count(
                StepLine(
                    int(g["engine"]),
                    int(g["index"]),
                    int(g["ctx_reqs"]),
                    int(g["ctx_tokens"]),
                    int(g["gen_reqs"]),
                    int(g["gen_tokens"]),
                    float(g["ms"]),
                )
            )
        elif (stats := _STATS.search(line)) is not None:
            self._stats = stats.group(0)

    def view(self) -> SchedulerView:
        steps = list(self._steps)
        prefill = [s for s in steps if s.context_tokens]
        decode = [s for s in steps if not s.context_tokens and s.generation_tokens]
        count = len(steps) or 1
        return SchedulerView(
            stats_line=self._stats,
            steps=len(steps),
            prefill_steps=len(prefill),
            context_tokens_per_step=sum(s.context_tokens for s in steps) / count,
            generation_tokens_per_step=sum(s.generation_tokens for s in steps) / count,
            prefill_step_ms=_mean([s.elapsed_ms for s in prefill]),
            decode_step_ms=_mean([s.elapsed_ms for s in decode]),
        )

    def stalls(self) -> DecodeStalls:
        return self._stalls

    def _count(self, step: StepLine) -> None:
        self._steps.append(step)
        engine, s = step.engine, self._stalls
        if step.generation_requests:
            held = self._held.pop(engine, [])  # decoding again: the prefills before this step held it back
            if held:
                s = DecodeStalls(s.stalls + 1, s.stall_s + sum(held), s.decode_s + sum(held))
            self._stalls = replace(s, decode_s=s.decode_s + step.elapsed_ms / 1000)
            self._decoding.add(engine)
        elif step.context_tokens and engine in self._decoding:
            self._held.setdefault(engine, []).append(step.elapsed_ms / 1000)
        else:
            self._held.pop(engine, None)
            self._decoding.discard(engine)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
