"""Percentile maths, goodput, throughput bins and decode-stall detection on synthetic traces."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from appliance.loadtest.generator import RequestTrace
from appliance.loadtest.stats import (
    detect_stalls,
    distribution,
    error_counts,
    goodput,
    percentile,
    stall_margin,
    throughput_timeline,
    tpot_s,
)

MS = 0.001


def trace(index: int, sent: float, times: list[float], error: str | None = None) -> RequestTrace:
    return RequestTrace(
        index=index,
        api="completion",
        structured=False,
        logprobs=False,
        penalties=False,
        shared_prefix=False,
        prompt_tokens_planned=100,
        prompt_tokens=100,
        output_tokens_planned=len(times),
        output_tokens=len(times),
        planned_s=None,
        sent_s=sent,
        token_times_s=tuple(times),
        token_counts=(1,) * len(times),
        done_s=times[-1] if times else sent,
        error=error,
    )


def steady(index: int, start: float, count: int, step: float = 10 * MS, sent: float | None = None) -> RequestTrace:
    return trace(index, start - 5 * MS if sent is None else sent, [start + i * step for i in range(count)])


def test_percentiles_interpolate_linearly_between_order_statistics() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 4.0
    assert percentile(values, 50) == pytest.approx(2.5)
    assert percentile(values, 90) == pytest.approx(3.7)
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))


def test_percentiles_agree_with_numpy_on_random_samples() -> None:
    rng = random.Random(3)
    for size in (2, 5, 101, 1000):
        sample = [rng.lognormvariate(0, 1) for _ in range(size)]
        for q in (1.0, 50.0, 90.0, 95.0, 99.0, 99.9):
            assert percentile(sample, q) == pytest.approx(float(np.percentile(sample, q)))


def test_a_distribution_is_in_milliseconds_and_empty_without_samples() -> None:
    dist = distribution([0.010, 0.020, 0.030])
    assert (dist.count, dist.mean, dist.p50, dist.max) == (3, pytest.approx(20.0), pytest.approx(20.0), 30.0)
    empty = distribution([])
    assert empty.count == 0 and empty.mean is None and empty.p99 is None


def test_tpot_is_the_mean_gap_after_the_first_token() -> None:
    assert tpot_s(steady(0, 1.0, 11)) == pytest.approx(10 * MS)
    assert tpot_s(steady(0, 1.0, 1)) is None


def test_a_prefill_that_finishes_inside_a_decode_gap_is_a_stall_of_that_stream() -> None:
    # Stream 0 decodes every 10 ms, then waits 60 ms: request 1's prefill ran in between and its
    # first token came 50 ms into the gap (phase-exclusive scheduling).
    a = trace(0, 0.0, [0.10, 0.11, 0.12, 0.18, 0.19])
    b = trace(1, 0.115, [0.17, 0.18, 0.19])
    summary = detect_stalls([a, b], margin_s=20 * MS)
    assert summary.count == 1
    stall = summary.stalls[0]
    assert (stall.request, stall.cause) == (0, 1)
    assert (stall.start_s, stall.end_s) == (0.12, 0.18)
    assert summary.total_s == pytest.approx(0.06)
    gap_time = (0.19 - 0.10) + (0.19 - 0.17)
    assert summary.share_of_itl == pytest.approx(0.06 / gap_time)
    assert summary.margin_ms == pytest.approx(20.0)


def test_a_first_token_delivered_with_the_streams_own_token_is_mixed_scheduling_not_a_stall() -> None:
    # The step that finished request 1's prefill also decoded stream 0: its token came 0.3 ms earlier.
    a = trace(0, 0.0, [0.10, 0.11, 0.12, 0.17, 0.18])
    b = trace(1, 0.115, [0.1703, 0.18])
    assert detect_stalls([a, b], margin_s=20 * MS).count == 0


def test_a_gap_that_only_overlaps_a_prefill_still_in_progress_is_not_a_stall() -> None:
    a = trace(0, 0.0, [0.10, 0.15, 0.16])
    b = trace(1, 0.12, [0.30])  # still prefilling when stream 0 got its token at 0.15
    assert detect_stalls([a, b], margin_s=10 * MS).count == 0


def test_a_stream_never_stalls_on_its_own_first_token_and_a_gap_counts_once() -> None:
    a = trace(0, 0.0, [0.10, 0.20])
    b, c = trace(1, 0.11, [0.15]), trace(2, 0.11, [0.16])
    summary = detect_stalls([a, b, c], margin_s=10 * MS)
    assert summary.count == 1 and summary.stalls[0].cause == 1
    assert detect_stalls([a], margin_s=10 * MS).count == 0


def test_a_first_token_arriving_with_the_gaps_closing_token_still_counts() -> None:
    a = trace(0, 0.0, [0.10, 0.20])
    assert detect_stalls([a, trace(1, 0.11, [0.20])], margin_s=10 * MS).count == 1


def test_the_stall_margin_is_two_median_tpots_with_a_floor() -> None:
    traces = [steady(0, 0.0, 11, 4 * MS), steady(1, 0.0, 11, 6 * MS), steady(2, 0.0, 11, 10 * MS)]
    assert stall_margin(traces) == pytest.approx(12 * MS)
    assert stall_margin([steady(0, 0.0, 11, 0.1 * MS)]) == pytest.approx(1 * MS)
    assert stall_margin([]) == pytest.approx(1 * MS)


def test_goodput_counts_requests_within_both_slos_over_the_run() -> None:
    fast = steady(0, 0.1, 11, 10 * MS, sent=0.0)  # TTFT 100 ms, TPOT 10 ms
    slow_first = steady(1, 3.0, 11, 10 * MS, sent=0.0)  # TTFT 3 s
    slow_decode = steady(2, 0.1, 11, 300 * MS, sent=0.0)  # TPOT 300 ms
    failed = trace(3, 0.0, [0.1], error="http-500")
    result = goodput([fast, slow_first, slow_decode, failed], slo_ttft_ms=2000, slo_itl_ms=200, duration_s=4.0)
    assert (result.met, result.share, result.rate_per_s) == (1, 0.25, 0.25)


def test_the_throughput_timeline_keeps_every_token_and_completion() -> None:
    traces = [steady(i, 0.1 * i, 50) for i in range(10)]
    bins = throughput_timeline(traces, duration_s=2.0, bins=20)
    width = 2.0 / 20
    assert len(bins) == 20 and bins[1].start_s == pytest.approx(width)
    assert sum(b.output_tokens_per_s * width for b in bins) == pytest.approx(500)
    assert sum(b.requests_done for b in bins) == 10


def test_errors_are_counted_by_kind() -> None:
    traces = [trace(0, 0, [], "timeout"), trace(1, 0, [], "http-503"), trace(2, 0, [], "timeout"), steady(3, 0.1, 3)]
    assert error_counts(traces) == {"timeout": 2, "http-503": 1}
