"""`appliance` command line: with its cli_* subcommand modules, the only code that prints or exits.

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
from rich.table import Table

from appliance import cli_check, cli_deploy, cli_load
from appliance.cli_common import err, findings, out, validated_config
from appliance.compose import GROUPS, group_options
from appliance.errors import ApplianceError, ConfigError, EngineError, LaunchError, Problem
from appliance.host import discover_host
from appliance.matrix import load_matrix
from appliance.plan import LaunchPlan, build_plan

if TYPE_CHECKING:
    from appliance.metrics_window import LoadSummary

__all__ = ["main"]

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
            out.print_json(data=findings(error.problems))
        for problem in error.problems:
            err.print(problem.render(), markup=False)
    else:
        err.print(f"error: {error}", markup=False)


def _cmd_validate(args: argparse.Namespace) -> int:
    validated = validated_config(args, load_matrix())
    if args.json:
        out.print_json(data=findings(validated.warnings))
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
        return cli_deploy.plan_all_sites(args)
    plan = build_plan(validated_config(args, load_matrix()))
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
    validated = validated_config(args, load_matrix())
    plan = build_plan(validated)
    _announce(plan)
    preflight(plan, host)
    checks = cli_check.host_checks_for_serve(validated, plan, host)
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
    for module in (cli_deploy, cli_check, cli_load):
        module.register(command)
    return parser


if __name__ == "__main__":
    sys.exit(main())
