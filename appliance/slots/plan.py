"""A slots file -> one launch plan per slot, after validating the whole host.

`plan_host` is the slots counterpart of validate + build_plan: each slot is composed, validated
against the matrix and the plugin contract, and planned as a single config would be; then the
host's devices, cores, ports and memory are checked across slots, all findings together. A
slot's plan differs from a single config's only in what the host split decides: the devices it
may see (`TT_VISIBLE_DEVICES`), its own tensor cache, cores (`VLLM_CPU_OMP_THREADS_BIND`) and log.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType

from appliance.compat.matrix import CompatibilityMatrix
from appliance.compat.validate import ValidatedConfig, validate
from appliance.config.compose import mesh_catalog
from appliance.config.schema import ControlConfig
from appliance.errors import ConfigError, Problem
from appliance.host.discovery import HostFacts, free_disk
from appliance.plan import LaunchPlan, build_plan
from appliance.preflight.checks import GIB, disk_need, memory_need
from appliance.slots.declare import SlotsFile, compose_slot, in_slot, split_overrides
from appliance.slots.host_check import assign_cores, assign_devices, control_problems, port_problems

__all__ = ["VISIBILITY", "HostPlan", "SlotPlan", "fit_problems", "owned", "plan_host"]

VISIBILITY = "TT_VISIBLE_DEVICES"
"""The platform's device-visibility variable: the engine opens only the devices it lists."""


@dataclass(frozen=True, slots=True)
class SlotPlan:
    """One slot: its name, what it owns on the host, and its engine's launch plan."""

    name: str
    devices: tuple[int, ...]
    """Device indices (tt); empty for a cpu slot."""
    cores: tuple[int, ...]
    """CPU cores its engine is pinned to (cpu); empty for a tt slot."""
    plan: LaunchPlan
    validated: ValidatedConfig


@dataclass(frozen=True, slots=True)
class HostPlan:
    """Every slot of one slots file, validated together."""

    name: str
    source: str
    host: str
    """The conf/mesh option of the whole host."""
    slots: tuple[SlotPlan, ...]
    control: ControlConfig
    state_dir: str
    hash: str
    """Short sha256 over the slots' config hashes and what each owns."""
    warnings: tuple[Problem, ...]


def plan_host(
    slots: SlotsFile,
    overrides: Sequence[str],
    matrix: CompatibilityMatrix,
    *,
    cpus: Sequence[int],
    site_dir: Path | None = None,
) -> HostPlan:
    """Validate and plan every slot of `slots`; ConfigError lists every problem of every slot."""
    slots, common, own = split_overrides(slots, overrides)
    problems: list[Problem] = []
    validated: dict[str, ValidatedConfig] = {}
    for name in slots.slots:
        try:
            validated[name] = validate(compose_slot(slots, name, (common, own[name]), matrix, site_dir), matrix)
        except ConfigError as error:
            problems += [p if p.key.startswith("slots.") else in_slot(name, p) for p in error.problems]
    host = mesh_catalog().get(slots.host)
    if host is None:
        raise ConfigError(
            (
                *problems,
                Problem(
                    code="unknown-option",
                    key="host",
                    message=f"{slots.source}: host {slots.host!r} is not a mesh option",
                    fix="Name the whole host's mesh (t3k, galaxy, cpu)",
                ),
            )
        )
    device_problems, devices = assign_devices(slots, host, validated)
    core_problems, cores = assign_cores(slots, validated, cpus)
    problems += device_problems + core_problems
    if validated:
        problems += port_problems(validated) + control_problems(validated)
    if problems:
        raise ConfigError(tuple(problems))
    plans = tuple(_slot_plan(name, v, devices.get(name, ()), cores.get(name, ())) for name, v in validated.items())
    first = plans[0].plan
    return HostPlan(
        name=slots.name,
        source=slots.source,
        host=slots.host,
        slots=plans,
        control=first.control,
        state_dir=first.state_dir,
        hash=_hash(plans),
        warnings=tuple(in_slot(s.name, w) for s in plans for w in s.plan.warnings),
    )


