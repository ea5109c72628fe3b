"""Latency statistics of a run: percentiles, goodput, throughput over time and decode stalls.

Pure functions of request traces, so they are unit-tested on synthetic traces.

Decode stall, precisely: a gap (a[k-1], a[k]] between two token chunks of stream A is a stall when
another request B's first token arrived inside it, more than a margin after A's previous token:
a[k-1] + margin < first(B) <= a[k]. B's first token marks the end of B's prefill, so the gap
overlaps B's prefill interval (send(B), first(B)], and the step that finished that prefill gave A
no token: the signature of phase-exclusive scheduling. Under mixed scheduling the same step also
decodes A, whose token is delivered with (just before) B's first token, so the gap does not count.
A stall is an image stall when a request that carried images is among those whose first token
arrived inside the gap: the step that stalled the stream ran that image's vision encoder and prefill.
The margin is two median TPOTs (at least 1 ms): delivery of one step's tokens to different streams
jitters by a few milliseconds on a loaded host, and a prefill shorter than two decode periods is
not worth calling a stall. TPOT rather than the raw inter-chunk gap sets it, because a lagging
server delivers tokens in bursts whose gaps say nothing about its step time.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy

from appliance.loadtest.generator import RequestTrace

__all__ = [
    "Distribution",
    "Goodput",
    "Stall",
    "StallSummary",
    "TimeBin",
    "detect_stalls",
    "distribution",
    "error_class",
    "error_counts",
    "goodput",
    "inter_token_gaps",
    "percentile",
    "stall_margin",
    "throughput_timeline",
    "tpot_s",
    "ttft_distribution",
]

QUANTILES = (50.0, 90.0, 95.0, 99.0)


@dataclass(frozen=True, slots=True)
class Distribution:
    """Summary of a latency sample, in milliseconds (None when the sample is empty)."""

    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    max: float | None


@dataclass(frozen=True, slots=True)
class Stall:
    request: int
    start_s: float
    end_s: float
    cause: int
    """The request whose prefill finished inside the gap."""
    image: bool = False
    """A request with images finished its prefill inside the gap."""


@dataclass(frozen=True, slots=True)
class StallSummary:
    count: int
    total_s: float
    share_of_itl: float
    """Stalled gap time over all inter-token gap time."""
    margin_ms: float
    stalls: tuple[Stall, ...]
    image_count: int = 0
    """Stalls during which an image request's prefill finished (module docstring)."""
    image_total_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Goodput:
    slo_ttft_ms: float
    slo_itl_ms: float
    met: int
    share: float
    """Requests meeting both SLOs over requests sent."""
    rate_per_s: float


@dataclass(frozen=True, slots=True)
class TimeBin:
    start_s: float
    output_tokens_per_s: float
    requests_done: int


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile, interpolated linearly between order statistics; NaN for no values."""
    return float(numpy.percentile(values, q)) if len(values) else math.nan


def distribution(seconds: Sequence[float]) -> Distribution:
    """Milliseconds summary of a sample given in seconds."""
    ms = [s * 1000.0 for s in seconds]
    if not ms:
        return Distribution(0, None, None, None, None, None, None)
    p50, p90, p95, p99 = (percentile(ms, q) for q in QUANTILES)
    return Distribution(len(ms), sum(ms) / len(ms), p50, p90, p95, p99, max(ms))


def ttft_distribution(ok: Sequence[RequestTrace]) -> Distribution:
    """Time to first token of the requests that streamed one."""
    return distribution([t.first_token_s - t.sent_s for t in ok if t.first_token_s is not None])


def inter_token_gaps(trace: RequestTrace) -> list[tuple[float, float]]:
    """(start, end) of each gap between consecutive token chunks of one stream."""
    return list(itertools.pairwise(trace.token_times_s))


def tpot_s(trace: RequestTrace) -> float | None:
    """Mean time per output token after the first (vLLM's TPOT); None with fewer than two tokens."""
    first = trace.first_token_s
    if first is None or trace.output_tokens < 2:
        return None
    return (trace.token_times_s[-1] - first) / (trace.output_tokens - 1)


def stall_margin(traces: Sequence[RequestTrace]) -> float:
    """Two median TPOTs, at least 1 ms (module docstring)."""
    tpots = [v for t in traces if t.ok and (v := tpot_s(t)) is not None]
    return max(0.001, 2 * percentile(tpots, 50.0)) if tpots else 0.001


def detect_stalls(traces: Sequence[RequestTrace], margin_s: float) -> StallSummary:
    """Gaps in any stream during which another request's prefill finished (module docstring)."""
    firsts = sorted((first, t.index) for t in traces if (first := t.first_token_s) is not None)
    times = [f for f, _ in firsts]
    with_images = {t.index for t in traces if t.images}
    stalls, gap_total = [], 0.0
    for trace in traces:
        for start, end in inter_token_gaps(trace):
            gap_total += end - start
            lo = bisect.bisect_right(times, start + margin_s)
            hi = bisect.bisect_right(times, end)
            causes = [firsts[i][1] for i in range(lo, hi) if firsts[i][1] != trace.index]
            if causes:
                stalls.append(Stall(trace.index, start, end, causes[0], image=not with_images.isdisjoint(causes)))
    total = sum(s.end_s - s.start_s for s in stalls)
    share = total / gap_total if gap_total else 0.0
    image = [s for s in stalls if s.image]
    return StallSummary(
        len(stalls), total, share, margin_s * 1000.0, tuple(stalls), len(image), sum(s.end_s - s.start_s for s in image)
    )


def goodput(traces: Sequence[RequestTrace], slo_ttft_ms: float, slo_itl_ms: float, duration_s: float) -> Goodput:
    """Requests that succeeded within the TTFT SLO and whose TPOT met the ITL SLO."""
    met = 0
    for t in traces:
        first, per_token = t.first_token_s, tpot_s(t)
        if t.ok and first is not None and (first - t.sent_s) * 1000 <= slo_ttft_ms:
            met += per_token is None or per_token * 1000 <= slo_itl_ms
    share = met / len(traces) if traces else 0.0
    return Goodput(slo_ttft_ms, slo_itl_ms, met, share, met / duration_s if duration_s > 0 else 0.0)


def throughput_timeline(traces: Sequence[RequestTrace], duration_s: float, bins: int = 60) -> tuple[TimeBin, ...]:
    """Output tokens per second and completed requests in equal time bins over the run."""
    width = max(duration_s, 1e-9) / bins
    tokens, done = [0] * bins, [0] * bins
    for t in traces:
        for at, count in zip(t.token_times_s, t.token_counts, strict=True):
            tokens[min(bins - 1, int(at / width))] += count
        if t.ok:
            done[min(bins - 1, int(t.done_s / width))] += 1
    return tuple(TimeBin(i * width, tokens[i] / width, done[i]) for i in range(bins))


def error_counts(traces: Sequence[RequestTrace]) -> dict[str, int]:
    return dict(Counter(t.error for t in traces if t.error is not None))


def error_class(kind: str) -> Literal["client", "server"]:
    """`client` when the server refused the request as invalid (HTTP 4xx: too many images, an image it
    cannot decode, an image for a text-only model); `server` for every other failure of a request."""
    return "client" if kind.startswith("http-4") else "server"
