"""Rates and latency percentiles over a sliding window of /metrics samples.

Percentiles come from histogram bucket deltas inside the window, never from lifetime totals, so
they describe the last minute rather than everything since boot. Every increase is summed pair by
pair, so a counter reset (engine restart) inside the window counts from zero instead of going
negative. A family absent from the page is reported as missing (None), never as 0.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from appliance.observe.engine_metrics import KV_USAGE, EngineSample, Histogram

__all__ = [
    "FAMILIES",
    "TPOT",
    "TTFT",
    "LoadSummary",
    "MetricsWindow",
    "Percentiles",
    "StepStats",
    "quantile",
    "share_within",
    "summarize",
]

TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
E2E = "vllm:e2e_request_latency_seconds"
TPOT = "vllm:request_time_per_output_token_seconds"
STEP_TOKENS = "vllm:iteration_tokens_total"
PROMPT = "vllm:prompt_tokens"
PROMPT_COMPUTED = "vllm:prompt_tokens_by_source{source=local_compute}"
GENERATION = "vllm:generation_tokens"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
_WATCHED = (RUNNING, WAITING, KV_USAGE, PROMPT, GENERATION, TTFT, ITL, E2E, STEP_TOKENS)
_FAILED = ("vllm:request_success{finished_reason=error}", "vllm:request_success{finished_reason=abort}")
FAMILIES = frozenset(
    {
        *_WATCHED,
        "vllm:prompt_tokens_by_source",
        "vllm:prefix_cache_hits",
        "vllm:prefix_cache_queries",
        "vllm:num_preemptions",
        "vllm:request_success",
        "vllm:cache_config_info",
        TPOT,
    }
)
"""Every family a summary reads: pass it to parse_metrics(keep=...) to parse only those."""


@dataclass(frozen=True, slots=True)
class Percentiles:
    """Estimates (linear inside a bucket, as Prometheus' histogram_quantile does)."""

    p50: float
    p95: float
    p99: float
    observations: float


@dataclass(frozen=True, slots=True)
class StepStats:
    """Engine steps (scheduler iterations) from the tokens-per-step histogram."""

    steps: float
    tokens_per_step: float
    p50_tokens: float
    p95_tokens: float
    distribution: tuple[tuple[float, float], ...]
    """(bucket upper bound, steps in that bucket), empty buckets left out."""
    prompt_share: float | None
    """Share of step tokens that were prompt (prefill) rather than generated (decode)."""


@dataclass(frozen=True, slots=True)
class LoadSummary:
    window_s: float | None
    """Span the rates and percentiles cover; None: one sample, so lifetime totals since engine start."""
    engines: int
    running: float | None
    waiting: float | None
    kv_usage: float | None
    """Fraction 0-1, weighted by each engine's capacity."""
    kv_capacity_tokens: float | None
    prompt_tps: float | None
    generation_tps: float | None
    prompt_tps_history: tuple[float, ...]
    generation_tps_history: tuple[float, ...]
    prefix_hit_rate: float | None
    """Hits / queries over the window (tokens); None when there were no queries or no prefix cache."""
    preemptions: float | None
    failed_requests: float | None
    """Requests that finished with error or abort inside the window."""
    ttft: Percentiles | None
    itl: Percentiles | None
    e2e: Percentiles | None
    steps: StepStats | None
    restarted: bool
    """The engine restarted inside the window (its counters went back)."""
    missing: tuple[str, ...]
    """Watched families the latest page lacks."""


def quantile(hist: Histogram, q: float) -> float | None:
    """The q-quantile of a (delta) histogram; None when it holds no observations."""
    total = hist.cumulative[-1]
    if total <= 0:
        return None
    rank = q * total
    lower_bound, below = 0.0, 0.0
    for bound, count in zip(hist.bounds, hist.cumulative, strict=True):
        if count >= rank:
            if math.isinf(bound):
                return lower_bound  # beyond the last finite bucket: its bound is all that is known
            inside = count - below
            return lower_bound + (bound - lower_bound) * ((rank - below) / inside if inside else 1.0)
        lower_bound, below = bound, count
    return lower_bound


def share_within(hist: Histogram, bound: float) -> float | None:
    """The share of a (delta) histogram's observations at most `bound` (linear inside a bucket, as
    `quantile`); None when it holds no observations."""
    total = hist.cumulative[-1]
    if total <= 0:
        return None
    lower_bound, below = 0.0, 0.0
    for upper, count in zip(hist.bounds, hist.cumulative, strict=True):
        if bound < upper:
            inside = 0.0 if math.isinf(upper) else (bound - lower_bound) / (upper - lower_bound)
            return (below + (count - below) * max(inside, 0.0)) / total
        lower_bound, below = upper, count
    return 1.0


def _increase(samples: Sequence[EngineSample], key: str) -> float | None:
    if key not in samples[-1].counters:
        return None
    if len(samples) == 1:
        return samples[-1].counters[key]
    total = 0.0
    for before, after in pairwise(samples):
        now = after.counters.get(key)
        if now is not None:
            earlier = before.counters.get(key, 0.0)
            total += now - earlier if now >= earlier and before.started == after.started else now
    return total


def _hist_increase(samples: Sequence[EngineSample], key: str) -> Histogram | None:
    last = samples[-1].histograms.get(key)
    if last is None:
        return None
    if len(samples) == 1:
        return last
    total: Histogram | None = None
    for before, after in pairwise(samples):
        now, earlier = after.histograms.get(key), before.histograms.get(key)
        if now is None:
            continue
        step = now if earlier is None or before.started != after.started else now.since(earlier)
        total = step if total is None or total.bounds != step.bounds else total.plus(step)
    return total


def _percentiles(hist: Histogram | None) -> Percentiles | None:
    if hist is None:
        return None
    p50, p95, p99 = (quantile(hist, q) for q in (0.5, 0.95, 0.99))
    if p50 is None or p95 is None or p99 is None:
        return None
    return Percentiles(p50, p95, p99, hist.cumulative[-1])


def _steps(samples: Sequence[EngineSample]) -> StepStats | None:
    hist = _hist_increase(samples, STEP_TOKENS)
    if hist is None or hist.count <= 0:
        return None
    buckets = [(b, c - p) for b, c, p in zip(hist.bounds, hist.cumulative, (0.0, *hist.cumulative[:-1]), strict=True)]
    # Cache hits are prompt tokens no step computed; newer vLLM counts the computed ones apart.
    computed = PROMPT_COMPUTED if PROMPT_COMPUTED in samples[-1].counters else PROMPT
    prompt, generated = _increase(samples, computed), _increase(samples, GENERATION)
    work = (prompt or 0.0) + (generated or 0.0)
    return StepStats(
        steps=hist.count,
        tokens_per_step=hist.sum / hist.count,
        p50_tokens=quantile(hist, 0.5) or 0.0,
        p95_tokens=quantile(hist, 0.95) or 0.0,
        distribution=tuple((b, n) for b, n in buckets if n > 0),
        prompt_share=prompt / work if prompt is not None and work > 0 else None,
    )


def _rate(samples: Sequence[EngineSample], key: str) -> float | None:
    span = samples[-1].at - samples[0].at
    if len(samples) < 2 or span <= 0:
        return None
    increase = _increase(samples, key)
    return None if increase is None else increase / span


def _history(samples: Sequence[EngineSample], key: str) -> tuple[float, ...]:
    return tuple(r for pair in pairwise(samples) if (r := _rate(pair, key)) is not None)


def summarize(samples: Sequence[EngineSample], rate_samples: int = 4) -> LoadSummary:
    """The summary of `samples` (oldest first, at least one); rates use the last `rate_samples`."""
    last = samples[-1]
    recent = samples[-rate_samples:]
    hits, queries = _increase(samples, "vllm:prefix_cache_hits"), _increase(samples, "vllm:prefix_cache_queries")
    failed = [v for k in _FAILED if (v := _increase(samples, k)) is not None]
    return LoadSummary(
        window_s=last.at - samples[0].at if len(samples) > 1 else None,
        engines=len(last.per_engine),
        running=last.gauges.get(RUNNING),
        waiting=last.gauges.get(WAITING),
        kv_usage=last.gauges.get(KV_USAGE),
        kv_capacity_tokens=last.kv_capacity_tokens,
        prompt_tps=_rate(recent, PROMPT),
        generation_tps=_rate(recent, GENERATION),
        prompt_tps_history=_history(samples, PROMPT),
        generation_tps_history=_history(samples, GENERATION),
        prefix_hit_rate=hits / queries if hits is not None and queries else None,
        preemptions=_increase(samples, "vllm:num_preemptions"),
        failed_requests=sum(failed) if failed else None,
        ttft=_percentiles(_hist_increase(samples, TTFT)),
        itl=_percentiles(_hist_increase(samples, ITL)),
        e2e=_percentiles(_hist_increase(samples, E2E)),
        steps=_steps(samples),
        restarted=any(
            a.started != b.started or any(b.counters.get(k, v) < v for k, v in a.counters.items())
            for a, b in pairwise(samples)
        ),
        missing=tuple(k for k in _WATCHED if not any(k in m for m in (last.counters, last.gauges, last.histograms))),
    )


class MetricsWindow:
    """The samples of the last `span_s` seconds of one appliance."""

    def __init__(self, span_s: float = 60.0) -> None:
        self.span_s = span_s
        self._samples: deque[EngineSample] = deque()

    def add(self, sample: EngineSample) -> None:
        self._samples.append(sample)
        while self._samples[0].at < sample.at - self.span_s:
            self._samples.popleft()

    def summary(self) -> LoadSummary | None:
        return summarize(tuple(self._samples)) if self._samples else None

    def share_within(self, key: str, bound: float) -> float | None:
        """The share of the window's observations of histogram `key` at most `bound`."""
        hist = _hist_increase(tuple(self._samples), key) if self._samples else None
        return None if hist is None else share_within(hist, bound)
