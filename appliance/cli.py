"""`appliance` command line: the only module that prints or exits.

Exit codes: 0 ok, 2 invalid config, 3 cannot launch here, 4 engine or API failure,
130/143 stopped by SIGINT/SIGTERM. APPLIANCE_DEBUG=1 shows tracebacks.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic_core import to_jsonable_python
from rich.console import Console
from rich.table import Table

from appliance.checks import CheckResult
from appliance.compose import GROUPS, group_options
from appliance.errors import ApplianceError, ConfigError, EngineError, LaunchError, Problem
from appliance.host import HostFacts, discover_host
from appliance.matrix import CompatibilityMatrix, load_matrix
from appliance.plan import LaunchPlan, build_plan
from appliance.resolve import resolve_config
from appliance.validate import ValidatedConfig, validate

if TYPE_CHECKING:
    from appliance.metrics_window import LoadSummary

__all__ = ["main"]

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)
_EXIT = {ConfigError: 2, LaunchError: 3, EngineError: 4}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `appliance` console script."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per health probe is noise
    try:
        code: int = args.run(args)
        return code
    except ApplianceError as error:
        if os.environ.get("APPLIANCE_DEBUG") == "1":
            raise
        _report(error, getattr(args, "json", False))
        return next(code for kind, code in _EXIT.items() if isinstance(error, kind))


def _report(error: ApplianceError, as_json: bool) -> None:
    if isinstance(error, ConfigError):
        if as_json:
            out.print_json(data=_findings(error.problems))
        for problem in error.problems:
            err.print(problem.render(), markup=False)
    else:
        err.print(f"error: {error}", markup=False)


def _findings(problems: Sequence[Problem]) -> dict[str, Any]:
    items = [
        {"code": p.code, "severity": p.severity, "key": p.key, "message": p.message, "fix": p.fix} for p in problems
    ]
    return {"ok": not any(p.severity == "error" for p in problems), "findings": items}


def _validated(args: argparse.Namespace, matrix: CompatibilityMatrix) -> ValidatedConfig:
    return validate(resolve_config(tuple(args.overrides), matrix, discover_host, site_dir=args.site_dir), matrix)


def _cmd_validate(args: argparse.Namespace) -> int:
    validated = _validated(args, load_matrix())
    if args.json:
        out.print_json(data=_findings(validated.warnings))
    else:
        for warning in validated.warnings:
            err.print(warning.render(), markup=False)
        row = validated.row
        out.print(
            f"ok: {validated.checkpoint.checkpoint} on {row.mesh} ({row.status}), engine={validated.engine}, "
            f"max_context={validated.max_context}, max_concurrency={validated.max_concurrency}, "
            f"config {validated.composed.config_hash}",
            markup=False,
        )
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    if args.all_sites:
        return _plan_all_sites(args)
    plan = build_plan(_validated(args, load_matrix()))
    if args.json:
        out.print_json(data=plan.to_json())
        return 0
    for warning in plan.warnings:
        err.print(warning.render(), markup=False)
    out.print(f"# {plan.checkpoint} on {plan.mesh} (site {plan.site}, config {plan.config_hash})", markup=False)
    out.print(f"# ready when {plan.health_url} answers, within {plan.ready_timeout_s:.0f}s", markup=False)
    out.print(plan.command_line(), markup=False)
    return 0


def _cmd_matrix(args: argparse.Namespace) -> int:
    matrix = load_matrix()
    rows = [
        (f, c, d)
        for f, c, d in matrix.rows()
        if (args.mesh is None or d.mesh == args.mesh) and (args.model in (None, f.family, c.checkpoint))
    ]
    if args.json:
        out.print_json(data=[{"family": f.family, "checkpoint": c.checkpoint, **_row(d)} for f, c, d in rows])
        return 0
    table = Table("family", "checkpoint", "mesh", "status", "context", "concurrency", "dp", "precisions", "verdict")
    for f, c, d in rows:
        needs = [f"fw≥{d.firmware_min}" if d.firmware_min else "", f"kmd≥{d.kmd_min}" if d.kmd_min else ""]
        verdict = "runnable" + (f" ({' '.join(n for n in needs if n)})" if any(needs) else "")
        if not f.architectures[c.architecture].registered:
            verdict = "incompatible: no TT class registered"
        table.add_row(f.family, c.checkpoint, d.mesh, d.status, str(d.max_context), str(d.max_concurrency),
                      str(d.data_parallel), ",".join(d.precisions), verdict)  # fmt: skip
    out.print(table)
    return 0


def _row(row: Any) -> dict[str, Any]:
    data: dict[str, Any] = to_jsonable_python(row, fallback=dict)
    return data


def _cmd_options(args: argparse.Namespace) -> int:
    for group in GROUPS:
        out.print(f"{group}: {' '.join(group_options(group, args.site_dir))}", markup=False)
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    import asyncio

    from appliance.service import bind_control_socket, control_token, ensure_model, host_locks, preflight, run_service

    host = discover_host()
    validated = _validated(args, load_matrix())
    plan = build_plan(validated)
    _announce(plan)
    preflight(plan, host)
    checks = _require_host_ready(validated, plan, host)
    with host_locks(plan, host):
        control = bind_control_socket(plan)
        ensure_model(plan)
        token = control_token(plan)
        where = f"token file {token.file} (0600)" if token.file else f"token from ${plan.control.token_env}"
        out.print(f"control API: http://{plan.control.host}:{plan.control.port} ({where})", markup=False)
        out.print(f"OpenAI API:  {plan.base_url}/v1 (model {plan.served_name!r})", markup=False)
        return asyncio.run(run_service(plan, token.value, control, checks))


def _announce(plan: LaunchPlan) -> None:
    for warning in plan.warnings:
        err.print(warning.render(), markup=False)
    if plan.generate:
        out.print(
            f"serving the embedded default {plan.checkpoint} on the CPU engine: a tiny random-weight model that "
            "proves the serving path (its text is noise). Use +model=<family> mesh=<mesh> on a TT host.",
            markup=False,
        )


def _control_token(args: argparse.Namespace) -> str:
    token = os.environ.get(args.token_env, "")
    if not token and args.token_file:
        try:
            token = Path(args.token_file).read_text().strip()
        except OSError as error:
            problem = Problem("token-file", "--token-file", f"cannot read {args.token_file}: {error.strerror}",
                              "Pass the token file `serve` printed, or set the token env var")  # fmt: skip
            raise ConfigError((problem,)) from None
    return token


def _cmd_status(args: argparse.Namespace) -> int:
    import httpx

    token = _control_token(args)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        reply = httpx.get(f"{args.url}/state", headers=headers, timeout=5.0)
    except httpx.HTTPError as error:
        raise EngineError(f"cannot reach the control API at {args.url}: {error}") from None
    if reply.status_code != 200:
        raise EngineError(f"{args.url}/state answered {reply.status_code}: {reply.text.strip()}")
    state = reply.json()
    try:
        metrics = httpx.get(f"{args.url}/engine/metrics", headers=headers, timeout=5.0)
        load = _load_once(metrics.text) if metrics.status_code == 200 else None
    except httpx.HTTPError:
        load = None  # the state above is what status promises; load is shown when it can be read
    if args.json:
        out.print_json(data=state | {"load": to_jsonable_python(load)})
    else:
        uptime = f"{state['uptime_s']:.0f}s" if state["uptime_s"] is not None else "-"
        out.print(
            f"{state['state']}  {state['checkpoint']} on {state['mesh']} ({state['engine']})  site {state['site']}  "
            f"pid {state['pid']}  up {uptime}  restarts {state['restarts']}  config {state['config_hash']}",
            markup=False,
        )
        if state["last_error"]:
            out.print(f"last error: {state['last_error']}", markup=False)
        if load is not None:
            out.print(_load_line(load, state.get("max_concurrency")), markup=False)
    return 0


def _load_once(page: str) -> LoadSummary:
    """Lifetime load from one scrape of the engine's metrics (rates need a second scrape: the console)."""
    from appliance.engine_metrics import parse_metrics
    from appliance.metrics_window import FAMILIES, summarize

    return summarize([parse_metrics(page, 0.0, keep=FAMILIES)])


