"""`appliance` subcommands for load testing: loadtest and compare."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from appliance.cli.common import Command, err, out, validated_config
from appliance.compat.matrix import load_matrix
from appliance.plan import build_plan

if TYPE_CHECKING:
    from appliance.config.schema import WorkloadConfig
    from appliance.loadtest.report import LoadReport
    from appliance.loadtest.steps import StepPlan, StepRow

__all__ = ["register"]


def _cmd_loadtest(args: argparse.Namespace) -> int:
    import asyncio
    import time

    from appliance.config.compose import compose_config
    from appliance.loadtest.generator import RunWindow
    from appliance.loadtest.render import write_reports
    from appliance.loadtest.run import LoadTarget, run_loadtest, run_step_load
    from appliance.loadtest.schedcompare import SCHEDULERS, compare_schedulers

    cfg = compose_config(args.overrides, site_dir=args.site_dir).config
    workload = _with_slo(cfg.workload, args.slo_ttft_ms)
    window = RunWindow(args.duration or workload.duration_s, args.max_requests or workload.max_requests, args.drain)
    out_dir = args.out or Path(f"loadtest-{workload.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    step = _step_plan(args, workload)
    reports: Sequence[LoadReport]
    with _LoadProgressBar() as progress:
        if args.compare_scheduler:
            say = progress.console.print
            run = compare_schedulers(args.overrides, workload, window, out_dir, progress=progress.update, announce=say)
            reports, names = asyncio.run(run), tuple(label for label, _ in SCHEDULERS)
        else:
            url = args.url or build_plan(validated_config(args, load_matrix())).base_url
            target = LoadTarget(url.rstrip("/"), args.label or f"{workload.name}@{url}", cfg.serving.api_key_env)
            one = (
                run_loadtest(workload, target, window, progress.update)
                if step is None
                else run_step_load(workload, step, target, args.drain, progress.update)
            )
            reports, names = (asyncio.run(one),), ("report",)
    if step is not None:
        _print_steps(reports[0].steps)
    _print_load(reports, write_reports(reports, out_dir, names))
    return 0


def _with_slo(workload: WorkloadConfig, slo_ttft_ms: float | None) -> WorkloadConfig:
    """The workload with `--slo-ttft-ms` in place of its own TTFT SLO, when given."""
    from dataclasses import replace

    from appliance.errors import ConfigError
    from appliance.loadtest.steps import positive

    if slo_ttft_ms is None:
        return workload
    if problems := positive("--slo-ttft-ms", slo_ttft_ms):
        raise ConfigError(tuple(problems))
    return replace(workload, slo_ttft_ms=slo_ttft_ms)


def _step_plan(args: argparse.Namespace, workload: WorkloadConfig) -> StepPlan | None:
    """The traffic step of `--steps` (None without it); ConfigError naming a flag that is wrong."""
    from appliance.errors import ConfigError, Problem
    from appliance.loadtest.steps import step_plan

    if args.steps is None:
        return None
    if args.compare_scheduler:
        clash = "a traffic step runs against one URL"
        raise ConfigError((Problem(code="bad-flag", key="--steps", message=clash, fix="Drop --compare-scheduler"),))
    rate = workload.rate_per_s if args.rate is None else args.rate
    return step_plan(args.steps, args.step_s, rate, args.classes, args.priority_header)


def _print_steps(rows: Sequence[StepRow]) -> None:
    from appliance.loadtest.render import STEP_COLUMNS, step_cells

    table = Table(*STEP_COLUMNS, title="traffic step")
    for row in rows:
        table.add_row(*step_cells(row))
    out.print(table)


def _cmd_compare(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from appliance.loadtest.render import write_reports
    from appliance.loadtest.report import load_report

    reports = [load_report(path) for path in args.reports]
    if reports[0].run.label == reports[1].run.label:  # e.g. two runs of the same workload and URL
        reports = [replace(r, run=replace(r.run, label=p.stem)) for r, p in zip(reports, args.reports, strict=True)]
    out_dir = args.out or Path(f"compare-{args.reports[0].stem}-{args.reports[1].stem}")
    _print_load(reports, write_reports(reports, out_dir))
    return 0


class _LoadProgressBar:
    """A rich progress bar fed by the load tester's LoadProgress callbacks."""

    def __enter__(self) -> _LoadProgressBar:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=err.console,
        )
        self.console = self._bar.console
        self._bar.__enter__()
        self._task = self._bar.add_task("starting", total=None, detail="")
        return self

    def update(self, p: Any) -> None:
        if p.phase in ("prompts", "warm-up"):
            self._bar.reset(self._task, total=p.total, description=f"{p.phase} ({p.total} requests)", detail="")
            return
        detail = f"sent {p.sent}, failed {p.failed}"
        self._bar.update(self._task, total=p.total, completed=p.done, description=p.phase, detail=detail)

    def __exit__(self, *exc: object) -> None:
        self._bar.__exit__(None, None, None)


