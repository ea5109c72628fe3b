"""Rates, percentiles, resets, renames and engine merging, on /metrics pages recorded from the CPU engine.

Expected values are worked out by hand from the bucket lines of the recorded pages (quoted in
comments), not by calling the code under test a second time.
"""

from __future__ import annotations

import json
import re

import pytest

from appliance.observe.engine_metrics import Histogram, parse_metrics
from appliance.observe.metrics_window import MetricsWindow, quantile, summarize
from appliance.observe.scheduler_log import SchedulerLog
from testkit import paths
from testkit.recorded_appliance import DATA, LOG_LINES, PAGES

OFFSETS = json.loads((DATA / "metrics-times.json").read_text())["offsets_s"]
# A capture from a different, freshly booted engine (5 requests): after page 5 it reads as a restart.
FRESH = (paths.DATA / "vllm-cpu-metrics.txt").read_text()


def value(page: str, series: str) -> float:
    """A series' value read straight from the exposition text, independently of the parser."""
    return float(re.search(rf"^{re.escape(series)}\{{[^}}]*\}} (\S+)$", page, re.MULTILINE).group(1))  # type: ignore[union-attr]


def sample(i: int):  # type: ignore[no-untyped-def]
    return parse_metrics(PAGES[i], OFFSETS[i])


def test_types_come_from_the_type_lines_so_iteration_tokens_total_is_a_histogram() -> None:
    s = sample(5)
    assert "vllm:iteration_tokens_total" in s.histograms
    assert "vllm:iteration_tokens_total" not in s.counters
    assert s.counters["vllm:prompt_tokens"] == value(PAGES[5], "vllm:prompt_tokens_total")
    length = re.search(r'^vllm:request_success_total\{[^}]*finished_reason="length"[^}]*\} (\S+)$', PAGES[5], re.M)
    assert length is not None and s.counters["vllm:request_success{finished_reason=length}"] == float(length[1])


def test_a_quantile_interpolates_inside_its_bucket_like_prometheus() -> None:
    hist = Histogram((0.01, 0.02, 0.04, float("inf")), (2.0, 4.0, 5.0, 5.0), 5.0, 0.08)
    assert quantile(hist, 0.5) == pytest.approx(0.0125)  # rank 2.5 in (0.01, 0.02] holding 2
    assert quantile(hist, 0.99) == pytest.approx(0.039)  # rank 4.95 in (0.02, 0.04], 0.95 of its one
    beyond = Histogram((0.01, float("inf")), (0.0, 3.0), 3.0, 9.0)
    assert quantile(beyond, 0.5) == 0.01  # only the last finite bound is known
    assert quantile(Histogram((1.0, float("inf")), (0.0, 0.0), 0.0, 0.0), 0.5) is None


def test_percentiles_come_from_bucket_deltas_inside_the_window_not_lifetime() -> None:
    summary = summarize([sample(i) for i in range(6)])
    # TTFT buckets page 0 -> page 5 (le 0.01, 0.02, 0.04, 0.06, 0.08, 0.1): 8->11, 14->22, 30->50, 38->61,
    # 40->63, 40->64, so the window holds 3, 8, 20, 23, 23, 24 cumulative: 24 first tokens.
    assert summary.ttft is not None and summary.ttft.observations == 24
    assert summary.ttft.p50 == pytest.approx(0.02 + 0.02 * 4 / 12)  # rank 12 in (0.02, 0.04] holding 12
    assert summary.ttft.p99 == pytest.approx(0.08 + 0.02 * 0.76)  # rank 23.76 in (0.08, 0.1] holding 1
    lifetime = summarize([sample(5)])
    assert lifetime.window_s is None and lifetime.ttft is not None and lifetime.ttft.observations == 64


def test_rates_are_token_increases_over_the_elapsed_time() -> None:
    summary = summarize([sample(0), sample(1)])
    prompt = value(PAGES[1], "vllm:prompt_tokens_total") - value(PAGES[0], "vllm:prompt_tokens_total")
    generated = value(PAGES[1], "vllm:generation_tokens_total") - value(PAGES[0], "vllm:generation_tokens_total")
    assert summary.prompt_tps == pytest.approx(prompt / (OFFSETS[1] - OFFSETS[0]))
    assert summary.generation_tps == pytest.approx(generated / (OFFSETS[1] - OFFSETS[0]))
    hits = value(PAGES[1], "vllm:prefix_cache_hits_total") - value(PAGES[0], "vllm:prefix_cache_hits_total")
    queries = value(PAGES[1], "vllm:prefix_cache_queries_total") - value(PAGES[0], "vllm:prefix_cache_queries_total")
    assert summary.prefix_hit_rate == pytest.approx(hits / queries)
    assert summary.running == value(PAGES[1], "vllm:num_requests_running")


def test_the_scheduler_view_splits_steps_from_the_iteration_tokens_histogram() -> None:
    steps = summarize([sample(0), sample(5)]).steps
    assert steps is not None
    count = value(PAGES[5], "vllm:iteration_tokens_total_count") - value(PAGES[0], "vllm:iteration_tokens_total_count")
    tokens = value(PAGES[5], "vllm:iteration_tokens_total_sum") - value(PAGES[0], "vllm:iteration_tokens_total_sum")
    assert steps.steps == count and steps.tokens_per_step == pytest.approx(tokens / count)
    assert sum(n for _, n in steps.distribution) == count
    assert steps.prompt_share is not None and 0 < steps.prompt_share < 1


