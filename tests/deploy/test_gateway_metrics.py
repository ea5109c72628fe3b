"""The gateway seen: HAProxy's own exporter, scraped over HTTP while the real gateway admits, queues and sheds, moves
per model; the real Prometheus, on the scrape config `render prometheus --gateway` writes, labels each series with
its model."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from testkit.gateway_site import Engine, metered_gateway
from testkit.helpers import Cli
from testkit.prometheus import query_until, running_prometheus

SLOW = Engine("a", "tiny-a", max_concurrency=2, delay_s=1.0)
FAST = Engine("b", "tiny-b", max_concurrency=4)
SERIES = (
    "loadbalanced_total",
    "current_queue",
    "requests_denied_total",
    "connection_errors_total",
    "http_requests_total",
)

Sample = dict[tuple[str, str], float]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, str]]:
    """The site file, the gateway's URL and its exporter's host:port."""
    with metered_gateway([SLOW, FAST], tmp_path_factory.mktemp("metrics"), "gateway.ttft_slo_s=1") as gateway:
        yield gateway


def scrape(metrics: str) -> Sample:
    """Each model backend's series this test reads, by (model, series): `haproxy_backend_<series>`."""
    page = httpx.get(f"http://{metrics}/metrics", timeout=5).text
    return {
        (sample.labels["proxy"].removeprefix("model:"), sample.name.removeprefix("haproxy_backend_")): sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
        if sample.labels.get("proxy", "").startswith("model:")
        and sample.name.removeprefix("haproxy_backend_") in SERIES
    }


async def test_admitted_queued_and_shed_requests_move_each_models_series(gateway: tuple[Path, str, str]) -> None:
    _, url, metrics = gateway
    before = scrape(metrics)
    async with httpx.AsyncClient(timeout=30) as http:

        async def post(model: str, cls: str = "normal") -> int:
            body = {"model": model, "prompt": "x"}
            reply = await http.post(f"{url}/v1/completions", json=body, headers={"X-Priority": cls})
            return reply.status_code

        running = [asyncio.create_task(post(SLOW.model)) for _ in range(5)]  # 2 admitted, 3 queued
        await asyncio.sleep(0.2)
        during = await asyncio.to_thread(scrape, metrics)
        low = await post(SLOW.model, "low")  # refused at once: its model queues
        slow = await asyncio.gather(*running)
        fast = await asyncio.gather(*(post(FAST.model) for _ in range(3)))
    after = scrape(metrics)
    assert low == 429 and sorted(slow) == [200, 200, 429, 429, 429] and fast == [200] * 3
    assert during[("tiny-a", "current_queue")] == 3 and during[("tiny-b", "current_queue")] == 0
    moved = {key: after[key] - before[key] for key in after if not key[1].startswith("current")}
    assert moved == {
        ("tiny-a", "loadbalanced_total"): 2,  # admitted
        ("tiny-a", "requests_denied_total"): 1,  # shed at once
        ("tiny-a", "connection_errors_total"): 3,  # shed after the wait bound
        ("tiny-a", "http_requests_total"): 6,
        ("tiny-b", "loadbalanced_total"): 3,
        ("tiny-b", "requests_denied_total"): 0,
        ("tiny-b", "connection_errors_total"): 0,
        ("tiny-b", "http_requests_total"): 3,
    }


async def test_prometheus_scrapes_the_gateway_with_each_series_labelled_by_its_model(
    cli: Cli, gateway: tuple[Path, str, str], tmp_path: Path
) -> None:
    site, _, metrics = gateway
    creds = tmp_path / "credentials"
    creds.mkdir()
    (creds / "APPLIANCE_TOKEN").write_text("x")
    (creds / "APPLIANCE_TOKEN").chmod(0o600)
    flags = ("--site-file", str(site), "--credentials-dir", str(creds), "--job", "lab", "--gateway", metrics)
    ran = cli("render", "prometheus", *flags, "--out", str(tmp_path))
    assert ran.returncode == 0, ran.stderr
    config = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    config["global"]["scrape_interval"] = "200ms"
    config["scrape_configs"] = [s for s in config["scrape_configs"] if s["job_name"] == "lab-gateway"]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    with running_prometheus(tmp_path / "prometheus.yml", tmp_path / "tsdb") as port:
        queued = await query_until(port, 'haproxy_backend_current_queue{job="lab-gateway",model!=""}', 2)
    assert {r["metric"]["model"] for r in queued} == {SLOW.model, FAST.model}
    assert {r["metric"]["proxy"] for r in queued} == {"model:tiny-a", "model:tiny-b"}