def _load_line(load: LoadSummary, limit: int | None) -> str:
    def pct(value: Any) -> str:
        return "n/a" if value is None else f"{value.p50 * 1000:.1f}/{value.p99 * 1000:.1f} ms"

    def count(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.0f}"

    kv = "n/a" if load.kv_usage is None else f"{load.kv_usage:.1%}"
    return (f"running {count(load.running)}/{limit}  waiting {count(load.waiting)}  KV {kv}  since start: TTFT p50/p99 "
            f"{pct(load.ttft)}  ITL {pct(load.itl)}  e2e {pct(load.e2e)}")  # fmt: skip


def _cmd_console(args: argparse.Namespace) -> int:
    from appliance.fleet import Target, load_site_file, target
    from tui.app import make_console
    from tui.client import ConsoleClient

    entries = load_site_file(args.site_file) if args.site_file else ()
    urls = args.url or ([] if entries else ["http://127.0.0.1:8100"])
    token = _control_token(args) if urls else ""
    targets = [target(e) for e in entries] + [Target(u.split("//")[-1].rstrip("/"), u.rstrip("/"), token) for u in urls]
    if len({t.name for t in targets}) != len(targets):
        raise ConfigError((Problem("duplicate-appliance", "--url", "an appliance is listed twice", "List each once"),))
    # The terminal belongs to the console while it runs: a log line on stderr would tear its screen.
    logging.getLogger().handlers = [logging.NullHandler()]
    make_console(ConsoleClient(targets), read_only=args.read_only, refresh_s=args.refresh).run()
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="appliance", description="Config-driven vLLM serving for Tenstorrent")
    sub = parser.add_subparsers(required=True, metavar="command")

    def command(name: str, run: Callable[[argparse.Namespace], int], text: str) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, help=text, description=text)
        cmd.set_defaults(run=run)
        return cmd

    for name, run, text in (
        ("validate", _cmd_validate, "check a config against the matrix and the plugin contract (offline)"),
        ("plan", _cmd_plan, "print the exact engine launch for a config"),
        ("serve", _cmd_serve, "boot and supervise the engine with the control API"),
    ):
        cmd = command(name, run, text)
        cmd.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. +model=llama mesh=t3k")
        cmd.add_argument("--site-dir", type=Path, default=None, help="directory of fleet site files")
        if name != "serve":
            cmd.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "plan":
            cmd.add_argument("--all-sites", action="store_true", help="per site: what it would boot, or why not")
    matrix = command("matrix", _cmd_matrix, "print the compatibility matrix")
    matrix.add_argument("--mesh")
    matrix.add_argument("--model", help="family or checkpoint")
    matrix.add_argument("--json", action="store_true")
    options = command("options", _cmd_options, "list the options of every config group")
    options.add_argument("--site-dir", type=Path, default=None)
    status = command("status", _cmd_status, "print the state of a running appliance")
    status.add_argument("--url", default="http://127.0.0.1:8100")
    status.add_argument("--token-env", default="APPLIANCE_TOKEN")
    status.add_argument("--token-file", help="token file that `serve` printed")
    status.add_argument("--json", action="store_true")
    console = command("console", _cmd_console, "live operator console (Textual) for one appliance or a site")
    console.add_argument("--url", action="append", help="control API URL; repeat for several appliances")
    console.add_argument("--site-file", type=Path, help="YAML list of {name, url, token_env} (see appliance/fleet.py)")
    console.add_argument("--read-only", action="store_true", help="disable drain and restart")
    console.add_argument("--refresh", type=float, default=1.0, help="seconds between polls (default 1)")
    console.add_argument("--token-env", default="APPLIANCE_TOKEN", help="env var with the token for --url")
    console.add_argument("--token-file", help="token file that `serve` printed, for --url")
    _deploy_commands(command)
    _check_commands(command)
    _load_commands(command)
    return parser


