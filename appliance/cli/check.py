"""`appliance` subcommands for host preflight and the pilot checklist: check, api-contract."""

from __future__ import annotations

import argparse
from pathlib import Path

from appliance.cli.common import Command, err, out
from appliance.compat.matrix import load_matrix
from appliance.compat.resolve import resolve_config
from appliance.compat.validate import ValidatedConfig, validate
from appliance.errors import ConfigError, Problem
from appliance.host.discovery import HostFacts, discover_host
from appliance.plan import LaunchPlan, build_plan
from appliance.preflight.results import CheckResult

__all__ = ["host_checks_for_serve", "register"]


def host_checks_for_serve(validated: ValidatedConfig, plan: LaunchPlan, host: HostFacts) -> tuple[CheckResult, ...]:
    """Serve's blocking host checks: a failure is a LaunchError; warnings are printed, all are returned."""
    from appliance.preflight.checks import require_host_ready
    from appliance.preflight.results import HostCheckInput

    if plan.engine == "tt":  # tt-smi names the processes that hold a device; the CPU engine opens none
        host = discover_host(tt_smi="tt-smi")
    results = require_host_ready(HostCheckInput(validated, plan, host))
    for result in results:
        if result.status in ("warn", "unknown"):
            err.print(f"{result.status}[{result.id}] {result.summary}. {result.fix}".rstrip(), markup=False)
    return results


def _cmd_check(args: argparse.Namespace) -> int:
    """Exit 1 when a check fails: the host or the engine is not ready for this config."""
    from appliance.cli.engine_verdict import installed_classes
    from appliance.preflight.pilot import PilotOptions, run_pilot
    from appliance.preflight.report import report_json, report_markdown, verdict_line

    host = discover_host(args.host_root, tt_smi="tt-smi")
    matrix = load_matrix()
    composed = resolve_config(tuple(args.overrides), matrix, lambda: host, site_dir=args.site_dir)
    installed = installed_classes(composed, matrix) if args.probe else None
    validated = validate(composed, matrix, installed=installed)
    options = PilotOptions(engine_url=args.engine_url, releases=args.releases, contract=args.contract, probe=args.probe)
    report = run_pilot(validated, build_plan(validated), host, options)
    if args.report:
        try:
            args.report.write_text(report_markdown(report))
        except OSError as error:
            raise ConfigError(
                (
                    Problem(
                        code="report-unwritable",
                        key="--report",
                        message=f"{args.report}: {error.strerror}",
                        fix="Choose a writable path",
                    ),
                )
            ) from None
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

    from appliance.preflight.api_contract import contract_json, record_contract

    text = json.dumps(contract_json(record_contract(args.engine_url)), indent=2) + "\n"
    if args.out is None:
        out.print(text, markup=False, end="")
        return 0
    args.out.write_text(text)
    out.print(f"wrote {args.out}", markup=False)
    return 0


def register(command: Command) -> None:
    """check and api-contract: host preflight and the five-point pilot checklist."""
    from appliance.engines.releases import RELEASES_FILE
    from appliance.preflight.api_contract import CONTRACT_FILE

    check = command("check", _cmd_check)
    check.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. +model=llama mesh=t3k")
    check.add_argument("--site-dir", type=Path, default=None, help="directory of fleet site files")
    check.add_argument("--json", action="store_true", help="the pilot report as JSON")
    check.add_argument("--report", type=Path, help="also write the pilot report as Markdown to this file")
    check.add_argument("--engine-url", help="running engine for the API check (default: the config's own port)")
    check.add_argument("--releases", default=str(RELEASES_FILE), help="vLLM release list file, or `index` (PyPI)")
    check.add_argument("--contract", type=Path, default=CONTRACT_FILE, help="recorded client contract (JSON)")
    check.add_argument("--host-root", type=Path, default=Path("/"), help="read /dev and /sys from a recorded tree")
    check.add_argument(
        "--no-probe",
        dest="probe",
        action="store_false",
        help="skip asking the engine's own config code (engine.config)",
    )
    record = command("api-contract", _cmd_api_contract)
    record.add_argument("--engine-url", default="http://127.0.0.1:8000", help="the running engine to record")
    record.add_argument("--out", type=Path, help="write it here (e.g. build/openapi-contract.json)")
