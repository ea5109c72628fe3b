"""End to end against the real CPU vLLM engine, booted once by the real `appliance serve` process.

The tests run in order on one appliance: data path, control API, lock, drain, crash restart,
and finally SIGTERM, after which no engine process may remain.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from appliance.control.documents import dump

from .appliance_process import ENGINE_TESTS, Served, running_appliance, serve_command
from .helpers import group_gone

pytestmark = ENGINE_TESTS
MODEL = "appliance/tiny-llama"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Run from an operator's directory holding a stray `re.py`: the engine must not import it."""
    tmp = tmp_path_factory.mktemp("served")
    workdir = tmp / "operator"
    workdir.mkdir()
    (workdir / "re.py").write_text('raise ImportError("the stray re.py in the working directory was imported")\n')
    with running_appliance(tmp, cwd=workdir) as served:
        yield served


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
    assert served.state().state == "ready"


def test_state_logs_and_metrics_describe_the_running_engine(served: Served) -> None:
    state = served.state()
    assert state.checkpoint == MODEL and state.engine == "cpu" and state.pid
    assert [e.to for e in state.events][:4] == ["starting", "loading", "warming", "ready"]
    assert served.token not in json.dumps(dump(state))
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
    assert served.state().state == "ready"


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
    os.kill(before.pid, signal.SIGKILL)
    served.wait_for("restarting", "starting", "loading", "warming", timeout=60)
    after = served.wait_for("ready")
    assert after.restarts == before.restarts + 1
    assert after.pid != before.pid
    assert group_gone(before.pid)


def test_sigterm_drains_and_leaves_no_engine_process(served: Served) -> None:
    pgid = served.state().pid
    served.proc.send_signal(signal.SIGTERM)
    assert served.proc.wait(timeout=120) == 143
    assert group_gone(pgid)
