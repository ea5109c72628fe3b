"""Draw a workload's requests: arrival times, lengths and features, reproducible from its seed.

Pure: the same WorkloadConfig always yields the same requests, so two servers (or two
schedulers) see identical arrivals. Each property draws from its own seeded stream, so changing
one share does not move the arrivals or lengths of the others.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from operator import attrgetter
from typing import Literal

from appliance.config.schema import LengthDistribution, WorkloadConfig
from appliance.errors import Problem

__all__ = ["Api", "PlannedRequest", "check_workload", "draw_bounds", "draw_length", "plan_requests"]

Api = Literal["chat", "completion"]


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


def plan_requests(workload: WorkloadConfig, count: int) -> tuple[PlannedRequest, ...]:
    """The first `count` requests of a workload, in send order."""
    streams = {name: random.Random(f"{workload.seed}:{name}") for name in _STREAMS}
    at = 0.0
    planned = []
    for index in range(count):
        if workload.arrival == "poisson":
            at += streams["arrival"].expovariate(workload.rate_per_s)
        planned.append(
            PlannedRequest(
                index=index,
                at_s=at if workload.arrival == "poisson" else None,
                api="chat" if streams["api"].random() < workload.chat_share else "completion",
                prompt_tokens=draw_length(workload.prompt_tokens, streams["prompt"]),
                output_tokens=draw_length(workload.output_tokens, streams["output"]),
                structured=streams["structured"].random() < workload.structured_output_share,
                logprobs=streams["logprobs"].random() < workload.logprobs_share,
                penalties=streams["penalties"].random() < workload.penalties_share,
                shared_prefix=streams["prefix"].random() < workload.shared_prefix_share,
            )
        )
    return tuple(planned)


_STREAMS = ("arrival", "api", "prompt", "output", "structured", "logprobs", "penalties", "prefix")


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


def check_workload(workload: WorkloadConfig, max_model_len: int | None = None) -> list[Problem]:
    """Values a run cannot use, each naming its workload key; with a server's limit, lengths too."""
    w = workload
    rules = [
        ("rate_per_s", w.arrival == "poisson" and w.rate_per_s <= 0, "> 0"),
        ("concurrency", w.concurrency < 1, ">= 1"),
        ("max_requests", w.max_requests < 1, ">= 1"),
        ("duration_s", w.duration_s <= 0, "> 0"),
    ]
    rules += [(f"{name}_share", not 0.0 <= share <= 1.0, "between 0 and 1") for name, share in _shares(w)]
    rules += [(f"{name}.min", not 1 <= d.min <= d.max, f"between 1 and {name}.max") for name, d in _lengths(w)]
    found = [
        Problem("workload-value", f"workload.{key}", f"{attrgetter(key)(w)} is out of range", f"Set it {fix}")
        for key, bad, fix in rules
        if bad
    ]
    longest = draw_bounds(w.prompt_tokens) + draw_bounds(w.output_tokens)
    if max_model_len is not None and longest > max_model_len:
        found.append(
            Problem(
                "workload-too-long",
                "workload.prompt_tokens.max",
                f"a request can reach {longest} prompt+output tokens but the server accepts {max_model_len}",
                "Lower workload.prompt_tokens.max or workload.output_tokens.max",
            )
        )
    return found


def draw_bounds(dist: LengthDistribution) -> int:
    """The largest value `draw_length` can return."""
    return min(dist.max, max(dist.min, dist.mean)) if dist.kind == "fixed" else dist.max


def _shares(w: WorkloadConfig) -> tuple[tuple[str, float], ...]:
    return (("chat", w.chat_share), ("structured_output", w.structured_output_share), ("logprobs", w.logprobs_share),
            ("penalties", w.penalties_share), ("shared_prefix", w.shared_prefix_share))  # fmt: skip


def _lengths(w: WorkloadConfig) -> tuple[tuple[str, LengthDistribution], ...]:
    return ("prompt_tokens", w.prompt_tokens), ("output_tokens", w.output_tokens)
