"""validate, plan, matrix and options: what a config means, judged offline."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.cli.common import Command, composed_config, err, findings, out
from appliance.compat.fit import fit_of
from appliance.compat.images import image_lines
from appliance.compat.matrix import load_matrix
from appliance.compat.validate import validate
from appliance.config.compose import GROUPS, group_options
from appliance.errors import ConfigError
from appliance.slots.declare import slot_options, slots_choice

if TYPE_CHECKING:
    from appliance.compat.validate import ValidatedConfig
    from appliance.engines.config_probe import EngineVerdict
    from appliance.plan import LaunchPlan
    from appliance.preflight.launch import LaunchChecks

__all__ = ["register"]


def _cmd_validate(args: argparse.Namespace) -> int:
    if slots_choice(args.overrides) is not None:
        from appliance.cli.slots import validate_slots

        return validate_slots(args)
    matrix = load_matrix()
    composed = composed_config(args, matrix)
    try:
        validated = validate(composed, matrix, against=args.against)
    except ConfigError as error:
        fit = fit_of(error.problems)
        if args.json:
            out.print_json(data=findings(error.problems, fit))
        for problem in error.problems:
            err.print(problem.render(), markup=False)
        err.print(f"fit: {fit.line()}", markup=False)
        return 2
    launch = _launch(validated)
    found = validated.warnings + launch.problems
    fit = fit_of(found)
    # The config is valid (its own problems are warnings); what refuses it now are facts of this host: exit 3.
    refused = 3 if any(p.severity == "error" for p in found) else 0
    if args.json:
        out.print_json(data=findings(found, fit) | {"host_only": list(launch.host_only)})
        return refused
    for problem in found:
        err.print(problem.render(), markup=False)
    if refused:
        err.print(f"fit: {fit.line()}", markup=False)
        return refused
    row, state = validated.row, validated.state
    under = f", under vllm-tt-plugin {state.label}" if state else ""
    out.print(
        f"ok: {validated.checkpoint.checkpoint} on {row.mesh} ({row.status}), engine={validated.engine}, "
        f"max_context={validated.max_context}, max_concurrency={validated.max_concurrency}, "
        f"config {validated.composed.config_hash}{under}",
        markup=False,
    )
    for line in image_lines(validated.images):
        out.print(line, markup=False)
    out.print(_host_only_line(launch, args.overrides), markup=False)
    out.print(f"fit: {fit.line()}", markup=False)
    return 0


def _launch(validated: ValidatedConfig) -> LaunchChecks:
    """What `serve` would refuse here before it binds or spawns (preflight/launch.py), beside the config's verdict."""
    import os

    from appliance.host.discovery import discover_host
    from appliance.plan import build_plan
    from appliance.preflight.launch import launch_checks

    devices = validated.engine == "tt" and bool(discover_host().boards)
    return launch_checks(build_plan(validated), os.environ, devices=devices)


def _host_only_line(launch: LaunchChecks, overrides: list[str]) -> str:
    command = " ".join(["appliance check", *overrides])
    return f"host-only (judged on the serving host by serve, or now by `{command}`): {', '.join(launch.host_only)}"


def _cmd_plan(args: argparse.Namespace) -> int:
    # Imported here: a verdict does not pay for the fleet and slots planners (issue 16).
    from appliance.cli.deploy import plan_all_sites
    from appliance.cli.engine_verdict import print_verdict, refused, validated_for, verdict_json
    from appliance.cli.slots import plan_slots
    from appliance.plan import build_plan

    if args.all_sites:
        return plan_all_sites(args)
    if slots_choice(args.overrides) is not None:
        return plan_slots(args)
    validated = validated_for(args, load_matrix(), args.probe)
    plan = build_plan(validated)
    launch = _launch(validated)
    for problem in launch.problems:
        err.print(problem.render(), markup=False)
    if launch.errors:
        if args.json:
            out.print_json(data=findings(launch.problems, fit_of(launch.problems)))
        return 3
    verdict = _probe(plan) if args.probe else None
    if args.json:
        out.print_json(data=plan.to_json() | ({"probe": verdict_json(verdict)} if verdict else {}))
    else:
        _print_plan(plan)
        out.print(f"# {_host_only_line(launch, args.overrides)}", markup=False)
    if verdict is None:
        return 0
    if not args.json:
        print_verdict(verdict)
    if not verdict.accepted:
        err.print(refused(verdict).problems[0].render(), markup=False)
        return 2
    return 0


def _probe(plan: LaunchPlan) -> EngineVerdict:
    """The engine's verdict, with the embedded model built first (the engine reads its config.json)."""
    from appliance.cli.engine_verdict import ask_engine
    from appliance.host.discovery import discover_host
    from appliance.serve import ensure_model, preflight

    host = discover_host()
    preflight(plan, host)
    ensure_model(plan)
    return ask_engine(plan, host.boards if plan.engine == "tt" else (), Path(plan.state_dir) / "locks")