def _plan_all_sites(args: argparse.Namespace) -> int:
    from appliance.sites import plan_sites

    sites = plan_sites(args.overrides, load_matrix(), discover_host, args.site_dir)
    if args.json:
        out.print_json(data=[{"site": s.name, "ok": s.ok, "plan": s.plan.to_json() if s.plan else None,
                              **_findings(s.problems)} for s in sites])  # fmt: skip
    for site in [] if args.json else sites:
        plan = site.plan
        head = f"{plan.checkpoint} on {plan.mesh} ({plan.engine}), config {plan.config_hash}" if plan else "invalid"
        out.print(f"site {site.name}: {head}", markup=False)
        for line in [plan.command_line()] if plan else []:
            out.print(f"  {line}", markup=False)
        for problem in site.problems:
            out.print(f"  {problem.render()}", markup=False)
    return 0 if all(s.ok for s in sites) else 2


def _cmd_sites(args: argparse.Namespace) -> int:
    from appliance.sites import list_sites

    sites = list_sites(args.site_dir)
    if args.json:
        out.print_json(data=to_jsonable_python(sites, fallback=dict))
        return 0
    for site in sites:
        groups = " ".join(f"{g}={v}" for g, v in site.groups.items())
        out.print(f"{site.name} ({site.file}) {groups}".rstrip(), markup=False)
        for key, value in site.overrides.items():
            out.print(f"  {key}={value}", markup=False)
    return 0


