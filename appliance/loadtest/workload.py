"""Draw a workload's requests: arrival times, lengths and features, reproducible from its seed.

Pure: the same WorkloadConfig always yields the same requests, so two servers (or two
schedulers) see identical arrivals. Each property draws from its own seeded stream, so changing
one share does not move the arrivals or lengths of the others.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

from appliance.config.schema import ImagesConfig, LengthDistribution, WorkloadConfig
from appliance.errors import Problem

__all__ = [
    "Api",
    "PlannedImage",
    "PlannedRequest",
    "check_workload",
    "draw_bounds",
    "draw_length",
    "image_sizes",
    "plan_requests",
]

Api = Literal["chat", "completion"]


@dataclass(frozen=True, slots=True)
class PlannedImage:
    key: int
    """Which image: its pixels are drawn from the workload's seed and this key, so equal keys are equal bytes."""
    width: int
    height: int
    reused: bool
    """An image of an earlier request sent again."""

    @property
    def size(self) -> tuple[int, int]:
        return self.width, self.height


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    index: int
    at_s: float | None
    """Send time from the start of the run (Poisson arrivals); None in a closed loop."""
    api: Api
    prompt_tokens: int
    """Exact prompt length the server will count (chat template included for chat)."""
    output_tokens: int
    structured: bool
    logprobs: bool
    penalties: bool
    shared_prefix: bool
    images: tuple[PlannedImage, ...] = ()
    priority: str | None = None
    """The priority class sent in the priority header (a step workload's mix); None: no header."""


def plan_requests(workload: WorkloadConfig, count: int) -> tuple[PlannedRequest, ...]:
    """The first `count` requests of a workload, in send order."""
    streams = {name: random.Random(f"{workload.seed}:{name}") for name in _STREAMS}
    at = 0.0
    planned: list[PlannedRequest] = []
    earlier: list[PlannedImage] = []
    for index in range(count):
        if workload.arrival == "poisson":
            at += streams["arrival"].expovariate(workload.rate_per_s)
        chat = streams["api"].random() < workload.chat_share  # drawn for every request, so the stream stays aligned
        images = _draw_images(workload.images, streams, earlier)
        planned.append(
            PlannedRequest(
                index=index,
                at_s=at if workload.arrival == "poisson" else None,
                api="chat" if chat or images else "completion",
                prompt_tokens=draw_length(workload.prompt_tokens, streams["prompt"]),
                output_tokens=draw_length(workload.output_tokens, streams["output"]),
                structured=streams["structured"].random() < workload.structured_output_share,
                logprobs=streams["logprobs"].random() < workload.logprobs_share,
                penalties=streams["penalties"].random() < workload.penalties_share,
                shared_prefix=streams["prefix"].random() < workload.shared_prefix_share,
                images=images,
            )
        )
        earlier += [image for image in images if not image.reused]
    return tuple(planned)


_STREAMS = (
    "arrival",
    "api",
    "prompt",
    "output",
    "structured",
    "logprobs",
    "penalties",
    "prefix",
    "image",
    "image-count",
    "image-size",
    "image-reuse",
)


def _draw_images(
    config: ImagesConfig, streams: dict[str, random.Random], earlier: list[PlannedImage]
) -> tuple[PlannedImage, ...]:
    """A request's images: none, new ones of drawn sizes, or images of earlier requests sent again."""
    if streams["image"].random() >= config.share:
        return ()
    counts = config.per_request
    (count,) = streams["image-count"].choices([c.count for c in counts], [c.weight for c in counts])
    images: list[PlannedImage] = []
    fresh = len(earlier)  # the next new image's key
    for _ in range(count):
        (size,) = streams["image-size"].choices(config.sizes, [s.weight for s in config.sizes])
        reuse = streams["image-reuse"].random() < config.reuse_share
        if reuse and earlier:
            images.append(replace(earlier[streams["image-reuse"].randrange(len(earlier))], reused=True))
        else:
            images.append(PlannedImage(fresh, size.width, size.height, reused=False))
            fresh += 1
    return tuple(images)


def image_sizes(workload: WorkloadConfig) -> tuple[tuple[int, int], ...]:
    """Every (width, height) the workload's images can have."""
    return tuple(dict.fromkeys((s.width, s.height) for s in workload.images.sizes))


def draw_length(dist: LengthDistribution, rng: random.Random) -> int:
    """One token count from a length distribution, clamped to [min, max]."""
    if dist.kind == "fixed":
        value = float(dist.mean)
    elif dist.kind == "uniform":
        value = rng.uniform(dist.min, dist.max)
    elif dist.kind == "normal":
        value = rng.gauss(dist.mean, dist.std)
    else:
        # mean and std are of the lengths themselves, not of their logarithm.
        sigma2 = math.log1p((dist.std / dist.mean) ** 2) if dist.mean > 0 else 0.0
        value = rng.lognormvariate(math.log(max(dist.mean, 1)) - sigma2 / 2, math.sqrt(sigma2))
    return min(dist.max, max(dist.min, round(value)))


def check_workload(
    workload: WorkloadConfig, max_model_len: int, image_tokens: Mapping[tuple[int, int], int] | None = None
) -> list[Problem]:
    """Lengths the server cannot take (ranges and min <= max are checked when the config is parsed).

    `image_tokens` is what the server counts for one image of each size; without it (a server that
    cannot count images) image requests are left for the server to refuse, each as a client error.
    """
    longest = draw_bounds(workload.prompt_tokens) + draw_bounds(workload.output_tokens)
    images = ""
    if workload.images.share > 0 and image_tokens:
        most = max(c.count for c in workload.images.per_request) * max(image_tokens.values())
        longest, images = longest + most, f" (images {most})"
    if longest <= max_model_len:
        return []
    return [
        Problem(
            code="workload-too-long",
            key="workload.prompt_tokens.max",
            message=f"a request can reach {longest} prompt+output tokens{images} but the server accepts "
            f"{max_model_len}",
            fix="Lower workload.prompt_tokens.max or workload.output_tokens.max, or "
            "send fewer or smaller images (workload.images)",
        )
    ]


def draw_bounds(dist: LengthDistribution) -> int:
    """The largest value `draw_length` can return."""
    return min(dist.max, max(dist.min, dist.mean)) if dist.kind == "fixed" else dist.max
