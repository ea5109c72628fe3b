"""The soak's short form (bench/soak.py, `make soak` for 10 minutes): a minute of the mixed workload on the
restartable appliance, the console's poller and `appliance status` attached, one engine restart.

It asserts the soak's targets, not its figures: no request lost outside the restart window, the appliance's
RSS and fds within the soak's bounds, every poll and status call answered, the engine ready again (which leaves the
appliance ready for the tests after this one).
"""

from __future__ import annotations

import pytest

from appliance.control.client import Target
from bench.soak import soak
from testkit.appliance_process import API_KEY, KEY_ENV, Served

DURATION_S = 60.0
RESTART_AT_S = 15.0
"""Early, so requests are sent before the restart, and after it when the engine is back within the minute."""
LOAD = ("workload.rate_per_s=1", f"serving.api_key_env={KEY_ENV}")
"""About 60 requests, one a second: the tiny model's engine is idle most of the time (its port takes `API_KEY`)."""


async def test_a_minute_of_mixed_load_with_an_engine_restart_loses_no_request_outside_it(
    restartable_appliance: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = restartable_appliance
    monkeypatch.setenv(KEY_ENV, API_KEY)
    target = Target("soak", served.control_url, served.token)
    report, _ = await soak(
        target, served.proc.pid, served.engine_url, duration_s=DURATION_S, restart_at=RESTART_AT_S, overrides=LOAD
    )
    figures = "\n".join(report.lines())
    print(figures)
    assert report.problems() == (), figures
    assert report.restart is not None, figures
    assert report.outcomes["before"].get("ok", 0) > 0, figures