def _cmd_build(args: argparse.Namespace) -> int:
    from appliance.build import build_recipe, run_build
    from appliance.compose import compose_config

    if args.check_upgrade:
        return _check_upgrade(args.check_upgrade)
    recipe = build_recipe(compose_config(args.overrides, site_dir=args.site_dir))
    if args.dry_run:
        out.print(recipe.script(), markup=False, end="")
        return 0
    result = run_build(recipe, discover_host())
    out.print(f"built engine={recipe.engine} in {result.seconds:.1f}s; manifest {recipe.manifest_path}", markup=False)
    return _print_manifest(result.manifest, as_json=False)


def _check_upgrade(spec: str) -> int:
    from appliance.upgrade import check_upgrade

    report = check_upgrade(spec)
    out.print(f"vllm {report.current} -> {report.target}: {report.verdict}", markup=False)
    for finding in report.findings:
        out.print(f"  {finding.render()}", markup=False)
    return 2 if report.blocked else 0


def _cmd_manifest(args: argparse.Namespace) -> int:
    from appliance.manifest import read_manifest

    plan = build_plan(_validated(args, load_matrix()))
    manifest = read_manifest(plan.engine, plan.python, plan.config_hash, discover_host(), os.environ | plan.env)
    return _print_manifest(manifest, args.json)


def _print_manifest(manifest: Any, as_json: bool) -> int:
    """Exit 3 when the environment drifts from its pins: it cannot launch the pinned engine."""
    if as_json:
        out.print_json(data=manifest.to_json())
        return 0 if manifest.ok else 3
    out.print(f"engine {manifest.engine}: {manifest.interpreter} (Python {manifest.python}), "
              f"{len(manifest.distributions)} distributions, config {manifest.config_hash}", markup=False)  # fmt: skip
    for row in manifest.pins:
        out.print(f"  {row.name}: pinned {row.pinned}, installed {row.installed or 'nothing'}", markup=False)
    out.print("pins hold" if manifest.ok else f"drift ({len(manifest.drift)}):", markup=False)
    for line in manifest.drift:
        out.print(f"  {line}", markup=False)
    out.print(f"host: {len(manifest.host.boards)} Tenstorrent board(s), kmd {manifest.host.kmd_version or 'none'}",
              markup=False)  # fmt: skip
    return 0 if manifest.ok else 3


