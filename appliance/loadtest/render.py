"""Load reports as rows, Markdown and files: one run, or two side by side with their deltas."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from appliance import markdown
from appliance.loadtest.report import KINDS, KindReport, LoadReport, report_json
from appliance.loadtest.stats import Distribution
from appliance.loadtest.steps import StepRow

__all__ = [
    "STEP_COLUMNS",
    "MetricRow",
    "format_number",
    "metric_rows",
    "render_markdown",
    "step_cells",
    "write_reports",
]

STEP_COLUMNS = (
    *("step", "x", "class", "offered/s", "sent", "admitted", "adm %", "shed", "shed p50 ms", "shed p99 ms"),
    *("5xx", "4xx", "lost", "TTFT p50 ms", "TTFT p99 ms", "goodput/s"),
)
"""A traffic step's table: per step and class, what was offered and what came back."""
_LATENCIES = (("TTFT", "ttft"), ("ITL", "itl"), ("TPOT", "tpot"), ("E2E", "e2e"))
_QUANTILES = ("mean", "p50", "p90", "p95", "p99", "max")


@dataclass(frozen=True, slots=True)
class MetricRow:
    name: str
    unit: str
    values: tuple[float | None, ...]
    """One value per report, in the order given."""
    higher_is_better: bool = False

    @property
    def delta(self) -> float | None:
        """Second minus first, for a pair of reports."""
        a, b = (self.values + (None, None))[:2]
        return None if a is None or b is None else b - a

    @property
    def percent(self) -> float | None:
        a = self.values[0] if self.values else None
        delta = self.delta
        return None if delta is None or not a else 100.0 * delta / a


def metric_rows(reports: Sequence[LoadReport]) -> tuple[MetricRow, ...]:
    """The headline metrics of each report, one row per metric."""

    def row(name: str, unit: str, values: Sequence[float | None], better: bool = False) -> MetricRow:
        return MetricRow(name, unit, tuple(values), better)

    rows = [
        row(f"{label} {q}", "ms", [getattr(_dist(r, key), q) for r in reports])
        for label, key in _LATENCIES
        for q in _QUANTILES
    ]
    rows += [
        row("requests completed", "", [r.completed for r in reports], True),
        row("requests failed", "", [r.failed for r in reports]),
        row("request throughput", "req/s", [r.request_throughput for r in reports], True),
        row("output token throughput", "tok/s", [r.output_throughput for r in reports], True),
        row("total token throughput", "tok/s", [r.total_throughput for r in reports], True),
        row("goodput", "req/s", [r.goodput.rate_per_s for r in reports], True),
        row("goodput share", "%", [100 * r.goodput.share for r in reports], True),
        row("decode stalls", "", [r.stalls.count for r in reports]),
        row("decode stall time", "s", [r.stalls.total_s for r in reports]),
        row("decode stall share of ITL", "%", [100 * r.stalls.share_of_itl for r in reports]),
        row("send lag p99", "ms", [r.send_lag.p99 for r in reports]),
        row("exact prompt lengths", "%", [100 * r.prompt_exact_share for r in reports], True),
        row("generator CPU", "% of a core", [100 * r.generator_cpu_share for r in reports]),
        row("client errors (4xx)", "", [r.client_errors for r in reports]),
        row("server errors", "", [r.server_errors for r in reports]),
    ]
    if any("image" in r.by_kind for r in reports):
        rows += [
            row("decode stalls in an image prefill", "", [r.stalls.image_count for r in reports]),
            row("image prefill stall time", "s", [r.stalls.image_total_s for r in reports]),
        ]
        rows += [
            row(f"{name} ({kind})", unit, [_kind_value(r, kind, value) for r in reports], better)
            for kind in KINDS
            for name, unit, value, better in _BY_KIND
        ]
    return tuple(rows)


