"""validate, plan, render and serve with `slots=<name>`: several engines on one host."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from appliance.cli.common import err, findings, out
from appliance.compat.matrix import load_matrix
from appliance.errors import ConfigError, HostRefusal
from appliance.host.discovery import HostFacts, discover_host
from appliance.slots.declare import load_slots, slots_choice
from appliance.slots.plan import HostPlan, fit_problems, owned, plan_host

__all__ = ["host_plan", "plan_slots", "refuse_launch", "render_slots", "serve_slots", "validate_slots", "wanted"]


def wanted(args: argparse.Namespace) -> bool:
    """Whether the command line selects a slots file."""
    return slots_choice(args.overrides) is not None


def host_plan(args: argparse.Namespace) -> HostPlan:
    """Every slot validated and planned, the whole host checked; ConfigError lists every problem."""
    name = slots_choice(args.overrides) or ""
    slots = load_slots(name, args.site_dir)
    return plan_host(slots, args.overrides, load_matrix(), cpus=sorted(os.sched_getaffinity(0)), site_dir=args.site_dir)


def validate_slots(args: argparse.Namespace) -> int:
    """`appliance validate slots=<name>`: one ok line per slot, or every problem."""
    plan = host_plan(args)
    host = discover_host()
    if problems := fit_problems(plan, host):
        raise ConfigError(tuple(problems))
    refuse_launch(plan, host)
    if args.json:
        out.print_json(data=findings(plan.warnings) | {"slots": _summary(plan)})
        return 0
    for warning in plan.warnings:
        err.print(warning.render(), markup=False)
    what = owned(plan.slots)
    for slot in plan.slots:
        v = slot.validated
        out.print(
            f"ok: slot {slot.name}: {v.checkpoint.checkpoint} on {v.row.mesh} ({v.row.status}), "
            f"{what[slot.name]}, port {slot.plan.port}, config {slot.plan.config_hash}",
            markup=False,
        )
    out.print(f"ok: {len(plan.slots)} slots on host {plan.host} ({plan.name}, {plan.hash})", markup=False)
    return 0


def refuse_launch(plan: HostPlan, host: HostFacts) -> None:
    """What `serve` would refuse before it binds or spawns any slot (preflight/launch.py), as one HostRefusal."""
    from appliance.preflight.launch import launch_checks

    devices = bool(host.boards)
    found = [p for slot in plan.slots for p in launch_checks(slot.plan, os.environ, devices=devices).errors]
    if found:
        raise HostRefusal(tuple(dict.fromkeys(found)))  # the slots share the control port: said once


def plan_slots(args: argparse.Namespace) -> int:
    """`appliance plan slots=<name>`: each slot's exact engine launch."""
    plan = host_plan(args)
    refuse_launch(plan, discover_host())
    if args.json:
        out.print_json(
            data={
                "name": plan.name,
                "host": plan.host,
                "hash": plan.hash,
                "source": plan.source,
                "slots": {s.name: {"devices": s.devices, "cores": s.cores, **s.plan.to_json()} for s in plan.slots},
            }
        )
        return 0
    for warning in plan.warnings:
        err.print(warning.render(), markup=False)
    what = owned(plan.slots)
    out.print(
        f"# {plan.name}: {len(plan.slots)} slots on host {plan.host} ({plan.hash}), from {plan.source}", markup=False
    )
    for slot in plan.slots:
        p = slot.plan
        out.print(
            f"# slot {slot.name}: {p.checkpoint} on {p.mesh}, {what[slot.name]}, ready when {p.health_url} "
            f"answers, log {p.log_dir}",
            markup=False,
        )
        out.print(p.command_line(), markup=False)
    return 0


def render_slots(args: argparse.Namespace) -> int:
    """`appliance render k8s|systemd slots=<name>`: one pod per slot, or one unit serving them all."""
    plan = host_plan(args)
    if args.kind == "systemd":
        from appliance.deploy.systemd import render_systemd

        appliance = str(Path(sys.executable).with_name("appliance"))
        title = f"{plan.name}: {', '.join(s.name for s in plan.slots)} on {plan.host}"
        unit = render_systemd(
            plan.slots[0].plan,
            args.overrides,
            appliance=appliance,
            site_dir=args.site_dir,
            title=(f"{plan.name}", title),
        )
        return _write(args, {unit.name: unit.text})
    from appliance.deploy.k8s import render_k8s

    texts: dict[str, str] = {}
    for slot in plan.slots:
        base = args.name or f"tt-appliance-{slot.plan.site}"
        manifests = render_k8s(slot.validated, image=args.image, name=f"{base}-{slot.name}")
        texts[f"{manifests.name}.yaml"] = manifests.yaml()
    return _write(args, texts)


def _write(args: argparse.Namespace, texts: dict[str, str]) -> int:
    if args.out is None:
        out.print("---\n".join(texts.values()), markup=False, end="")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        (args.out / name).write_text(text)
        out.print(f"wrote {args.out / name}", markup=False)
    return 0


def serve_slots(args: argparse.Namespace) -> int:
    """`appliance serve slots=<name>`: every slot's engine under its own supervisor, one control API."""
    import asyncio

    from appliance.cli.engine_verdict import engine_accepts
    from appliance.serve import bind_control_socket, control_token, ensure_model, preflight
    from appliance.slots.serve import hold_slot_locks, run_slots

    host = discover_host()
    plan = host_plan(args)
    if problems := fit_problems(plan, host):
        raise ConfigError(tuple(problems))
    for warning in plan.warnings:
        err.print(warning.render(), markup=False)
    for slot in plan.slots:
        preflight(slot.plan, host)
    with hold_slot_locks(plan, host):
        control = bind_control_socket(plan.slots[0].plan)
        for slot in {s.plan.model_path: s for s in plan.slots}.values():  # slots may share a checkpoint
            ensure_model(slot.plan, err.console)
        for slot in plan.slots if args.probe else ():  # each slot's engine judges its own plan before any spawns
            err.print(f"slot {slot.name}:", markup=False)
            engine_accepts(slot.plan)
        token = control_token(plan.slots[0].plan)
        where = f"token file {token.file} (0600)" if token.file else f"token from ${plan.control.token_env}"
        out.print(
            f"control API: http://{plan.control.host}:{plan.control.port} ({where}), slots {plan.name}", markup=False
        )
        what = owned(plan.slots)
        for slot in plan.slots:
            out.print(
                f"slot {slot.name}: OpenAI API {slot.plan.base_url}/v1 (model {slot.plan.served_name!r}), "
                f"{what[slot.name]}",
                markup=False,
            )
        return asyncio.run(run_slots(plan, token.value, control, on_ready=_ready_line))


def _ready_line(name: str, url: str, all_ready: bool) -> None:
    out.print(f"ready: slot {name} at {url}" + ("; every slot is ready" if all_ready else ""), markup=False)


def _summary(plan: HostPlan) -> dict[str, Any]:
    what = owned(plan.slots)
    return {
        s.name: {
            "checkpoint": s.plan.checkpoint,
            "mesh": s.plan.mesh,
            "owns": what[s.name],
            "port": s.plan.port,
            "config_hash": s.plan.config_hash,
        }
        for s in plan.slots
    }
