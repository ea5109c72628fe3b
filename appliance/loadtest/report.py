"""LoadReport: everything one load test measured, as a frozen value that round-trips through JSON."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pydantic
from pydantic_core import to_jsonable_python

from appliance.config.schema import WorkloadConfig
from appliance.errors import ConfigError, Problem
from appliance.loadtest.generator import RequestTrace
from appliance.loadtest.stats import (
    Distribution,
    Goodput,
    StallSummary,
    TimeBin,
    detect_stalls,
    distribution,
    error_class,
    error_counts,
    goodput,
    inter_token_gaps,
    stall_margin,
    throughput_timeline,
    tpot_s,
    ttft_distribution,
)
from appliance.loadtest.steps import StepPlan, StepRow

__all__ = ["KINDS", "KindReport", "LoadReport", "RunFacts", "load_report", "report_json", "summarize"]

KINDS = ("text", "image")
"""Request kinds a report splits its latencies by: with images or without."""


@dataclass(frozen=True, slots=True)
class RunFacts:
    """Where and how a run happened, beside its traces."""

    label: str
    target: str
    model: str
    started_at: float
    """Wall-clock start (epoch seconds)."""
    duration_s: float
    generator_cpu_s: float
    """CPU time the load generator's own process used while sending."""


@dataclass(frozen=True, slots=True)
class KindReport:
    """The latencies and goodput of one kind of request (text or image) within a run."""

    sent: int
    completed: int
    client_errors: int
    server_errors: int
    ttft: Distribution
    e2e: Distribution
    tpot: Distribution
    goodput: Goodput
    """Its share is over this kind's requests; its rate over the whole run."""
    images: int
    """Images sent (repeats included)."""
    images_reused: int


@dataclass(frozen=True, slots=True)
class LoadReport:
    run: RunFacts
    workload: WorkloadConfig
    sent: int
    completed: int
    failed: int
    errors: Mapping[str, int]
    ttft: Distribution
    itl: Distribution
    tpot: Distribution
    e2e: Distribution
    request_throughput: float
    """Completed requests per second."""
    output_throughput: float
    """Generated tokens per second."""
    total_throughput: float
    """Prompt plus generated tokens per second."""
    goodput: Goodput
    stalls: StallSummary
    timeline: tuple[TimeBin, ...]
    send_lag: Distribution
    """How late requests left against their planned Poisson arrival (empty for a closed loop)."""
    prompt_exact_share: float
    """Share of requests whose prompt the server counted at exactly the planned length."""
    generator_cpu_share: float
    """Generator CPU seconds per wall second (1.0 is one core busy)."""
    traces: tuple[RequestTrace, ...]
    client_errors: int = 0
    """Requests the server refused as invalid (HTTP 4xx): the run goes on, and they are not server failures."""
    server_errors: int = 0
    """Every other failed request: 5xx, broken or unfinished streams, timeouts, connection failures."""
    by_kind: Mapping[str, KindReport] = field(default_factory=lambda: MappingProxyType({}))
    """Text and image requests apart (only the kinds the run sent)."""
    step_plan: StepPlan | None = None
    """The traffic step the run sent (None: the workload's own arrivals)."""
    steps: tuple[StepRow, ...] = ()
    """What each step and priority class got back (loadtest --steps)."""


def summarize(run: RunFacts, workload: WorkloadConfig, traces: Sequence[RequestTrace]) -> LoadReport:
    """The report of a finished run."""
    ok = [t for t in traces if t.ok]
    duration = max(run.duration_s, 1e-9)
    gaps = [end - start for t in ok for start, end in inter_token_gaps(t)]
    output = sum(t.output_tokens for t in ok)
    prompt = sum(t.prompt_tokens or 0 for t in ok)
    exact = sum(1 for t in traces if t.prompt_tokens is not None and t.prompt_tokens == _planned_prompt(t))
    kinds = {kind: [t for t in traces if (kind == "image") == bool(t.images)] for kind in KINDS}
    errors = Counter(error_class(t.error) for t in traces if t.error is not None)
    return LoadReport(
        run=run,
        workload=workload,
        sent=len(traces),
        completed=len(ok),
        failed=len(traces) - len(ok),
        errors=MappingProxyType(error_counts(traces)),
        ttft=ttft_distribution(ok),
        itl=distribution(gaps),
        tpot=_tpot(ok),
        e2e=_e2e(ok),
        request_throughput=len(ok) / duration,
        output_throughput=output / duration,
        total_throughput=(output + prompt) / duration,
        goodput=goodput(traces, workload.slo_ttft_ms, workload.slo_itl_ms, duration),
        stalls=detect_stalls(ok, stall_margin(ok)),
        timeline=throughput_timeline(traces, duration),
        send_lag=distribution([t.sent_s - t.planned_s for t in traces if t.planned_s is not None]),
        prompt_exact_share=exact / len(traces) if traces else 0.0,
        generator_cpu_share=run.generator_cpu_s / duration,
        traces=tuple(traces),
        client_errors=errors["client"],
        server_errors=errors["server"],
        by_kind=MappingProxyType({k: _kind(ts, workload, duration) for k, ts in kinds.items() if ts}),
    )


def _kind(traces: Sequence[RequestTrace], workload: WorkloadConfig, duration: float) -> KindReport:
    ok = [t for t in traces if t.ok]
    errors = Counter(error_class(t.error) for t in traces if t.error is not None)
    return KindReport(
        sent=len(traces),
        completed=len(ok),
        client_errors=errors["client"],
        server_errors=errors["server"],
        ttft=ttft_distribution(ok),
        e2e=_e2e(ok),
        tpot=_tpot(ok),
        goodput=goodput(traces, workload.slo_ttft_ms, workload.slo_itl_ms, duration),
        images=sum(t.images for t in traces),
        images_reused=sum(t.images_reused for t in traces),
    )


def _tpot(ok: Sequence[RequestTrace]) -> Distribution:
    return distribution([v for t in ok if (v := tpot_s(t)) is not None])


def _e2e(ok: Sequence[RequestTrace]) -> Distribution:
    return distribution([t.done_s - t.sent_s for t in ok])


def _planned_prompt(trace: RequestTrace) -> int | None:
    """The prompt length the server should count: the text's, plus its images' when they were counted."""
    if not trace.images:
        return trace.prompt_tokens_planned
    return None if trace.image_tokens_planned is None else trace.prompt_tokens_planned + trace.image_tokens_planned


def report_json(report: LoadReport) -> dict[str, Any]:
    data: dict[str, Any] = to_jsonable_python(report, fallback=dict)
    return data


_ADAPTER: pydantic.TypeAdapter[LoadReport] = pydantic.TypeAdapter(LoadReport)


def load_report(path: Path) -> LoadReport:
    """Read a report written by `appliance loadtest`; ConfigError naming the file when it is not one."""
    try:
        return _ADAPTER.validate_python(json.loads(path.read_text()))
    except OSError as error:
        problem = Problem(
            code="bad-report",
            key=str(path),
            message=error.strerror or str(error),
            fix="Pass a report.json from loadtest",
        )
    except (ValueError, pydantic.ValidationError) as error:
        first = str(error).splitlines()[0][:160]
        problem = Problem(
            code="bad-report",
            key=str(path),
            message=f"not a load report ({first})",
            fix="Pass a report.json from loadtest",
        )
    raise ConfigError((problem,))
