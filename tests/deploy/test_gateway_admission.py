"""Admission at the real gateway: each engine is given what its plan runs at once, the excess waits at most the
wait bound (ttft_slo_s × queue_share) and then gets 429 with Retry-After, never a 5xx; the high class is admitted
first, the sheddable class shed at once; limits the engines cannot hold are refused before start."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from testkit.gateway_site import TOKEN, Engine, gateway_command, running_gateway, running_site
from testkit.helpers import Cli

SLOW = Engine("a", "tiny-a", max_concurrency=2, delay_s=1.0)
SLO_S, SHARE = 1.0, 0.5
WAIT_S = SLO_S * SHARE


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with running_site([SLOW], tmp_path_factory.mktemp("admission")) as site:
        yield site


@pytest.fixture(scope="module")
def gateway(site: Path) -> Iterator[str]:
    overrides = (f"gateway.ttft_slo_s={SLO_S}", f"gateway.queue_share={SHARE}")
    with running_gateway(site, site.parent / "gw", *overrides, models=[SLOW.model]) as url:
        yield url


async def timed_post(http: httpx.AsyncClient, url: str, cls: str | None = None) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    headers = {"X-Priority": cls} if cls else {}
    reply = await http.post(f"{url}/v1/completions", json={"model": SLOW.model}, headers=headers, timeout=30)
    return reply, time.monotonic() - started


def assert_shed(reply: httpx.Response) -> None:
    assert reply.status_code == 429
    assert int(reply.headers["retry-after"]) >= 1
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "rate_limit_error"


async def test_past_capacity_the_excess_gets_429_within_the_wait_bound_and_none_a_5xx(gateway: str) -> None:
    async with httpx.AsyncClient() as http:
        replies = await asyncio.gather(*(timed_post(http, gateway) for _ in range(8)))
    statuses = sorted(r.status_code for r, _ in replies)
    assert statuses == [200, 200] + [429] * 6, statuses  # every request answered: what runs, and a fast no
    for reply, took in replies:
        if reply.status_code == 429:
            assert_shed(reply)
            assert WAIT_S * 0.9 <= took < WAIT_S + 0.5  # it waited its turn, no longer
        else:
            assert took >= SLOW.delay_s


async def test_the_high_class_is_admitted_first_and_the_low_class_shed_at_once(site: Path) -> None:
    # A wait bound of 2 s: both queued requests are admitted, one as each engine slot frees (at 1.0 s and 1.5 s).
    with running_gateway(site, site.parent / "gw-classes", "gateway.ttft_slo_s=4", models=[SLOW.model]) as url:
        async with httpx.AsyncClient() as http:
            running = [asyncio.create_task(timed_post(http, url))]
            await asyncio.sleep(0.5)
            running.append(asyncio.create_task(timed_post(http, url)))
            await asyncio.sleep(0.2)  # both engine slots busy: what comes now queues
            normal = asyncio.create_task(timed_post(http, url, "normal"))
            await asyncio.sleep(0.1)
            high = asyncio.create_task(timed_post(http, url, "high"))
            await asyncio.sleep(0.1)
            low, low_took = await timed_post(http, url, "low")
            (high_reply, high_took), (normal_reply, normal_took) = await high, await normal
            await asyncio.gather(*running)
    assert_shed(low)
    assert low_took < 0.3  # shed at once while its model queues, not after the wait bound
    assert high_reply.status_code == normal_reply.status_code == 200
    # The later high request took the first free slot (about 1.0 s in), the earlier normal one the next (1.5 s).
    assert 0.8 + high_took < 0.7 + normal_took - 0.3


def test_a_priority_class_the_site_does_not_list_gets_400(gateway: str) -> None:
    reply = httpx.post(f"{gateway}/v1/completions", json={"model": SLOW.model}, headers={"X-Priority": "vip"})
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "X-Priority"


def test_the_dry_run_shows_each_models_limits(site: Path, cli: Cli) -> None:
    done = cli(*gateway_command(site, "--dry-run", "gateway.ttft_slo_s=3")[1:], env={"APPLIANCE_TOKEN": TOKEN})
    assert done.returncode == 0, done.stderr
    assert "# model tiny-a: at once 2 (a 2); queued at most 1.5s" in done.stdout
    assert "server a 127.0.0.1:" in done.stdout and " maxconn 2 " in done.stdout
    assert "timeout queue 1500ms" in done.stdout


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("gateway.models.tiny-a.max_concurrency=3", "gateway.models.tiny-a.max_concurrency"),
        ("gateway.models.other.ttft_slo_s=1", "gateway.models.other"),
        ("gateway.ttft_slo_s=0", "gateway.ttft_slo_s"),
        ("gateway.queue_share=1.5", "gateway.queue_share"),
        ("gateway.max_body_kib=1", "gateway.max_body_kib"),
        ("gateway.sheddable=[bulk]", "gateway.sheddable[0]"),
        ("gateway.priority_header='X Pri'", "gateway.priority_header"),
    ],
)
def test_a_gateway_config_the_site_cannot_hold_is_refused_before_start(
    site: Path, cli: Cli, tmp_path: Path, override: str, key: str
) -> None:
    done = cli(*gateway_command(site, "--out", str(tmp_path / "gw"), override)[1:], env={"APPLIANCE_TOKEN": TOKEN})
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert f" {key}: " in line and "Traceback" not in done.stderr
    assert not (tmp_path / "gw").exists()  # nothing started, nothing written
