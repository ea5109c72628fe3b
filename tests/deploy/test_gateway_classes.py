"""The gateway counted per model and priority class: the real gateway admits, queues, sheds and refuses requests of
several classes (one abandoned by its client while queued), and its `/metrics/classes` page (HAProxy's request log,
counted by `appliance gateway`) moves by exactly what the clients saw."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from testkit.gateway_site import Engine, metered_gateway

SLOW = Engine("a", "tiny-a", max_concurrency=2, delay_s=1.0)
FAST = Engine("b", "tiny-b", max_concurrency=4)

Counts = dict[tuple[str, ...], float]


@pytest.fixture(scope="module")
def metrics(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The gateway's URL and its metrics listener's host:port."""
    with metered_gateway([SLOW, FAST], tmp_path_factory.mktemp("classes"), "gateway.ttft_slo_s=1") as (_, url, metrics):
        yield url, metrics


def scrape(metrics: str) -> tuple[Counts, Counts]:
    """Requests by (model, class, outcome) and queue-time observations by (model, class)."""
    page = httpx.get(f"http://{metrics}/metrics/classes", timeout=5).text
    samples = [s for family in text_string_to_metric_families(page) for s in family.samples]
    requests: Counts = {
        (s.labels["model"], s.labels["class"], s.labels["outcome"]): s.value
        for s in samples
        if s.name == "appliance_gateway_requests_total"
    }
    queued: Counts = {
        (s.labels["model"], s.labels["class"]): s.value
        for s in samples
        if s.name == "appliance_gateway_queue_seconds_count"
    }
    return requests, queued


def moved(after: Counts, before: Counts) -> Counts:
    return {key: value - before.get(key, 0) for key, value in after.items() if value != before.get(key, 0)}


async def test_each_model_and_class_is_counted_as_the_clients_saw_it(metrics: tuple[str, str]) -> None:
    url, listen = metrics
    before = scrape(listen)
    async with httpx.AsyncClient(timeout=30) as http:

        async def post(model: str, cls: str) -> int:
            reply = await http.post(f"{url}/v1/completions", json={"model": model}, headers={"X-Priority": cls})
            return reply.status_code

        async def give_up(model: str, cls: str) -> str:
            """A client that waits 0.25 s for its answer (less than the 0.5 s bound) and closes its connection."""
            async with httpx.AsyncClient(timeout=httpx.Timeout(5, read=0.25)) as impatient:
                with pytest.raises(httpx.ReadTimeout):
                    await impatient.post(f"{url}/v1/completions", json={"model": model}, headers={"X-Priority": cls})
            return "gave up"

        high = [asyncio.create_task(post(SLOW.model, "high")) for _ in range(2)]  # both engine slots
        await asyncio.sleep(0.2)
        normal = [asyncio.create_task(post(SLOW.model, "normal")) for _ in range(3)]  # queued past the bound
        gone = asyncio.create_task(give_up(SLOW.model, "normal"))  # queued, then abandoned before the bound
        await asyncio.sleep(0.2)
        low = await post(SLOW.model, "low")  # shed at once: its model queues
        seen = Counter(
            [("tiny-a", "high", s) for s in await asyncio.gather(*high)]
            + [("tiny-a", "normal", s) for s in await asyncio.gather(*normal, gone)]
            + [("tiny-a", "low", low)]
            + [("tiny-b", "low", await post(FAST.model, "low")) for _ in range(2)]
            + [("tiny-a", "-", await post(SLOW.model, "vip"))]
            + [("-", "-", await post("no-such-model", "normal"))]  # refused before its class is read
        )
    assert seen == {
        ("tiny-a", "high", 200): 2,
        ("tiny-a", "normal", 429): 3,
        ("tiny-a", "normal", "gave up"): 1,
        ("tiny-a", "low", 429): 1,
        ("tiny-b", "low", 200): 2,
        ("tiny-a", "-", 400): 1,
        ("-", "-", 404): 1,
    }
    want = {
        ("tiny-a", "high", "admitted"): 2,
        ("tiny-a", "normal", "shed"): 3,
        ("tiny-a", "normal", "abandoned"): 1,  # left the queue when its client closed: never sent to the engine
        ("tiny-a", "low", "shed"): 1,
        ("tiny-b", "low", "admitted"): 2,
        ("tiny-a", "-", "refused"): 1,
        ("-", "-", "refused"): 1,
    }
    for _ in range(50):  # HAProxy logs a request once its answer is sent
        requests, queued = scrape(listen)
        if moved(requests, before[0]) == want:
            break
        await asyncio.sleep(0.1)
    assert moved(requests, before[0]) == want
    # Each request that reached its model's queue, once: admitted at once or after a wait, shed past the bound, or
    # abandoned while it waited.
    assert moved(queued, before[1]) == {("tiny-a", "high"): 2, ("tiny-a", "normal"): 4, ("tiny-b", "low"): 2}
