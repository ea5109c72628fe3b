"""What the control API adds for the console (/host, /engine/metrics, limits and config in /state),
and the site file and alerts the fleet view is built from."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from appliance.control.api import create_app
from appliance.control.site_file import load_site_file, target
from appliance.errors import ConfigError
from appliance.observe.alerts import alerts
from appliance.observe.engine_metrics import parse_metrics
from appliance.observe.metrics_window import summarize
from appliance.runtime.engine_log import EngineLog
from appliance.runtime.lifecycle import EngineState
from appliance.runtime.supervisor import EngineSupervisor
from testkit.helpers import fake_plan, free_port, wait_for
from testkit.recorded_appliance import PAGES

TOKEN = "console-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def control(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """The real control API of a real supervisor running testkit/fake_engine.py."""
    log = EngineLog(tmp_path / "logs")
    sup = EngineSupervisor(fake_plan(tmp_path), log)
    run = asyncio.create_task(sup.run())
    transport = httpx.ASGITransport(app=create_app(sup, TOKEN))
    async with httpx.AsyncClient(transport=transport, base_url="http://control") as client:
        await wait_for(sup, EngineState.READY)
        yield client
        sup.request("stop")
        await run
    log.close()


async def test_host_reports_the_boards_and_the_cpu_memory_and_engine_rss(control: httpx.AsyncClient) -> None:
    assert (await control.get("/host")).status_code == 401
    await control.get("/host", headers=AUTH)
    await asyncio.sleep(0.5)  # CPU busy is a delta between two samples: let the kernel's counters move
    host = (await control.get("/host", headers=AUTH)).json()
    assert host["devices"]["boards"] == []  # no Tenstorrent device on this machine
    usage = host["usage"]
    assert 0.0 <= usage["cpu_busy"] <= 1.0 and usage["cores"] == os.cpu_count()
    assert 0 < usage["memory_available_bytes"] < usage["memory_total_bytes"]
    assert usage["engine_rss_bytes"] > 1_000_000  # the fake engine's python process


async def test_engine_metrics_are_relayed_with_the_engines_own_status(control: httpx.AsyncClient) -> None:
    assert (await control.get("/engine/metrics")).status_code == 401
    # testkit/fake_engine.py has no /metrics: the relay passes its 404 on rather than inventing a page.
    assert (await control.get("/engine/metrics", headers=AUTH)).status_code == 404


async def test_engine_metrics_answer_502_when_the_engine_is_down(tmp_path: Path) -> None:
    plan = fake_plan(tmp_path)
    gone = f"http://127.0.0.1:{free_port()}"
    sup = EngineSupervisor(replace(plan, base_url=gone), EngineLog(tmp_path / "logs"))
    transport = httpx.ASGITransport(app=create_app(sup, TOKEN))
    async with httpx.AsyncClient(transport=transport, base_url="http://control") as client:
        reply = await client.get("/engine/metrics", headers=AUTH)
    assert reply.status_code == 502 and "unreachable" in reply.json()["error"]
    sup.log.close()


async def test_state_carries_the_validated_limits_and_the_resolved_config(control: httpx.AsyncClient) -> None:
    state = (await control.get("/state", headers=AUTH)).json()
    assert state["max_concurrency"] == 16 and state["max_context"] == 2048
    # The composed config, as conf/ set it (fake_plan shortens only the plan's own copy of the timings).
    assert state["config"]["supervisor.shutdown_timeout_s"] == 60.0
    assert set(state["config"]) >= set(state["provenance"]) - {"tt"}
    assert TOKEN not in json.dumps(state)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "site.yaml"
    path.write_text(text)
    return path


def test_a_site_file_lists_appliances_and_names_their_token_variables(tmp_path: Path) -> None:
    path = write(tmp_path, "- {name: a, url: 'http://10.0.0.1:8100/'}\n- {name: b, url: http://b:8100, token_env: B}\n")
    entries = load_site_file(path)
    assert [(e.name, e.token_env) for e in entries] == [("a", "APPLIANCE_TOKEN"), ("b", "B")]
    b = target(entries[1], {"B": "secret-b"})
    assert b.url == "http://b:8100" and b.token == "secret-b" and "secret-b" not in repr(b)


@pytest.mark.parametrize(
    ("text", "where", "says"),
    [
        ("- {name: a}\n", "site.yaml:0.url", "field required"),
        ("- {name: a, url: u, token: t}\n", "site.yaml:0.token", "unexpected keyword argument"),
        ("- {name: a, url: u\n", "site.yaml", "not valid YAML"),
        ("[]\n", "site.yaml", "lists no appliances"),
        ("- {name: a, url: u}\n- {name: a, url: v}\n", "site.yaml:name", "names must be unique"),
    ],
)
def test_a_bad_site_file_is_refused_naming_the_file_and_key(tmp_path: Path, text: str, where: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as caught:
        load_site_file(write(tmp_path, text))
    assert caught.value.problems[0].key.endswith(where)


def test_the_console_command_reports_a_bad_site_file_in_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, "- {name: a}\n")
    done = subprocess.run(
        [sys.executable, "-m", "appliance.cli", "console", "--site-file", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and "site.yaml:0.url" in done.stderr


def test_alerts_follow_the_appliances_own_envelope_and_slo() -> None:
    busy = summarize([parse_metrics(PAGES[0], 0.0), parse_metrics(PAGES[4], 9.5)])  # 8 running in the capture
    assert busy.running == 8
    assert "at max concurrency" in alerts("ready", busy, max_concurrency=8, slo_ttft_ms=None)
    assert alerts("ready", busy, max_concurrency=16, slo_ttft_ms=None) == ()
    assert "TTFT p99 over 10 ms" in alerts("ready", busy, max_concurrency=16, slo_ttft_ms=10)
    assert alerts("failed", None, max_concurrency=16, slo_ttft_ms=None) == ("failed",)
    assert alerts("ready", None, max_concurrency=16, slo_ttft_ms=None) == ("no engine metrics",)