def fit_problems(host_plan: HostPlan, host: HostFacts) -> list[Problem]:
    """The slots' summed host memory (engines and CPU KV caches), hugepages and cache disk against this host."""
    needs = [memory_need(s.plan) for s in host_plan.slots]
    # A TT slots file validated away from its host (no boards here) says nothing about this disk.
    on_host = bool(host.boards) or all(s.plan.engine == "cpu" for s in host_plan.slots)
    problems = _disk_problems(host_plan) if on_host else []
    total = sum(n for n, _, _ in needs)
    available = host.mem_available_bytes
    if available is not None and total > available and any(hard for _, _, hard in needs):
        parts = ", ".join(
            f"{s.name} {n / GIB:.1f} GiB ({why})" for s, (n, why, _) in zip(host_plan.slots, needs, strict=True)
        )
        problems.append(
            Problem(
                code="slots-memory",
                key="slots",
                message=f"{host_plan.name}: the slots need {total / GIB:.1f} GiB of "
                f"host memory ({parts}); {available / GIB:.1f} GiB is available",
                fix="Lower engine.env.VLLM_CPU_KVCACHE_SPACE per slot or serve fewer slots",
            )
        )
    pages = sum(len(s.devices) for s in host_plan.slots)
    if host.boards and pages and (host.hugepages_1g is None or host.hugepages_1g.free < pages):
        free = 0 if host.hugepages_1g is None else host.hugepages_1g.free
        problems.append(
            Problem(
                code="slots-hugepages",
                key="slots",
                message=f"{host_plan.name}: the slots open {pages} device(s), one 1 GiB hugepage each; {free} are free",
                fix="Reserve more 1 GiB hugepages",
            )
        )
    return problems


def _disk_problems(host_plan: HostPlan) -> list[Problem]:
    """Summed cache needs of the slots (a checkpoint two slots share counted once) against free disk."""
    unique = {(s.plan.model_path, s.plan.env.get("TT_CACHE_PATH")): s.plan for s in host_plan.slots}
    needs = [disk_need(plan)[0] for plan in unique.values()]
    cache = Path(host_plan.slots[0].validated.config.paths.cache_dir)
    where, free = free_disk(cache)
    total = sum(n or 0 for n in needs)
    if total <= free:
        return []
    return [
        Problem(
            code="slots-disk",
            key="slots",
            message=f"{host_plan.name}: the slots' caches need {total / GIB:.1f} GiB under "
            f"{where}; {free / GIB:.1f} GiB is free",
            fix="Free space or set paths.cache_dir elsewhere",
        )
    ]


def _slot_plan(name: str, v: ValidatedConfig, devices: tuple[int, ...], cores: tuple[int, ...]) -> SlotPlan:
    plan = build_plan(v)
    env = dict(plan.env)
    if devices:
        env[VISIBILITY] = ",".join(str(d) for d in devices)
        # Two slots of one model on one mesh must not build the same tensor cache at once.
        env["TT_CACHE_PATH"] = str(Path(env["TT_CACHE_PATH"]) / "slots" / name)
    if cores:
        env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(str(c) for c in cores)
    plan = replace(plan, env=MappingProxyType(env), log_dir=str(Path(plan.log_dir) / name))
    return SlotPlan(name, devices, cores, plan, v)


def _hash(plans: tuple[SlotPlan, ...]) -> str:
    text = "|".join(f"{s.name}:{s.plan.config_hash}:{s.devices}:{s.cores}" for s in plans)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def owned(plans: Sequence[SlotPlan]) -> Mapping[str, str]:
    """Slot name -> what it owns on the host, as plans and status print it."""
    return {
        s.name: (f"devices {','.join(map(str, s.devices))}" if s.devices else f"cores {','.join(map(str, s.cores))}")
        for s in plans
    }
