"""What the engine's log says about its scheduler: prefill vs decode work per step.

/metrics has only the tokens-per-step histogram. vLLM's log adds, per engine, a periodic stats
line (every VLLM_LOG_STATS_INTERVAL seconds while busy) and, with
`--enable-logging-iteration-details` in engine.extra_args, one line per step splitting it into
context (prefill) and generation (decode) work. Formats: vllm/v1/metrics/loggers.py (0.32.0).
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

__all__ = ["SchedulerLog", "SchedulerView", "StepLine"]

_STATS = re.compile(
    r"(?:Engine \d+|\d+ Engines Aggregated): Avg prompt throughput: [\d.]+ tokens/s, .*"
)  # fmt: skip
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


class SchedulerLog:
    """Keeps the last stats line and the last `keep` step lines of an engine log stream."""

    def __init__(self, keep: int = 500) -> None:
        self._stats: str | None = None
        self._steps: deque[StepLine] = deque(maxlen=keep)

    def feed(self, line: str) -> None:
        if (step := _STEP.search(line)) is not None:
            g = step.groupdict()
            self._steps.append(
                StepLine(int(g["engine"]), int(g["index"]), int(g["ctx_reqs"]), int(g["ctx_tokens"]),
                         int(g["gen_reqs"]), int(g["gen_tokens"]), float(g["ms"]))
            )  # fmt: skip
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


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
