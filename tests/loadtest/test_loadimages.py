"""The load tester's images: what a request body carries decodes with Pillow to the planned size, a reused
image is the same bytes, and the same seed makes the same images."""

from __future__ import annotations

import base64
import io
from dataclasses import replace
from typing import Any

import numpy
import pytest
from PIL import Image

from appliance.config.compose import compose_config
from appliance.config.schema import WorkloadConfig
from appliance.loadtest.generator import request_body
from appliance.loadtest.images import attach_images, build_images, image_bytes, probe_urls
from appliance.loadtest.prompts import BuiltPrompt
from appliance.loadtest.workload import PlannedRequest, plan_requests

SIZES = "workload.images.sizes=[{width:224,height:224,weight:2},{width:97,height:31,weight:1}]"


def workload(*overrides: str) -> WorkloadConfig:
    return compose_config(["workload=vision", "workload.images.reuse_share=0.5", SIZES, *overrides]).config.workload


def sent(w: WorkloadConfig, count: int = 40) -> list[tuple[PlannedRequest, list[str]]]:
    """Each planned request with the image URLs its request body carries."""
    planned = plan_requests(w, count)
    images = build_images(w, planned)
    texts = [(p, BuiltPrompt(p.index, "look", 3, False)) for p in planned]
    requests = attach_images(texts, lambda image: images[image.key], {})
    bodies = [request_body("m", p, b)[1] for p, b in requests]
    return [(p, _urls(body)) for p, body in zip(planned, bodies, strict=True)]


def _urls(body: dict[str, Any]) -> list[str]:
    if "messages" not in body:  # a completion request
        return []
    content = body["messages"][0]["content"]
    return [] if isinstance(content, str) else [p["image_url"]["url"] for p in content if p["type"] == "image_url"]


def decode(url: str) -> Image.Image:
    head, data = url.split(",", 1)
    assert head in ("data:image/png;base64", "data:image/jpeg;base64")
    image = Image.open(io.BytesIO(base64.b64decode(data, validate=True)))
    image.load()
    return image


def test_every_image_sent_decodes_to_its_planned_size_in_rgb() -> None:
    requests = sent(workload())
    assert any(len(urls) == 2 for _, urls in requests)
    for planned, urls in requests:
        assert len(urls) == len(planned.images)
        for image, url in zip(planned.images, urls, strict=True):
            decoded = decode(url)
            assert (decoded.format, decoded.mode, decoded.size) == ("PNG", "RGB", image.size)


def test_pixels_are_random_noise_not_a_blank_a_cache_could_share() -> None:
    url = next(urls[0] for _, urls in sent(workload()) if urls)
    pixels = numpy.asarray(decode(url)).reshape(-1, 3)
    assert pixels.std() > 60 and len(numpy.unique(pixels, axis=0)) > 0.9 * len(pixels)


def test_a_reused_image_is_sent_as_the_identical_bytes_of_the_earlier_one() -> None:
    first: dict[int, str] = {}
    reused = 0
    for planned, urls in sent(workload(), 60):
        for image, url in zip(planned.images, urls, strict=True):
            if image.reused:
                reused += 1
                assert url is first[image.key]
            else:
                assert image.key not in first
                first[image.key] = url
    assert reused >= 5 and len(set(first.values())) == len(first)


def test_the_same_seed_makes_the_same_images_and_another_seed_others() -> None:
    w = workload()
    assert sent(w) == sent(w)
    other = [url for _, urls in sent(replace(w, seed=w.seed + 1)) for url in urls]
    assert not set(other) & {url for _, urls in sent(w) for url in urls}


def test_jpeg_images_decode_too() -> None:
    _, urls = next(r for r in sent(workload("workload.images.format=jpeg")) if r[1])
    decoded = decode(urls[0])
    assert decoded.format == "JPEG" and decoded.mode == "RGB"


def test_the_probe_images_are_of_every_size_and_never_one_the_run_sends() -> None:
    w = workload()
    probes = probe_urls(w)
    assert {size: decode(url).size for size, url in probes.items()} == {(224, 224): (224, 224), (97, 31): (97, 31)}
    assert not set(probes.values()) & {url for _, urls in sent(w) for url in urls}


@pytest.mark.parametrize("fmt", ["png", "jpeg"])
def test_image_bytes_depend_on_seed_key_and_size_only(fmt: str) -> None:
    assert image_bytes(1, 2, 30, 20, fmt) == image_bytes(1, 2, 30, 20, fmt)
    assert len({image_bytes(1, 2, 30, 20, fmt), image_bytes(1, 3, 30, 20, fmt), image_bytes(2, 2, 30, 20, fmt)}) == 3