def test_a_counter_reset_counts_from_zero_and_flags_the_restart() -> None:
    restarted = summarize([sample(5), parse_metrics(FRESH, OFFSETS[5] + 1.0)])
    assert restarted.restarted
    assert restarted.prompt_tps == pytest.approx(value(FRESH, "vllm:prompt_tokens_total") / 1.0)  # 40, never < 0
    assert restarted.ttft is not None and restarted.ttft.observations == 5  # only the new engine's requests
    assert not summarize([sample(0), sample(5)]).restarted


def test_renamed_metrics_are_read_under_their_current_names() -> None:
    # The recorded page with the pre-rename names older vLLM exported.
    old = (
        PAGES[5]
        .replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
        .replace("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
        .replace("vllm:prefix_cache_", "vllm:gpu_prefix_cache_")
    )
    assert "vllm:gpu_prefix_cache_hits_total" in old
    current, renamed = summarize([sample(0), sample(5)]), summarize([sample(0), parse_metrics(old, OFFSETS[5])])
    assert renamed.kv_usage == current.kv_usage and renamed.itl == current.itl
    assert renamed.prefix_hit_rate == current.prefix_hit_rate and renamed.missing == ()


def test_missing_metrics_are_reported_missing_never_zero() -> None:
    def strip(page: str) -> str:
        return "\n".join(
            line for line in page.splitlines() if "kv_cache_usage" not in line and "time_to_first" not in line
        )

    summary = summarize([parse_metrics(strip(PAGES[0]), 0.0), parse_metrics(strip(PAGES[5]), 1.0)])
    assert summary.kv_usage is None and summary.ttft is None
    assert summary.missing == ("vllm:kv_cache_usage_perc", "vllm:time_to_first_token_seconds")
    assert summary.itl is not None  # what is there is still shown


def _second_engine(page: str, kv: str, ttft_bound: str | None = None) -> str:
    """The recorded page with each family's engine-0 series repeated as engine 1 (a data-parallel pair)."""
    out: list[str] = []
    copies: list[str] = []
    for line in page.splitlines():
        if line.startswith("# HELP"):
            out += copies  # a family's lines must stay together for the exposition format
            copies = []
        out.append(line)
        if line.startswith("vllm:") and 'engine="0"' in line:
            copies.append(_as_engine_1(line, kv, ttft_bound))
    return "\n".join(out + copies) + "\n"


def _as_engine_1(line: str, kv: str, ttft_bound: str | None) -> str:
    copy = line.replace('engine="0"', 'engine="1"')
    if copy.startswith("vllm:kv_cache_usage_perc"):
        copy = copy.rsplit(" ", 1)[0] + f" {kv}"
    if ttft_bound and copy.startswith("vllm:time_to_first_token_seconds_bucket"):
        copy = copy.replace('le="0.001"', f'le="{ttft_bound}"')
    return copy.replace('kv_cache_size_tokens="2097152"', 'kv_cache_size_tokens="6291456"')


def test_data_parallel_engines_are_summed_and_kv_is_weighted_by_capacity() -> None:
    one, two = parse_metrics(PAGES[5], 0.0), parse_metrics(_second_engine(PAGES[5], "0.5"), 0.0)
    assert sorted(two.per_engine) == ["0", "1"]
    assert two.counters["vllm:prompt_tokens"] == 2 * one.counters["vllm:prompt_tokens"]
    assert two.gauges["vllm:num_requests_running"] == 2 * one.gauges["vllm:num_requests_running"]
    assert (
        two.histograms["vllm:time_to_first_token_seconds"].count
        == 2 * one.histograms["vllm:time_to_first_token_seconds"].count
    )
    kv0 = value(PAGES[5], "vllm:kv_cache_usage_perc")
    # Engine 1 has three times engine 0's capacity, so its 50 % weighs three times as much.
    assert two.gauges["vllm:kv_cache_usage_perc"] == pytest.approx((kv0 * 2097152 + 0.5 * 6291456) / 8388608)
    assert two.kv_capacity_tokens == 8388608


def test_histograms_whose_engines_disagree_on_buckets_are_not_merged() -> None:
    two = parse_metrics(_second_engine(PAGES[5], "0", ttft_bound="0.002"), 0.0)
    assert "vllm:time_to_first_token_seconds" not in two.histograms
    assert "vllm:inter_token_latency_seconds" in two.histograms
    summary = summarize([two])
    assert summary.ttft is None and "vllm:time_to_first_token_seconds" in summary.missing


def test_the_window_forgets_samples_older_than_its_span() -> None:
    window = MetricsWindow(span_s=5.0)
    for i in range(10):
        window.add(sample(i))
    summary = window.summary()
    assert summary is not None and summary.window_s is not None
    assert summary.window_s <= 5.0 and len(summary.generation_tps_history) == 4  # offsets 11.4 .. 15.8


def test_the_engine_log_splits_steps_into_prefill_and_decode() -> None:
    log = SchedulerLog(keep=len(LOG_LINES))
    for line in LOG_LINES:
        log.feed(line)
    view = log.view()
    steps = [line for line in LOG_LINES if "Iteration(" in line]
    with_prefill = [line for line in steps if not re.search(r" 0 context tokens", line)]
    assert view.steps == len(steps) and view.prefill_steps == len(with_prefill) > 0
    assert view.prefill_step_ms is not None and view.decode_step_ms is not None
    assert view.stats_line is not None and view.stats_line.startswith("Engine 000: Avg prompt throughput")
