"""validate, plan, matrix and options: what a config means, judged offline."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pydantic_core import to_jsonable_python
from rich.table import Table

from appliance.cli import deploy, slots
from appliance.cli.common import Command, err, findings, out, validated_config
from appliance.compat.matrix import load_matrix
from appliance.config.compose import GROUPS, group_options
from appliance.plan import build_plan
from appliance.slots.declare import slot_options

__all__ = ["register"]


def _cmd_validate(args: argparse.Namespace) -> int:
    if slots.wanted(args):
        return slots.validate_slots(args)
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
        return deploy.plan_all_sites(args)
    if slots.wanted(args):
        return slots.plan_slots(args)
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
    out.print(f"slots: {' '.join(slot_options(args.site_dir))}", markup=False)
    return 0


def register(command: Command) -> None:
    """validate, plan, matrix and options."""
    for name, run, text in (
        ("validate", _cmd_validate, "check a config against the matrix and the plugin contract (offline)"),
        ("plan", _cmd_plan, "print the exact engine launch for a config"),
    ):
        cmd = command(name, run, text)
        cmd.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. +model=llama mesh=t3k")
        cmd.add_argument("--site-dir", type=Path, default=None, help="directory of fleet site files")
        cmd.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "plan":
            cmd.add_argument("--all-sites", action="store_true", help="per site: what it would boot, or why not")
    matrix = command("matrix", _cmd_matrix, "print the compatibility matrix")
    matrix.add_argument("--mesh")
    matrix.add_argument("--model", help="family or checkpoint")
    matrix.add_argument("--json", action="store_true")
    options = command("options", _cmd_options, "list the options of every config group")
    options.add_argument("--site-dir", type=Path, default=None)
