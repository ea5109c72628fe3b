"""PNG plots of one or more load reports, overlaid so two runs compare at a glance.

Figures are built with matplotlib's object API on the Agg canvas: no pyplot global state, no display.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from appliance.loadtest.report import LoadReport
from appliance.loadtest.stats import inter_token_gaps

__all__ = ["write_plots", "write_step_plot"]


def write_plots(reports: Sequence[LoadReport], out_dir: Path) -> tuple[Path, ...]:
    """ttft_cdf.png, itl_cdf.png, throughput.png and stalls.png in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return (
        _save(_cdf(reports, "Time to first token", _ttfts), out_dir / "ttft_cdf.png"),
        _save(_cdf(reports, "Inter-token latency", _itls), out_dir / "itl_cdf.png"),
        _save(_throughput(reports), out_dir / "throughput.png"),
        _save(_stall_timeline(reports), out_dir / "stalls.png"),
    )


def write_step_plot(reports: Sequence[LoadReport], path: Path) -> Path:
    """Admitted requests' TTFT p99 and the shed rate against the offered rate, one line per traffic-step report."""
    figure = Figure(figsize=(10, 4.2), layout="constrained")
    ttft, shed = figure.subplots(1, 2)
    for report in reports:
        rows = [r for r in report.steps if r.priority is None]
        offered = [r.offered_per_s for r in rows]
        ttft.plot(offered, [(r.ttft.p99 or 0.0) / 1000 for r in rows], marker="o", label=report.run.label)
        shed.plot(
            offered,
            [r.shed / report.step_plan.step_s if report.step_plan else 0.0 for r in rows],
            marker="o",
            label=report.run.label,
        )
    if reports:
        ttft.axhline(reports[0].workload.slo_ttft_ms / 1000, color="tab:red", linestyle="--", label="TTFT SLO")
    ttft.set(title="Admitted requests: TTFT p99", xlabel="offered requests/s", ylabel="seconds")
    shed.set(title="Shed (429) rate", xlabel="offered requests/s", ylabel="requests/s")
    for axes in (ttft, shed):
        _finish(axes)
    path.parent.mkdir(parents=True, exist_ok=True)
    return _save(figure, path)


def _save(figure: Figure, path: Path) -> Path:
    FigureCanvasAgg(figure)
    figure.savefig(path, dpi=110)
    return path


def _ttfts(report: LoadReport) -> list[float]:
    return [(t.first_token_s - t.sent_s) * 1000 for t in report.traces if t.ok and t.first_token_s is not None]


def _itls(report: LoadReport) -> list[float]:
    return [(end - start) * 1000 for t in report.traces if t.ok for start, end in inter_token_gaps(t)]


def _cdf(reports: Sequence[LoadReport], title: str, sample: Callable[[LoadReport], list[float]]) -> Figure:
    figure = Figure(figsize=(7, 4.2), layout="constrained")
    axes = figure.add_subplot()
    for report in reports:
        values = sorted(sample(report))
        if values:
            axes.step(values, [(i + 1) / len(values) for i in range(len(values))], where="post", label=report.run.label)
    axes.set(title=f"{title} (CDF)", xlabel="milliseconds", ylabel="share of samples", ylim=(0, 1.01))
    _finish(axes)
    return figure


def _throughput(reports: Sequence[LoadReport]) -> Figure:
    figure = Figure(figsize=(7, 4.2), layout="constrained")
    axes = figure.add_subplot()
    for report in reports:
        bins = report.timeline
        axes.plot([b.start_s for b in bins], [b.output_tokens_per_s for b in bins], label=report.run.label)
    axes.set(title="Output token throughput over time", xlabel="seconds from start", ylabel="tokens/s")
    _finish(axes)
    return figure


def _stall_timeline(reports: Sequence[LoadReport]) -> Figure:
    figure = Figure(figsize=(9, 2.2 + 2.6 * len(reports)), layout="constrained")
    for row, report in enumerate(reports, start=1):
        axes = figure.add_subplot(len(reports), 1, row)
        for t in report.traces:
            if t.first_token_s is not None:
                axes.hlines(t.index, t.first_token_s, t.done_s, color="0.75", linewidth=1)
                prefill = "tab:orange" if t.images else "tab:blue"
                axes.hlines(t.index, t.sent_s, t.first_token_s, color=prefill, linewidth=3)
        for stall in report.stalls.stalls:
            axes.hlines(stall.request, stall.start_s, stall.end_s, color="tab:red", linewidth=3)
        axes.set(
            title=f"{report.run.label}: {report.stalls.count} decode stalls "
            f"({report.stalls.share_of_itl:.0%} of inter-token time); blue prefill (orange with images), "
            "red stall, grey decode",
            xlabel="seconds from start",
            ylabel="request",
        )
    return figure


def _finish(axes: Axes) -> None:
    axes.grid(alpha=0.3)
    if axes.get_legend_handles_labels()[0]:
        axes.legend()
