"""The images of a workload: random RGB pixels from its seed, encoded once as base64 `data:` URLs.

Random pixels, as `vllm bench serve --dataset-name random-mm` and tt-inference-server's benchmarks
send: the vision encoder's cost depends on the size, not the content, and no two images share
content a cache could exploit unless the workload reuses one on purpose. Every image is encoded
before the run, so encoding never delays a planned arrival; an image sent again is the very same
string, so the server receives identical bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

import numpy
from PIL import Image

from appliance.config.schema import WorkloadConfig
from appliance.data_urls import ImageFormat, data_url, encode
from appliance.loadtest.prompts import BuiltPrompt
from appliance.loadtest.workload import PlannedImage, PlannedRequest, image_sizes

__all__ = ["PROBE_KEY", "attach_images", "build_images", "image_bytes", "image_data_url", "probe_urls"]

PROBE_KEY = -1
"""Key of the images that count tokens and warm up: never one of the run's, so no cache has seen those."""


def image_bytes(seed: int, key: int, width: int, height: int, fmt: ImageFormat) -> bytes:
    """One encoded image whose pixels depend only on (seed, key, size)."""
    return encode(_pixels(seed, key, width, height), fmt)


def image_data_url(seed: int, key: int, width: int, height: int, fmt: ImageFormat) -> str:
    """The image as the `url` of an OpenAI `image_url` content part."""
    return data_url(_pixels(seed, key, width, height), fmt)


def _pixels(seed: int, key: int, width: int, height: int) -> Image.Image:
    rng = numpy.random.default_rng([seed, key + 1, width, height])  # numpy seeds must be non-negative
    return Image.fromarray(rng.integers(0, 256, size=(height, width, 3), dtype=numpy.uint8))


def build_images(workload: WorkloadConfig, planned: Iterable[PlannedRequest]) -> Mapping[int, str]:
    """The data URL of every distinct image the requests carry, by key (each encoded once)."""
    fmt = workload.images.format
    urls: dict[int, str] = {}
    for image in (image for request in planned for image in request.images):
        if image.key not in urls:
            urls[image.key] = image_data_url(workload.seed, image.key, image.width, image.height, fmt)
    return urls


def probe_urls(workload: WorkloadConfig) -> Mapping[tuple[int, int], str]:
    """One image of each of the workload's sizes that the run never sends (to count tokens and warm up)."""
    fmt = workload.images.format
    return {(w, h): image_data_url(workload.seed, PROBE_KEY, w, h, fmt) for w, h in image_sizes(workload)}


def attach_images(
    requests: Sequence[tuple[PlannedRequest, BuiltPrompt]],
    url: Callable[[PlannedImage], str],
    image_tokens: Mapping[tuple[int, int], int | None],
) -> tuple[tuple[PlannedRequest, BuiltPrompt], ...]:
    """The requests with their images' URLs in their prompts, and the tokens the server counts for them."""
    attached = []
    for planned, prompt in requests:
        if planned.images:
            counts = [image_tokens.get(image.size) for image in planned.images]
            known = [c for c in counts if c is not None]
            prompt = replace(
                prompt,
                image_urls=tuple(url(image) for image in planned.images),
                image_tokens=sum(known) if len(known) == len(counts) else None,
            )
        attached.append((planned, prompt))
    return tuple(attached)
