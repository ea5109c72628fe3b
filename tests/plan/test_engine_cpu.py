"""End to end against the real CPU vLLM engine on the session's read-only appliance (conftest's
`shared_appliance`, a real `appliance serve` run from an operator's directory holding a stray `re.py`).

Data path, control API, `status` and the port lock; the drain, crash and SIGTERM cases are in
tests/tui/test_console_live.py and tests/runtime/test_reliability.py.
"""

from __future__ import annotations

import json
import os
import subprocess

import httpx

from appliance.control.documents import dump
from testkit.appliance_process import MODEL, Served, serve_command
from testkit.helpers import Cli


def test_completions_chat_and_streaming_through_the_openai_client(shared_appliance: Served) -> None:
    client = shared_appliance.client()
    completion = client.completions.create(model=MODEL, prompt="The weather", max_tokens=8)
    assert completion.choices[0].text and completion.usage is not None and completion.usage.completion_tokens == 8
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hello"}], max_tokens=6)
    assert chat.choices[0].message.content is not None
    chunks = list(client.completions.create(model=MODEL, prompt="Hi", max_tokens=5, stream=True))
    assert sum(1 for c in chunks if c.choices and c.choices[0].text) >= 1


def test_the_engine_metrics_page_is_scraped(shared_appliance: Served) -> None:
    page = httpx.get(f"{shared_appliance.engine_url}/metrics", timeout=10.0).text
    assert "vllm:num_requests_running" in page
    assert "vllm:prompt_tokens_total" in page


def test_the_control_api_needs_the_token(shared_appliance: Served) -> None:
    served = shared_appliance
    assert httpx.get(f"{served.control_url}/livez").status_code == 200
    for method, path in (("GET", "/state"), ("GET", "/metrics"), ("GET", "/logs"), ("POST", "/drain")):
        assert httpx.request(method, f"{served.control_url}{path}").status_code == 401
        assert served.control(method, path, token="wrong").status_code == 401
    assert served.state().state == "ready"


def test_state_logs_and_metrics_describe_the_running_engine(shared_appliance: Served) -> None:
    served = shared_appliance
    state = served.state()
    assert state.checkpoint == MODEL and state.engine == "cpu" and state.pid
    assert [e.to for e in state.events][:4] == ["starting", "loading", "warming", "ready"]
    assert served.token not in json.dumps(dump(state))
    assert "Application startup complete." in served.boot_log
    assert served.control("GET", "/logs?tail=5").text.count("\n") == 5
    metrics = served.control("GET", "/metrics").text
    assert "appliance_engine_ready 1.0" in metrics
    assert 'appliance_boot_phase_seconds{phase="loading"}' in metrics


def test_status_prints_the_state_and_the_load_summary_for_scripts(shared_appliance: Served, cli: Cli) -> None:
    done = cli(
        "status", "--url", shared_appliance.control_url, "--json", env={"APPLIANCE_TOKEN": shared_appliance.token}
    )
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["state"] == "ready"
    load = status["load"]
    assert load["window_s"] is None and load["running"] == 0 and load["missing"] == []


def test_a_second_serve_on_the_same_ports_is_refused_and_the_first_keeps_serving(shared_appliance: Served) -> None:
    served = shared_appliance
    engine_port = served.engine_url.rsplit(":", 1)[1]
    control_port = served.control_url.rsplit(":", 1)[1]
    env = os.environ | {"APPLIANCE_TOKEN": "other", "APPLIANCE_CACHE_DIR": str(served.cache)}
    done = subprocess.run(
        serve_command(int(engine_port), int(control_port)), env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 3 and "Traceback" not in done.stderr  # a port held: a fact of this host
    # Refused before the locks, as validate would refuse it: the port's line names the appliance that holds it.
    held = f"error[port-in-use] serving.port: 127.0.0.1:{engine_port} cannot be bound: in use, held by an appliance"
    assert held in done.stderr
    assert served.state().state == "ready"


def test_state_shows_what_the_engine_runs_beside_what_the_plan_asked(shared_appliance: Served) -> None:
    with shared_appliance.api() as api:
        alerts = api.load().alerts  # /load hands the appliance the /metrics page it reads capabilities from
        caps = api.state().capabilities
    assert caps is not None and caps.effective is not None  # read from this engine's own log and metrics
    assert caps.effective["max_model_len"] == caps.requested["max_model_len"] == 2048
    assert caps.effective["kv_cache_memory_bytes"] and "kv_cache_memory_bytes" in caps.sources
    assert bool(caps.differences) == any("capabilities differ" in a for a in alerts)


def test_status_says_the_engine_runs_as_planned_or_names_each_difference(shared_appliance: Served, cli: Cli) -> None:
    with shared_appliance.api() as api:
        api.load()  # hands the appliance the /metrics page it reads capabilities from
        caps = api.state().capabilities
    done = cli("status", "--url", shared_appliance.control_url, env={"APPLIANCE_TOKEN": shared_appliance.token})
    assert done.returncode == 0, done.stderr
    assert caps is not None and caps.effective is not None
    shown = [line for line in done.stdout.splitlines() if line.startswith(("capabilities:", "differs from the plan:"))]
    if caps.differences:
        assert shown == [f"differs from the plan: {d}" for d in caps.differences]
    else:  # the engine's own config line states max_model_len and prefix caching, as the plan asks
        assert len(shown) == 1 and shown[0].startswith("capabilities: as planned (") and "max_model_len" in shown[0]
