"""Two real appliances behind the real gateway (HAProxy): a drain and a restart under load lose no request.

The engine tier's two shared appliances (conftest) are the backends: the restartable one is drained
and restarted, the read-only one carries the load meanwhile. Both serve the tiny model on the CPU
engine, each on a core of its own, with `supervisor.deregister_s`, so readiness turns 503 before the
engine stops accepting; HAProxy checks each control API's /readyz. The restartable engine's port takes
an API key, which the clients send through the balancer to both.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from appliance.control.client import ApiError
from appliance.observe.engine_metrics import parse_metrics

from .appliance_process import API_KEY, Served
from .helpers import free_port

pytestmark = pytest.mark.engine  # the conftest gate skips it without the CPU engine
BODY = {"model": "appliance/tiny-llama", "prompt": "Hello", "max_tokens": 16, "ignore_eos": True}
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


class ClosedLoop:
    """`streams` clients, each sending the next request when its last one is answered."""

    def __init__(self, url: str, streams: int) -> None:
        self.url, self.outcomes, self._stop = url, Counter[str](), threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(streams)]

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=120.0, headers=AUTH) as http:
            while not self._stop.is_set():
                try:
                    reply = http.post("/v1/completions", json=BODY)
                    self.outcomes["ok" if reply.status_code == 200 else f"http {reply.status_code}"] += 1
                except httpx.HTTPError as error:
                    self.outcomes[type(error).__name__] += 1

    def __enter__(self) -> ClosedLoop:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=150)


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
    site.write_text(f"- {{name: a, url: {a.control_url}, token_env: A_TOKEN}}\n"
                    f"- {{name: b, url: {b.control_url}, token_env: B_TOKEN}}\n")  # fmt: skip
    listen = f"127.0.0.1:{free_port()}"
    env = os.environ | {"A_TOKEN": a.token, "B_TOKEN": b.token}
    gateway = subprocess.Popen(
        [str(Path(sys.executable).parent / "appliance"), "gateway", "--site-file", str(site), "--listen", listen,
         "--check-interval-ms", "250", "--out", str(tmp_path / "gw")], env=env,
    )  # fmt: skip
    try:
        url = f"http://{listen}"
        wait_until(lambda: _answers(url))
        yield a, b, url, tmp_path / "gw" / "haproxy.cfg"
    finally:
        gateway.terminate()
        gateway.wait(timeout=30)


def _answers(url: str) -> bool:
    try:
        return httpx.post(f"{url}/v1/completions", json=BODY, headers=AUTH, timeout=30).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_drain_and_a_restart_behind_the_gateway_lose_no_request(
    gateway_pair: tuple[Served, Served, str, Path],
) -> None:
    a, b, url, config = gateway_pair
    assert "check addr 127.0.0.1" in config.read_text()
    before_a, before_b = served_requests(a), served_requests(b)  # both served other tests first
    with ClosedLoop(url, streams=4) as load:
        wait_until(lambda: served_requests(a) >= before_a + 5 and served_requests(b) >= before_b + 5)  # in rotation
        assert a.control("POST", "/drain").status_code == 202
        a.wait_for("stopped", timeout=300)  # the engine's worker took 110 s to exit after SIGKILL here once
        during = load.outcomes["ok"]
        wait_until(lambda: load.outcomes["ok"] >= during + 10)  # b alone carries the load
        assert a.control("POST", "/restart").status_code == 202
        a.wait_for("ready", timeout=900)  # a boot takes minutes on a loaded 2-core host
        wait_until(lambda: served_requests(a) >= 5, timeout=60)  # back in rotation, serving again
    failures = {kind: n for kind, n in load.outcomes.items() if kind != "ok"}
    assert failures == {} and load.outcomes["ok"] >= 30, load.outcomes
