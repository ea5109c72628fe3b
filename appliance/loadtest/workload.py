"""Draw a workload's requests: arrival times, lengths and features, reproducible from its seed.

Pure: the same WorkloadConfig always yields the same requests, so two servers (or two
schedulers) see identical arrivals. Each property draws from its own seeded stream, so changing
one share does not move the arrivals or lengths of the others.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
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


def check_workload(workload: WorkloadConfig, max_model_len: int) -> list[Problem]:
    """Lengths the server cannot take (ranges and min <= max are checked when the config is parsed)."""
    longest = draw_bounds(workload.prompt_tokens) + draw_bounds(workload.output_tokens)
    if longest <= max_model_len:
        return []
    return [Problem("workload-too-long", "workload.prompt_tokens.max",
                    f"a request can reach {longest} prompt+output tokens but the server accepts {max_model_len}",
                    "Lower workload.prompt_tokens.max or workload.output_tokens.max")]  # fmt: skip


def draw_bounds(dist: LengthDistribution) -> int:
    """The largest value `draw_length` can return."""
    return min(dist.max, max(dist.min, dist.mean)) if dist.kind == "fixed" else dist.max