def _cmd_render(args: argparse.Namespace) -> int:
    if args.kind == "k8s":
        from appliance.k8s import POD_OVERRIDES, render_k8s

        pod = argparse.Namespace(**{**vars(args), "overrides": [*POD_OVERRIDES, *args.overrides]})
        manifests = render_k8s(_validated(pod, load_matrix()), image=args.image, name=args.name)
        if args.out is None:
            out.print(manifests.yaml(), markup=False, end="")
        for path in manifests.write(args.out) if args.out else ():
            out.print(f"wrote {path}", markup=False)
        return 0
    from appliance.systemd import render_systemd

    appliance = str(Path(sys.executable).with_name("appliance"))
    unit = render_systemd(build_plan(_validated(args, load_matrix())), args.overrides, appliance=appliance,
                          site_dir=args.site_dir)  # fmt: skip
    if args.out is None:
        out.print(unit.text, markup=False, end="")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / unit.name).write_text(unit.text)
    out.print(f"wrote {args.out / unit.name}; put the secrets in {unit.env_file} (mode 0600)", markup=False)
    return 0


def _deploy_commands(command: Callable[[str, Any, str], argparse.ArgumentParser]) -> None:
    """build, manifest, render and sites: engine environments and fleet deployment."""
    build = command("build", _cmd_build, "build an engine environment from its pins, then write its manifest")
    build.add_argument("--dry-run", action="store_true", help="print every step without running it")
    build.add_argument("--check-upgrade", metavar="vllm=X", help="what moving the tt engine's vLLM pin would break")
    manifest = command("manifest", _cmd_manifest, "the engine environment: pins vs installed, config hash, host")
    manifest.add_argument("--json", action="store_true")
    render = command("render", _cmd_render, "deployment files for one config: k8s manifests or a systemd unit")
    render.add_argument("kind", choices=("k8s", "systemd"))
    render.add_argument("--out", type=Path, help="write files into this directory instead of printing")
    render.add_argument("--image", default="tt-appliance:latest", help="k8s: container image with the appliance")
    render.add_argument("--name", help="k8s: resource name (default tt-appliance-<site>)")
    for cmd in (build, manifest, render):
        cmd.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. engine=cpu or site=lab-t3k")
        cmd.add_argument("--site-dir", type=Path, default=None, help="directory of fleet site files")
    sites = command("sites", _cmd_sites, "list sites with their effective overrides")
    sites.add_argument("--site-dir", type=Path, default=None)
    sites.add_argument("--json", action="store_true")


def _require_host_ready(validated: ValidatedConfig, plan: LaunchPlan, host: HostFacts) -> tuple[CheckResult, ...]:
    """Serve's blocking host checks: a failure is a LaunchError; warnings are printed, all are returned."""
    from appliance.checks import HostCheckInput, require_host_ready

    if plan.engine == "tt":  # tt-smi names the processes that hold a device; the CPU engine opens none
        host = discover_host(tt_smi="tt-smi")
    results = require_host_ready(HostCheckInput(validated, plan, host))
    for result in results:
        if result.status in ("warn", "unknown"):
            err.print(f"{result.status}[{result.id}] {result.summary}. {result.fix}".rstrip(), markup=False)
    return results


def _cmd_check(args: argparse.Namespace) -> int:
    """Exit 1 when a check fails: the host or the engine is not ready for this config."""
    from appliance.pilot import PilotOptions, run_pilot
    from appliance.report import report_json, report_markdown, verdict_line

    host = discover_host(args.host_root, tt_smi="tt-smi")
    matrix = load_matrix()
    validated = validate(resolve_config(tuple(args.overrides), matrix, lambda: host, site_dir=args.site_dir), matrix)
    options = PilotOptions(engine_url=args.engine_url, releases=args.releases, contract=args.contract)
    report = run_pilot(validated, build_plan(validated), host, options)
    if args.report:
        try:
            args.report.write_text(report_markdown(report))
        except OSError as error:
            raise ConfigError((Problem("report-unwritable", "--report", f"{args.report}: {error.strerror}",
                                       "Choose a writable path"),)) from None  # fmt: skip
    if args.json:
        out.print_json(data=report_json(report))
        return 1 if report.verdict == "fail" else 0
    for result in report.checks:
        out.print(f"{result.status:<8}{result.title}: {result.summary}", markup=False)
        if result.fix:
            out.print(f"        fix: {result.fix}", markup=False)
    out.print(verdict_line(report) + (f"; report in {args.report}" if args.report else ""), markup=False)
    return 1 if report.verdict == "fail" else 0


