"""`appliance` command line: the only module that prints or exits.

Exit codes: 0 ok, 2 invalid config, 3 cannot launch here, 4 engine or API failure,
130/143 stopped by SIGINT/SIGTERM. APPLIANCE_DEBUG=1 shows tracebacks.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic_core import to_jsonable_python
from rich.console import Console
from rich.table import Table

from appliance.compose import GROUPS, group_options
from appliance.errors import ApplianceError, ConfigError, EngineError, LaunchError, Problem
from appliance.host import discover_host
from appliance.matrix import CompatibilityMatrix, load_matrix
from appliance.plan import LaunchPlan, build_plan
from appliance.resolve import resolve_config
from appliance.validate import ValidatedConfig, validate

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
    from appliance.service import bind_control_socket, control_token, ensure_model, host_locks, preflight, run_service

    host = discover_host()
    plan = build_plan(_validated(args, load_matrix()))
    _announce(plan)
    preflight(plan, host)
    with host_locks(plan, host):
        control = bind_control_socket(plan)
        ensure_model(plan)
        token = control_token(plan)
        where = f"token file {token.file} (0600)" if token.file else f"token from ${plan.control.token_env}"
        out.print(f"control API: http://{plan.control.host}:{plan.control.port} ({where})", markup=False)
        out.print(f"OpenAI API:  {plan.base_url}/v1 (model {plan.served_name!r})", markup=False)
        return asyncio.run(run_service(plan, token.value, control))


def _announce(plan: LaunchPlan) -> None:
    for warning in plan.warnings:
        err.print(warning.render(), markup=False)
    if plan.generate:
        out.print(
            f"serving the embedded default {plan.checkpoint} on the CPU engine: a tiny random-weight model that "
            "proves the serving path (its text is noise). Use +model=<family> mesh=<mesh> on a TT host.",
            markup=False,
        )


def _cmd_status(args: argparse.Namespace) -> int:
    import httpx

    token = os.environ.get(args.token_env, "")
    if not token and args.token_file:
        token = Path(args.token_file).read_text().strip()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        reply = httpx.get(f"{args.url}/state", headers=headers, timeout=5.0)
    except httpx.HTTPError as error:
        raise EngineError(f"cannot reach the control API at {args.url}: {error}") from None
    if reply.status_code != 200:
        raise EngineError(f"{args.url}/state answered {reply.status_code}: {reply.text.strip()}")
    state = reply.json()
    if args.json:
        out.print_json(data=state)
    else:
        uptime = f"{state['uptime_s']:.0f}s" if state["uptime_s"] is not None else "-"
        out.print(
            f"{state['state']}  {state['checkpoint']} on {state['mesh']} ({state['engine']})  site {state['site']}  "
            f"pid {state['pid']}  up {uptime}  restarts {state['restarts']}  config {state['config_hash']}",
            markup=False,
        )
        if state["last_error"]:
            out.print(f"last error: {state['last_error']}", markup=False)
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
    return parser


if __name__ == "__main__":
    sys.exit(main())
