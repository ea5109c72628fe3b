"""End to end against the real CPU vLLM engine, booted once by the real `appliance serve` process.

The tests run in order on one appliance: data path, control API, lock, drain, crash restart,
and finally SIGTERM, after which no engine process may remain.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from .helpers import free_port, process_group_alive

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(
        not (ROOT / ".engines" / "cpu" / ".appliance-engine-ok").is_file(),
        reason="the CPU engine environment is not built (make engine-cpu)",
    ),
]
MODEL = "appliance/tiny-llama"


@dataclass
class Served:
    proc: subprocess.Popen[bytes]
    engine_url: str
    control_url: str
    token: str
    cache: Path
    output: Path

    def control(self, method: str, path: str, token: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token if token is None else token}"}
        return httpx.request(method, f"{self.control_url}{path}", headers=headers, timeout=30.0)

    def state(self) -> dict[str, Any]:
        document: dict[str, Any] = self.control("GET", "/state").json()
        return document

    def wait_for(self, *states: str, timeout: float = 300.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"appliance exited {self.proc.returncode}:\n{self.output.read_text()[-3000:]}")
            try:
                state = self.state()
            except httpx.HTTPError:
                state = {"state": "unreachable"}
            if state["state"] in states:
                return state
            time.sleep(0.5)
        raise AssertionError(f"never reached {states}; last state {state['state']}")

    def client(self) -> OpenAI:
        return OpenAI(base_url=f"{self.engine_url}/v1", api_key="unused", max_retries=0, timeout=120.0)


def serve_command(engine_port: int, control_port: int) -> list[str]:
    return [sys.executable, "-m", "appliance.cli", "serve", f"serving.port={engine_port}",
            f"control.port={control_port}", "supervisor.backoff_initial_s=0.5"]  # fmt: skip


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("served")
    engine_port, control_port = free_port(), free_port()
    token = secrets.token_urlsafe(16)
    env = os.environ | {"APPLIANCE_TOKEN": token, "APPLIANCE_CACHE_DIR": str(tmp / "cache")}
    output = tmp / "serve.out"
    with output.open("wb") as sink:
        proc = subprocess.Popen(serve_command(engine_port, control_port), env=env, stdout=sink, stderr=sink)
    served = Served(proc, f"http://127.0.0.1:{engine_port}", f"http://127.0.0.1:{control_port}", token,
                    tmp / "cache", output)  # fmt: skip
    try:
        served.wait_for("ready")
        yield served
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_completions_chat_and_streaming_through_the_openai_client(served: Served) -> None:
    client = served.client()
    completion = client.completions.create(model=MODEL, prompt="The weather", max_tokens=8)
    assert completion.choices[0].text and completion.usage is not None and completion.usage.completion_tokens == 8
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hello"}], max_tokens=6)
    assert chat.choices[0].message.content is not None
    chunks = list(client.completions.create(model=MODEL, prompt="Hi", max_tokens=5, stream=True))
    assert sum(1 for c in chunks if c.choices and c.choices[0].text) >= 1


def test_the_engine_metrics_page_is_scraped(served: Served) -> None:
    page = httpx.get(f"{served.engine_url}/metrics", timeout=10.0).text
    assert "vllm:num_requests_running" in page
    assert "vllm:prompt_tokens_total" in page


def test_the_control_api_needs_the_token(served: Served) -> None:
    assert httpx.get(f"{served.control_url}/livez").status_code == 200
    for method, path in (("GET", "/state"), ("GET", "/metrics"), ("GET", "/logs"), ("POST", "/drain")):
        assert httpx.request(method, f"{served.control_url}{path}").status_code == 401
        assert served.control(method, path, token="wrong").status_code == 401
    assert served.state()["state"] == "ready"


def test_state_logs_and_metrics_describe_the_running_engine(served: Served) -> None:
    state = served.state()
    assert state["checkpoint"] == MODEL and state["engine"] == "cpu" and state["pid"]
    assert [e["to"] for e in state["events"]][:4] == ["starting", "loading", "warming", "ready"]
    assert served.token not in json.dumps(state)
    logs = served.control("GET", "/logs?tail=500").text
    assert "Application startup complete." in logs
    metrics = served.control("GET", "/metrics").text
    assert "appliance_engine_ready 1.0" in metrics
    assert 'appliance_boot_phase_seconds{phase="loading"}' in metrics


def test_status_prints_the_state_for_scripts(served: Served) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "appliance.cli", "status", "--url", served.control_url, "--json"],
        env=os.environ | {"APPLIANCE_TOKEN": served.token}, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["state"] == "ready"


def test_a_second_serve_on_the_same_ports_is_refused_and_the_first_keeps_serving(served: Served) -> None:
    engine_port = served.engine_url.rsplit(":", 1)[1]
    control_port = served.control_url.rsplit(":", 1)[1]
    env = os.environ | {"APPLIANCE_TOKEN": "other", "APPLIANCE_CACHE_DIR": str(served.cache)}
    done = subprocess.run(serve_command(int(engine_port), int(control_port)), env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 3
    assert "already held by another appliance" in done.stderr and "Traceback" not in done.stderr
    assert served.state()["state"] == "ready"


def test_drain_lets_in_flight_requests_finish(served: Served) -> None:
    client = served.client()

    def generate(i: int) -> tuple[str | None, int]:
        stream = client.completions.create(
            model=MODEL, prompt=f"Request {i}", max_tokens=200, stream=True, extra_body={"ignore_eos": True}
        )
        finish, pieces = None, 0
        for chunk in stream:
            pieces += 1
            finish = chunk.choices[0].finish_reason or finish if chunk.choices else finish
        return finish, pieces

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(generate, i) for i in range(8)]
        time.sleep(1.0)
        assert served.control("POST", "/drain").status_code == 202
        results = [f.result(timeout=120) for f in futures]
    assert all(finish == "length" for finish, _ in results), results
    served.wait_for("stopped", timeout=120)
    assert served.control("POST", "/restart").status_code == 202
    served.wait_for("ready")


def test_kill_9_of_the_engine_restarts_it(served: Served) -> None:
    before = served.state()
    os.kill(before["pid"], signal.SIGKILL)
    served.wait_for("restarting", "starting", "loading", "warming", timeout=60)
    after = served.wait_for("ready")
    assert after["restarts"] == before["restarts"] + 1
    assert after["pid"] != before["pid"]
    assert not process_group_alive(before["pid"])


def test_sigterm_drains_and_leaves_no_engine_process(served: Served) -> None:
    pgid = served.state()["pid"]
    served.proc.send_signal(signal.SIGTERM)
    assert served.proc.wait(timeout=120) == 143
    assert not process_group_alive(pgid)
