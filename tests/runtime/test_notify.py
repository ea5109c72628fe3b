"""sd_notify from a real `appliance serve` on the real CPU engine, read from a real datagram socket
(the planned stop of testkit/sigterm_scenario.py, shared with test_reliability.py)."""

from __future__ import annotations

from testkit.sigterm_scenario import SigtermRun


def states(messages: list[str]) -> list[str]:
    return [m.split("STATUS=", 1)[1].split(":")[0] for m in messages]


def test_serve_notifies_ready_every_state_and_stopping(sigtermed: SigtermRun) -> None:
    assert states(sigtermed.booted) == ["starting", "loading", "warming", "ready"]
    assert sigtermed.booted[-1].startswith("READY=1\nSTATUS=ready") and sigtermed.ready_state.state == "ready"
    assert sigtermed.exit_code == 143
    assert sigtermed.stopped[0] == "STOPPING=1\nSTATUS=stopping"
    assert states(sigtermed.stopped[1:]) == ["draining", "stopped"]
    assert sigtermed.stopped[-1] == "STATUS=stopped: stopped"  # every request finished: nothing was cancelled
    assert sigtermed.engine_group_gone