def _print_plan(plan: LaunchPlan) -> None:
    for warning in plan.warnings:
        err.print(warning.render(), markup=False)
    out.print(f"# {plan.checkpoint} on {plan.mesh} (site {plan.site}, config {plan.config_hash})", markup=False)
    out.print(f"# ready when {plan.health_url} answers, within {plan.ready_timeout_s:.0f}s", markup=False)
    if plan.plugin_state:
        out.print(f"# judged under vllm-tt-plugin state {plan.plugin_state}", markup=False)
    if share := plan.host_share:
        cores = f"the host's less the {share.reserve_cores} lowest" if share.reserve_cores else "every core"
        out.print(
            f"# host share: the engine and its probe in a cgroup of their own at CPU weight {share.weight} "
            f"(an ordinary process: 100), on {cores}",
            markup=False,
        )
    for change in plan.adjustments:
        how = "set in this plan" if change.explicit else "the plugin's doing"
        out.print(f"# the plugin adjusts ({how}): {change.effect}", markup=False)
    for line in image_lines(plan.images):
        out.print(f"# {line}", markup=False)
    if plan.media is not None:
        out.print(f"# {plan.media.line()}", markup=False)
    out.print(plan.command_line(), markup=False)


def _cmd_matrix(args: argparse.Namespace) -> int:
    """Rows with their fit at the row's own limits, under the pinned plugin state or --against's."""
    from rich.table import Table  # here: a verdict prints no table

    from appliance.compat.fit import fit_row
    from appliance.compat.state_set import load_states

    matrix, state = load_matrix(), load_states().select(args.against)
    rows = [
        (f, c, d, fit_row(None if d.mesh == "cpu" else state, f.architectures[c.architecture], d))
        for f, c, d in matrix.rows()
        if (args.mesh is None or d.mesh == args.mesh) and (args.model in (None, f.family, c.checkpoint))
    ]
    if args.json:
        out.print_json(
            data=[
                {
                    "family": f.family,
                    "checkpoint": c.checkpoint,
                    **_row(d),
                    "fit": {"bucket": fit.bucket, "reasons": list(fit.reasons), "unverified": list(fit.unverified)},
                }
                for f, c, d, fit in rows
            ]
        )
        return 0
    table = Table(
        "family",
        "checkpoint",
        "mesh",
        "status",
        "context",
        "concurrency",
        "dp",
        "precisions",
        "verdict",
        title=f"under vllm-tt-plugin {state.label}",
    )
    for f, c, d, fit in rows:
        needs = " ".join(
            n for n in (f"fw≥{d.firmware_min}" if d.firmware_min else "", f"kmd≥{d.kmd_min}" if d.kmd_min else "") if n
        )
        verdict = fit.line() + (f" ({needs})" if needs else "")
        table.add_row(
            f.family,
            c.checkpoint,
            d.mesh,
            d.status,
            str(d.max_context),
            str(d.max_concurrency),
            str(d.data_parallel),
            ",".join(d.precisions),
            verdict,
        )
    out.print(table)
    return 0


def _row(row: Any) -> dict[str, Any]:
    from pydantic_core import to_jsonable_python

    data: dict[str, Any] = to_jsonable_python(row, fallback=dict)
    return data


def _cmd_options(args: argparse.Namespace) -> int:
    for group in GROUPS:
        out.print(f"{group}: {' '.join(group_options(group, args.site_dir))}", markup=False)
    out.print(f"slots: {' '.join(slot_options(args.site_dir))}", markup=False)
    return 0


def register(command: Command) -> None:
    """validate, plan, matrix and options."""
    for name, run in (("validate", _cmd_validate), ("plan", _cmd_plan)):
        cmd = command(name, run)
        cmd.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. +model=llama mesh=t3k")
        cmd.add_argument("--site-dir", type=Path, default=None, help="directory of fleet site files")
        cmd.add_argument("--json", action="store_true", help="machine-readable output")
        cmd.add_argument("--against", metavar="vllm=X", help="judge under another recorded vllm-tt-plugin state")
        if name == "plan":
            cmd.add_argument("--all-sites", action="store_true", help="per site: what it would boot, or why not")
            cmd.add_argument("--probe", action="store_true", help="also ask the engine's own config code")
    matrix = command("matrix", _cmd_matrix)
    matrix.add_argument("--mesh", help="only the rows of this mesh option")
    matrix.add_argument("--model", help="family or checkpoint")
    matrix.add_argument("--json", action="store_true", help="machine-readable output")
    matrix.add_argument("--against", metavar="vllm=X", help="judge under another recorded vllm-tt-plugin state")
    options = command("options", _cmd_options)
    options.add_argument("--site-dir", type=Path, default=None, help="directory of fleet site files")
