"""Two real appliances behind the real gateway (HAProxy): a drain and a restart under load lose no request.

The engine tier's two shared appliances (conftest) are the backends: the restartable one is drained
and restarted, the read-only one carries the load meanwhile. Both serve the tiny model on the CPU
engine, each on a core of its own, with `supervisor.deregister_s`, so readiness turns 503 before the
engine stops accepting; HAProxy checks each control API's /readyz. The restartable engine's port takes
an API key, which the clients send through the balancer to both.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from appliance.control.client import ApiError
from appliance.observe.engine_metrics import parse_metrics
from testkit.appliance_process import API_KEY, BODY, ClosedLoop, Served
from testkit.gateway_site import running_gateway

pytestmark = pytest.mark.engine  # the conftest gate skips it without the CPU engine
AUTH = {"Authorization": f"Bearer {API_KEY}"}


def served_requests(appliance: Served) -> float:
    """Requests its current engine has finished (its own counter, reset by a restart); 0 while its
    /metrics does not answer (a busy 2-core host, or a restart)."""
    try:
        with appliance.api() as api:
            sample = parse_metrics(api.engine_metrics(), 0.0)
    except ApiError:
        return 0.0
    return sample.counters.get("vllm:request_success", 0.0)


def wait_until(check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


@pytest.fixture
def gateway_pair(
    restartable_appliance: Served, shared_appliance: Served, tmp_path: Path
) -> Iterator[tuple[Served, Served, str, Path]]:
    a, b = restartable_appliance, shared_appliance
    site = tmp_path / "site.yaml"
    site.write_text(
        f"- {{name: a, url: {a.control_url}, token_env: A_TOKEN}}\n"
        f"- {{name: b, url: {b.control_url}, token_env: B_TOKEN}}\n"
    )
    tokens = {"A_TOKEN": a.token, "B_TOKEN": b.token}
    models = [str(BODY["model"])]
    with running_gateway(
        site, tmp_path / "gw", models=models, headers=AUTH, env=tokens, check_interval_ms=250, within_s=60
    ) as url:
        yield a, b, url, tmp_path / "gw" / "haproxy.cfg"


def test_a_drain_and_a_restart_behind_the_gateway_lose_no_request(
    gateway_pair: tuple[Served, Served, str, Path],
) -> None:
    a, b, url, config = gateway_pair
    assert "check addr 127.0.0.1" in config.read_text()
    before_a, before_b = served_requests(a), served_requests(b)  # both served other tests first
    with ClosedLoop(url, streams=4, headers=AUTH) as load:
        wait_until(lambda: served_requests(a) >= before_a + 5 and served_requests(b) >= before_b + 5)  # in rotation
        assert a.control("POST", "/drain").status_code == 202
        a.wait_for("stopped", timeout=300)  # the engine's worker took 110 s to exit after SIGKILL here once
        during = load.outcomes["ok"]
        wait_until(lambda: load.outcomes["ok"] >= during + 10)  # b alone carries the load
        assert a.control("POST", "/restart").status_code == 202
        a.wait_for("ready", timeout=900)  # a boot takes minutes on a loaded 2-core host
        wait_until(lambda: served_requests(a) >= 5, timeout=60)  # back in rotation, serving again
    assert load.failures() == {} and load.outcomes["ok"] >= 30, load.outcomes
