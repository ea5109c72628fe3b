"""serve and status: boot and supervise the engine; ask a running appliance how it is."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic_core import to_jsonable_python

from appliance.cli import check
from appliance.cli.common import Command, err, out, validated_config
from appliance.compat.matrix import load_matrix
from appliance.errors import ConfigError, EngineError, Problem
from appliance.host import discover_host
from appliance.plan import LaunchPlan, build_plan

if TYPE_CHECKING:
    from appliance.observe.metrics_window import LoadSummary

__all__ = ["control_token", "register"]


def _cmd_serve(args: argparse.Namespace) -> int:
    import asyncio

    from appliance.serve import bind_control_socket, control_token, ensure_model, host_locks, preflight, run_service

    host = discover_host()
    validated = validated_config(args, load_matrix())
    plan = build_plan(validated)
    _announce(plan, validated.family.description)
    preflight(plan, host)
    checks = check.host_checks_for_serve(validated, plan, host)
    with host_locks(plan, host):
        control = bind_control_socket(plan)
        ensure_model(plan)
        token = control_token(plan)
        where = f"token file {token.file} (0600)" if token.file else f"token from ${plan.control.token_env}"
        out.print(f"control API: http://{plan.control.host}:{plan.control.port} ({where})", markup=False)
        out.print(f"OpenAI API:  {plan.base_url}/v1 (model {plan.served_name!r})", markup=False)
        return asyncio.run(run_service(plan, token.value, control, checks))


def _announce(plan: LaunchPlan, description: str) -> None:
    for warning in plan.warnings:
        err.print(warning.render(), markup=False)
    if plan.generate:
        out.print(
            f"serving the embedded {plan.checkpoint} on the CPU engine: {description}. "
            "Use +model=<family> mesh=<mesh> on a TT host.",
            markup=False,
        )


def control_token(args: argparse.Namespace) -> str:
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

    token = control_token(args)
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
    from appliance.observe.engine_metrics import parse_metrics
    from appliance.observe.metrics_window import FAMILIES, summarize

    return summarize([parse_metrics(page, 0.0, keep=FAMILIES)])


def _load_line(load: LoadSummary, limit: int | None) -> str:
    def pct(value: Any) -> str:
        return "n/a" if value is None else f"{value.p50 * 1000:.1f}/{value.p99 * 1000:.1f} ms"

    def count(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.0f}"

    kv = "n/a" if load.kv_usage is None else f"{load.kv_usage:.1%}"
    return (f"running {count(load.running)}/{limit}  waiting {count(load.waiting)}  KV {kv}  since start: TTFT p50/p99 "
            f"{pct(load.ttft)}  ITL {pct(load.itl)}  e2e {pct(load.e2e)}")  # fmt: skip


def register(command: Command) -> None:
    """serve and status."""
    serve = command("serve", _cmd_serve, "boot and supervise the engine with the control API")
    serve.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. +model=llama mesh=t3k")
    serve.add_argument("--site-dir", type=Path, default=None, help="directory of fleet site files")
    status = command("status", _cmd_status, "print the state of a running appliance")
    status.add_argument("--url", default="http://127.0.0.1:8100")
    status.add_argument("--token-env", default="APPLIANCE_TOKEN")
    status.add_argument("--token-file", help="token file that `serve` printed")
    status.add_argument("--json", action="store_true")
