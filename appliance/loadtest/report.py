"""LoadReport: everything one load test measured, as a frozen value that round-trips through JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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
    error_counts,
    goodput,
    inter_token_gaps,
    stall_margin,
    throughput_timeline,
    tpot_s,
)

__all__ = ["LoadReport", "RunFacts", "load_report", "report_json", "summarize"]


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


def summarize(run: RunFacts, workload: WorkloadConfig, traces: Sequence[RequestTrace]) -> LoadReport:
    """The report of a finished run."""
    ok = [t for t in traces if t.ok]
    duration = max(run.duration_s, 1e-9)
    ttfts = [t.first_token_s - t.sent_s for t in ok if t.first_token_s is not None]
    gaps = [end - start for t in ok for start, end in inter_token_gaps(t)]
    tpots = [v for t in ok if (v := tpot_s(t)) is not None]
    output = sum(t.output_tokens for t in ok)
    prompt = sum(t.prompt_tokens or 0 for t in ok)
    exact = sum(1 for t in traces if t.prompt_tokens == t.prompt_tokens_planned)
    return LoadReport(
        run=run,
        workload=workload,
        sent=len(traces),
        completed=len(ok),
        failed=len(traces) - len(ok),
        errors=MappingProxyType(error_counts(traces)),
        ttft=distribution(ttfts),
        itl=distribution(gaps),
        tpot=distribution(tpots),
        e2e=distribution([t.done_s - t.sent_s for t in ok]),
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
    )


def report_json(report: LoadReport) -> dict[str, Any]:
    data: dict[str, Any] = to_jsonable_python(report, fallback=dict)
    return data


_ADAPTER: pydantic.TypeAdapter[LoadReport] = pydantic.TypeAdapter(LoadReport)


def load_report(path: Path) -> LoadReport:
    """Read a report written by `appliance loadtest`; ConfigError naming the file when it is not one."""
    try:
        return _ADAPTER.validate_python(json.loads(path.read_text()))
    except OSError as error:
        problem = Problem("bad-report", str(path), error.strerror or str(error), "Pass a report.json from loadtest")
    except (ValueError, pydantic.ValidationError) as error:
        first = str(error).splitlines()[0][:160]
        problem = Problem("bad-report", str(path), f"not a load report ({first})", "Pass a report.json from loadtest")
    raise ConfigError((problem,))
