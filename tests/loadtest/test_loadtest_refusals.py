"""Image requests the engine refuses: each is a client error in the report, never a server error, and the
run goes on. Over real HTTP, against testkit/recorded_vision_server.py (vLLM 0.32's recorded answers)."""

from __future__ import annotations

import base64
from dataclasses import replace

import aiohttp

from appliance.config.compose import compose_config
from appliance.loadtest.generator import LoadProgress, RunWindow, drive
from appliance.loadtest.images import attach_images, build_images, image_data_url
from appliance.loadtest.prompts import BuiltPrompt, ServerTokenizer
from appliance.loadtest.report import RunFacts, summarize
from appliance.loadtest.workload import plan_requests
from testkit.recorded_vision_server import recorded_vision_server

# Up to three images against a limit of two, in a closed loop of two streams (no Poisson waits); chat only,
# as only a chat stream is recorded.
OVERRIDES = (
    "workload=vision",
    "workload.arrival=concurrency",
    "workload.concurrency=2",
    "workload.chat_share=1",
    "workload.images.share=0.6",
    "workload.images.per_request=[{count:1,weight:2},{count:3,weight:1}]",
)
WORKLOAD = compose_config(list(OVERRIDES)).config.workload
COUNT = 30
NOT_AN_IMAGE = "data:image/png;base64," + base64.b64encode(b"not an image").decode()


def requests(broken: dict[int, str]) -> tuple[tuple[object, BuiltPrompt], ...]:
    """The workload's first requests with their images; the image of each request in `broken` replaced."""
    planned = plan_requests(WORKLOAD, COUNT)
    images = build_images(WORKLOAD, planned)
    texts = [(p, BuiltPrompt(p.index, "what is in the picture", 12, False)) for p in planned]
    attached = attach_images(texts, lambda image: images[image.key], {})
    return tuple((p, replace(b, image_urls=(broken[p.index],)) if p.index in broken else b) for p, b in attached)


async def run(url: str, broken: dict[int, str]):  # type: ignore[no-untyped-def]
    seen: list[LoadProgress] = []
    async with aiohttp.ClientSession(url) as http:
        traces, duration = await drive(
            http,
            "v",
            WORKLOAD,
            requests(broken),
            RunWindow(30.0, COUNT, 10.0),  # type: ignore[arg-type]
            seen.append,
        )
    return summarize(RunFacts("refusals", url, "v", 0.0, duration, 0.0), WORKLOAD, traces), seen


async def test_too_many_and_undecodable_images_are_client_errors_and_the_run_goes_on() -> None:
    planned = plan_requests(WORKLOAD, COUNT)
    single = [p.index for p in planned if len(p.images) == 1]
    broken = {single[0]: NOT_AN_IMAGE, single[1]: "data:image/png;base64,@@@@"}
    async with recorded_vision_server() as url:
        report, seen = await run(url, broken)
    errors = {t.index: t.error for t in report.traces if t.error}
    three = {p.index for p in planned if len(p.images) == 3}
    assert three and set(errors) == three | set(broken) and set(errors.values()) == {"http-400"}
    details = {t.index: t.detail or "" for t in report.traces}
    assert "Failed to load image" in details[single[0]] and "Non-base64" in details[single[1]]
    assert all("At most 2 image(s)" in details[i] for i in three)
    assert (report.client_errors, report.server_errors) == (len(errors), 0)
    assert report.by_kind["image"].client_errors == len(errors) and report.by_kind["text"].client_errors == 0
    assert report.sent == COUNT and report.completed == COUNT - len(errors)  # every other request was served
    assert seen[-1].done == COUNT


async def test_images_sent_to_a_text_only_model_are_client_errors_and_its_text_is_served() -> None:
    async with recorded_vision_server(multimodal=False) as url:
        report, _ = await run(url, {})
        async with aiohttp.ClientSession(url) as http:
            tokens = await ServerTokenizer(http, url, "t").image_tokens(image_data_url(0, 0, 56, 56, "png"))
    assert tokens is None  # the load test then leaves image requests for the server to refuse
    image = [t for t in report.traces if t.images]
    assert image and all(t.error == "http-400" and "not a multimodal model" in (t.detail or "") for t in image)
    assert report.client_errors == len(image) and report.server_errors == 0
    assert all(t.ok for t in report.traces if not t.images)
