"""The media gate (appliance/runtime/media_gate.py) with the client vLLM fetches images with: aiohttp in a session
made with trust_env=True (vllm/connections.py), routed by HTTP_PROXY as the plan routes the engine. Every image host
is a real HTTP server on a loopback address that records what reached it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from appliance.compat.media import MediaPolicy, media_policy
from appliance.runtime.media_gate import MediaGate
from testkit.media_hosts import image_host, red_png


def policy(*hosts: str, pixels: int = 200_704) -> MediaPolicy:
    return media_policy(hosts, False, None, pixels, "/nonexistent", True)


@pytest.fixture
async def gate(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[MediaGate]:
    served = await MediaGate(lambda: None).start()
    for name in ("http_proxy", "https_proxy"):
        monkeypatch.setenv(name, served.url)
    monkeypatch.setenv("no_proxy", "")
    yield served
    await served.close()


async def fetch(url: str, redirects: bool = False) -> tuple[int, bytes]:
    async with aiohttp.ClientSession(trust_env=True) as session, session.get(url, allow_redirects=redirects) as r:
        return r.status, await r.read()


async def test_a_listed_host_at_a_listed_address_is_fetched(gate: MediaGate) -> None:
    with image_host("127.0.0.2") as host:
        gate.policy = lambda: policy("127.0.0.2")
        assert await fetch(host.url("/red.png")) == (200, red_png())
        assert host.connections == ["/red.png"]


@pytest.mark.parametrize("listed", [(), ("127.0.0.2",)], ids=["nothing listed", "another host listed"])
async def test_an_unlisted_host_reaches_nothing_and_learns_nothing(gate: MediaGate, listed: tuple[str, ...]) -> None:
    with image_host("127.0.0.1") as host:
        gate.policy = lambda: policy(*listed)
        status, body = await fetch(host.url("/red.png"))
        missing, _ = await fetch(f"http://127.0.0.1:{host.port + 1}/")  # whether anything listens is not told
        assert (status, missing) == (403, 403) and b"127.0.0.1" not in body
        assert host.connections == []
        assert gate.refused == 2


async def test_a_listed_name_that_resolves_to_loopback_reaches_nothing(gate: MediaGate) -> None:
    """`localhost` is listed as a name, but its address is not: the gate checks the address it would connect to."""
    with image_host("127.0.0.1") as host:
        gate.policy = lambda: policy("localhost")
        assert (await fetch(host.url("/red.png", host="localhost")))[0] == 403
        assert host.connections == []


async def test_a_redirect_to_an_unlisted_host_is_checked_again_and_refused(gate: MediaGate) -> None:
    with image_host("127.0.0.2") as listed, image_host("127.0.0.1") as inside:
        gate.policy = lambda: policy("127.0.0.2")
        status, _ = await fetch(listed.url(f"/redirect?to={inside.url('/red.png')}"), redirects=True)
        assert status == 403
        assert listed.connections == [f"/redirect?to={inside.url('/red.png')}"] and inside.connections == []


async def test_an_https_tunnel_to_an_unlisted_host_is_refused(gate: MediaGate) -> None:
    gate.policy = lambda: policy("127.0.0.2")
    with pytest.raises(aiohttp.ClientHttpProxyError) as refused:
        await fetch("https://127.0.0.1:9/x.png")
    assert refused.value.status == 403


async def test_a_download_past_the_cap_is_cut_off(gate: MediaGate) -> None:
    """The gate's own cap (the only one on vLLM 0.26.0): 3136 px caps a download at 1 MB of image and 1 MiB."""
    small = policy("127.0.0.2", pixels=3136)
    assert small.max_download_mb == 2
    with image_host("127.0.0.2") as host:
        gate.policy = lambda: small
        assert (await fetch(host.url(f"/bytes/{1 << 20}")))[0] == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            await fetch(host.url(f"/bytes/{3 << 20}"))


async def test_a_listed_host_that_does_not_answer_is_the_sites_fault_not_the_clients(gate: MediaGate) -> None:
    with image_host("127.0.0.2") as host:
        port = host.port
    gate.policy = lambda: policy("127.0.0.2")
    assert (await fetch(f"http://127.0.0.2:{port}/red.png"))[0] == 502