_BY_KIND: tuple[tuple[str, str, Callable[[KindReport], float | None], bool], ...] = (
    ("requests", "", lambda k: k.sent, False),
    ("requests completed", "", lambda k: k.completed, True),
    ("client errors (4xx)", "", lambda k: k.client_errors, False),
    ("TTFT p50", "ms", lambda k: k.ttft.p50, False),
    ("TTFT p99", "ms", lambda k: k.ttft.p99, False),
    ("E2E p50", "ms", lambda k: k.e2e.p50, False),
    ("E2E p99", "ms", lambda k: k.e2e.p99, False),
    ("TPOT p50", "ms", lambda k: k.tpot.p50, False),
    ("goodput share", "%", lambda k: 100 * k.goodput.share, True),
)
"""Rows that split text and image requests: (name, unit, value of a KindReport, higher is better)."""


def _kind_value(report: LoadReport, kind: str, value: Callable[[KindReport], float | None]) -> float | None:
    found = report.by_kind.get(kind)
    return None if found is None else value(found)


def _dist(report: LoadReport, key: str) -> Distribution:
    dist: Distribution = getattr(report, key)
    return dist


def render_markdown(reports: Sequence[LoadReport], plots: Sequence[Path] = ()) -> str:
    """A Markdown report of one run, or of several side by side (with deltas for two)."""
    labels = [r.run.label for r in reports]
    lines = [f"# Load test: {' vs '.join(labels)}", ""]
    lines += [
        f"- **{r.run.label}**: workload `{r.workload.name}` (seed {r.workload.seed}) against {r.run.target} "
        f"(model `{r.run.model}`), {r.sent} requests in {r.run.duration_s:.1f} s"
        for r in reports
    ]
    lines += ["", _table(reports), ""]
    for r in reports:
        errors = ", ".join(f"{kind} × {n}" for kind, n in sorted(r.errors.items())) or "none"
        lines += [
            f"**{r.run.label}**: errors {errors} ({r.client_errors} refused as invalid (4xx, client errors), "
            f"{r.server_errors} server errors). Goodput SLO: TTFT ≤ {r.goodput.slo_ttft_ms:.0f} ms and TPOT ≤ "
            f"{r.goodput.slo_itl_ms:.0f} ms. A decode stall is a gap in one stream inside which another request's "
            f"first token arrived more than {r.stalls.margin_ms:.1f} ms after that stream's previous token.",
            "",
        ]
    lines += [f"![{p.stem}]({p.name})" for p in plots]
    return "\n".join(lines) + "\n"


def _table(reports: Sequence[LoadReport]) -> str:
    pair = len(reports) == 2
    head = ["metric", "unit", *(r.run.label for r in reports), *(["delta", "delta %"] if pair else [])]
    rows = [
        [row.name, row.unit, *(format_number(v) for v in row.values)]
        + ([format_number(row.delta), format_number(row.percent)] if pair else [])
        for row in metric_rows(reports)
    ]
    return markdown.table(head, rows)


def format_number(value: float | None) -> str:
    """Whole numbers and large values without decimals, others with two; None as a dash."""
    if value is None:
        return "-"
    return f"{value:.0f}" if float(value).is_integer() or abs(value) >= 1000 else f"{value:.2f}"


def write_reports(reports: Sequence[LoadReport], out_dir: Path, names: Sequence[str] = ()) -> tuple[Path, ...]:
    """Write each report's JSON (under `names`, when given), the plots and report.md into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for report, name in zip(reports, names, strict=False):
        path = out_dir / f"{name}.json"
        path.write_text(json.dumps(report_json(report), indent=1))
        written.append(path)
    # matplotlib takes about a second to import: only writing a report loads it, not the run before it
    from appliance.loadtest.plots import write_plots

    plots = write_plots(reports, out_dir)
    markdown = out_dir / "report.md"
    markdown.write_text(render_markdown(reports, plots))
    return (*written, markdown, *plots)


def step_cells(row: StepRow) -> tuple[str, ...]:
    """One row of the STEP_COLUMNS table."""
    counts = (row.sent, row.admitted, 100 * row.admitted_share, row.shed, row.shed_latency.p50, row.shed_latency.p99)
    return (
        str(row.step + 1),
        format_number(row.multiple),
        row.priority or "all",
        format_number(row.offered_per_s),
        *(format_number(v) for v in counts),
        *(str(v) for v in (row.server_errors, row.rejected, row.lost)),
        *(format_number(v) for v in (row.ttft.p50, row.ttft.p99, row.goodput_per_s)),
    )
