"""A drain that cannot finish says so: a real `appliance serve` (model=tiny, CPU engine) gets SIGTERM with
50 streaming requests in flight whose answers outlast a 3 s drain deadline (testkit/sigterm_scenario.py).

The appliance's count comes from the engine's own gauges while it drains; the clients' count from the
streams that broke off without a finish reason. They must agree, in its log and in what it tells systemd.
"""

from __future__ import annotations

from pathlib import Path

from testkit.sigterm_scenario import STREAMS, sigterm_under_load

DEADLINE_S = 3
ANSWER_TOKENS = 1500  # the tiny model at 50 streams on 2 cores needs minutes for these: none finishes in 3 s


def test_a_drain_deadline_that_ends_requests_in_flight_says_how_many_it_cancelled(
    cpu_engine: Path, tmp_path: Path
) -> None:
    run = sigterm_under_load(tmp_path, f"supervisor.shutdown_timeout_s={DEADLINE_S}", max_tokens=ANSWER_TOKENS)
    cancelled = sum(finish != "length" for finish in run.finishes)
    assert cancelled == STREAMS, run.finishes  # every one was in the engine at SIGTERM, none could finish
    said = f"the drain deadline ({DEADLINE_S}s) cancelled {cancelled} requests still in flight"
    assert said in run.output, run.output[-3000:]
    assert f"WARNING appliance.runtime.supervisor: engine: {said}" in run.output
    assert run.stopped[-1] == f"STATUS=stopped: stopped; {said}"  # systemd's status line, as `systemctl status` shows
    assert run.exit_code == 143 and run.engine_group_gone