def _cmd_api_contract(args: argparse.Namespace) -> int:
    import json

    from appliance.api_contract import contract_json, record_contract

    text = json.dumps(contract_json(record_contract(args.engine_url)), indent=2) + "\n"
    if args.out is None:
        out.print(text, markup=False, end="")
        return 0
    args.out.write_text(text)
    out.print(f"wrote {args.out}", markup=False)
    return 0


def _check_commands(command: Callable[[str, Any, str], argparse.ArgumentParser]) -> None:
    """check and api-contract: host preflight and the five-point pilot checklist."""
    from appliance.api_contract import CONTRACT_FILE
    from appliance.releases import RELEASES_FILE

    check = command("check", _cmd_check, "host preflight and the five-point pilot checklist, with a report")
    check.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. +model=llama mesh=t3k")
    check.add_argument("--site-dir", type=Path, default=None, help="directory of fleet site files")
    check.add_argument("--json", action="store_true", help="the pilot report as JSON")
    check.add_argument("--report", type=Path, help="also write the pilot report as Markdown to this file")
    check.add_argument("--engine-url", help="running engine for the API check (default: the config's own port)")
    check.add_argument("--releases", default=str(RELEASES_FILE), help="vLLM release list file, or `index` (PyPI)")
    check.add_argument("--contract", type=Path, default=CONTRACT_FILE, help="recorded client contract (JSON)")
    check.add_argument("--host-root", type=Path, default=Path("/"), help="read /dev and /sys from a recorded tree")
    record = command("api-contract", _cmd_api_contract, "record a running engine's client contract (OpenAPI)")
    record.add_argument("--engine-url", default="http://127.0.0.1:8000")
    record.add_argument("--out", type=Path, help="write it here (e.g. build/openapi-contract.json)")


def _cmd_loadtest(args: argparse.Namespace) -> int:
    import asyncio
    import time

    from appliance.compose import compose_config
    from appliance.loadgen import RunWindow
    from appliance.loadrender import write_reports
    from appliance.loadtest import LoadTarget, run_loadtest
    from appliance.schedcompare import SCHEDULERS, compare_schedulers

    cfg = compose_config(args.overrides, site_dir=args.site_dir).config
    workload = cfg.workload
    window = RunWindow(args.duration or workload.duration_s, args.max_requests or workload.max_requests, args.drain)
    out_dir = args.out or Path(f"loadtest-{workload.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    with _LoadProgressBar() as progress:
        if args.compare_scheduler:
            say = progress.console.print
            run = compare_schedulers(args.overrides, workload, window, out_dir, progress=progress.update, announce=say)
            reports, names = asyncio.run(run), tuple(label for label, _ in SCHEDULERS)
        else:
            url = args.url or build_plan(_validated(args, load_matrix())).base_url
            target = LoadTarget(url.rstrip("/"), args.label or f"{workload.name}@{url}", cfg.serving.api_key_env)
            reports, names = (asyncio.run(run_loadtest(workload, target, window, progress.update)),), ("report",)
    _print_load(reports, write_reports(reports, out_dir, names))
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from appliance.loadrender import write_reports
    from appliance.loadreport import load_report

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

        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[detail]}"), TimeElapsedColumn(), console=err)  # fmt: skip
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
    from appliance.loadrender import format_number as num
    from appliance.loadrender import metric_rows

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


def _load_commands(command: Callable[[str, Any, str], argparse.ArgumentParser]) -> None:
    """loadtest and compare: the workload mix against a server, and two reports side by side."""
    load = command("loadtest", _cmd_loadtest, "drive a workload (conf/workload) at an OpenAI server and report")
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
    load.add_argument("--out", type=Path, help="report directory (default loadtest-<workload>-<time>)")
    compare = command("compare", _cmd_compare, "two load reports side by side, with deltas and plots")
    compare.add_argument("reports", nargs=2, type=Path, metavar="REPORT.json")
    compare.add_argument("--out", type=Path, help="directory for report.md and plots")


if __name__ == "__main__":
    sys.exit(main())
