"""A real Prometheus (Debian's package, `make prometheus`) scraping a real appliance on the CPU engine with the
config `appliance render prometheus` wrote: the series arrive with the appliance's values, a drain makes the
not-ready alert go pending, and the control token appears neither in Prometheus's config nor in its log."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit.appliance_process import Served
from testkit.helpers import Cli
from testkit.prometheus import running_prometheus

pytestmark = pytest.mark.engine  # the conftest gate skips it without the CPU engine


@pytest.fixture
def prometheus(cli: Cli, restartable_appliance: Served, tmp_path: Path) -> Iterator[str]:
    """Prometheus on a free loopback port, scraping the restartable appliance each second; its URL."""
    creds = tmp_path / "credentials"
    creds.mkdir()
    (creds / "LAB_TOKEN").write_text(restartable_appliance.token)
    (creds / "LAB_TOKEN").chmod(0o600)
    site_file = tmp_path / "lab.yaml"
    site_file.write_text(f"- {{name: cpu-01, url: '{restartable_appliance.control_url}', token_env: LAB_TOKEN}}\n")
    out = tmp_path / "prometheus"
    ran = cli(
        "render",
        "prometheus",
        "--site-file",
        str(site_file),
        "--credentials-dir",
        str(creds),
        "--out",
        str(out),
        "--scrape-interval",
        "1s",
        "--evaluation-interval",
        "1s",
        "--not-ready-for",
        "10m",
    )
    assert ran.returncode == 0, ran.stderr
    with running_prometheus(out / "prometheus.yml", tmp_path / "data", tmp_path / "prometheus.log") as port:
        yield f"http://127.0.0.1:{port}"


def query(url: str, expr: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10)
    answer.raise_for_status()  # a starting Prometheus answers 503 in plain text
    reply = answer.json()
    assert reply["status"] == "success", reply
    result: list[dict[str, Any]] = reply["data"]["result"]
    return result


def eventually(probe: Any, timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if found := probe():
                return found
        except (httpx.TransportError, httpx.HTTPStatusError):
            pass  # Prometheus still starting (not listening yet, or 503 until its storage is ready)
        time.sleep(0.5)
    raise AssertionError(f"{probe.__doc__ or probe} never held within {timeout:.0f} s")


def test_prometheus_scrapes_the_appliance_and_a_drain_makes_not_ready_pending(
    prometheus: str, restartable_appliance: Served, tmp_path: Path
) -> None:
    state = restartable_appliance.state()
    ready = eventually(lambda: query(prometheus, 'appliance_engine_ready{job="lab"} == 1'))
    assert ready[0]["metric"]["appliance"] == "cpu-01"
    info = query(prometheus, 'appliance_config_info{job="lab"}')[0]["metric"]
    assert (info["config_hash"], info["checkpoint"]) == (state.config_hash, state.checkpoint)
    slo = float(state.config["workload.slo_ttft_ms"]) / 1000
    assert float(query(prometheus, 'appliance_slo_seconds{job="lab", slo="ttft"}')[0]["value"][1]) == slo
    assert eventually(lambda: query(prometheus, 'vllm:num_requests_running{job="lab-engine", appliance="cpu-01"}'))
    assert query(prometheus, 'appliance_kv_cache_usage_ratio{job="lab"}')  # read from the engine at each scrape

    assert restartable_appliance.control("POST", "/drain").status_code == 202

    def pending() -> list[dict[str, Any]]:
        alerts = httpx.get(f"{prometheus}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
        return [a for a in alerts if a["labels"]["alertname"] == "ApplianceNotReady" and a["state"] == "pending"]

    alert = eventually(pending)[0]
    assert alert["labels"]["appliance"] == "cpu-01" and alert["annotations"]["runbook"]
    config = httpx.get(f"{prometheus}/api/v1/status/config", timeout=10).json()["data"]["yaml"]
    assert "credentials_file" in config
    assert restartable_appliance.token not in config
    assert restartable_appliance.token not in (tmp_path / "prometheus.log").read_text()