def _print_load(reports: Sequence[Any], files: Sequence[Path]) -> None:
    from appliance.loadtest.render import format_number as num
    from appliance.loadtest.render import metric_rows

    pair = len(reports) == 2
    table = Table("metric", "unit", *(r.run.label for r in reports), *(("delta", "delta %") if pair else ()))
    for row in metric_rows(reports):
        cells = [num(v) for v in row.values]
        if pair and row.delta:
            colour = "green" if (row.delta > 0) == row.higher_is_better else "red"
            cells += [f"[{colour}]{num(row.delta)}[/]", f"[{colour}]{num(row.percent)}[/]"]
        elif pair:
            cells += [num(row.delta), num(row.percent)]
        table.add_row(row.name, row.unit, *cells)
    out.print(table)
    out.print(f"wrote {', '.join(str(f) for f in files)}", markup=False)


def register(command: Command) -> None:
    """loadtest and compare: the workload mix against a server, and two reports side by side."""
    load = command("loadtest", _cmd_loadtest)
    load.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. workload=mixed workload.rate_per_s=4")
    load.add_argument("--site-dir", type=Path, default=None, help="directory of fleet site files")
    target = load.add_mutually_exclusive_group()
    target.add_argument("--url", help="OpenAI API base URL (default: this config's engine)")
    phased = "boot the CPU engine with mixed, then phased scheduling; the same workload on both"
    target.add_argument("--compare-scheduler", action="store_true", help=phased)
    load.add_argument("--duration", type=float, help="send window in seconds (default workload.duration_s)")
    load.add_argument("--max-requests", type=int, help="request limit (default workload.max_requests)")
    load.add_argument("--drain", type=float, default=120.0, help="seconds in-flight requests may finish after")
    load.add_argument("--label", help="name of this run in reports")
    step = load.add_argument_group("traffic step (open loop, Poisson arrivals, each step its own rate)")
    step.add_argument("--steps", help="step rates as multiples of --rate, e.g. 0.5,1,2,3: sends a traffic step")
    step.add_argument("--step-s", type=float, default=30.0, help="seconds each step sends (default 30)")
    step.add_argument("--rate", type=float, help="the base rate in requests/s (default workload.rate_per_s)")
    step.add_argument("--classes", help="priority classes and their weights, e.g. high=1,low=3 (default: none)")
    step.add_argument("--priority-header", default="X-Priority", help="header carrying the class (default X-Priority)")
    load.add_argument("--slo-ttft-ms", type=float, help="goodput's TTFT SLO (default workload.slo_ttft_ms)")
    load.add_argument("--out", type=Path, help="report directory (default loadtest-<workload>-<time>)")
    compare = command("compare", _cmd_compare)
    compare.add_argument("reports", nargs=2, type=Path, metavar="REPORT.json", help="two load reports (report.json)")
    compare.add_argument("--out", type=Path, help="directory for report.md and plots")
