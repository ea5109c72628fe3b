"""Whole-host validation of a slots file: who owns which devices and cores, ports, and fit.

Every finding is collected; where two slots collide, the one line names both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations

from appliance.compat.validate import ValidatedConfig
from appliance.config.schema import MeshConfig
from appliance.errors import Problem
from appliance.slots.declare import SlotsFile

__all__ = ["Assignment", "assign_cores", "assign_devices", "control_problems", "device_count", "port_problems"]

Assignment = Mapping[str, tuple[int, ...]]
"""Slot name -> the device indices (or CPU cores) it owns."""


def device_count(mesh: MeshConfig) -> int:
    """Devices a mesh opens: one per board, or the driver's count (a Galaxy's 32 chips)."""
    return mesh.devices or mesh.boards


def assign_devices(
    slots: SlotsFile, host: MeshConfig, validated: Mapping[str, ValidatedConfig]
) -> tuple[list[Problem], dict[str, tuple[int, ...]]]:
    """Each tt slot's devices: declared ones checked, then "any" slots given the first free ones."""
    problems: list[Problem] = []
    owned: dict[str, tuple[int, ...]] = {}
    total = device_count(host)
    for name, v in validated.items():
        declared, mesh = slots.slots[name].devices, v.config.mesh
        if v.engine != "tt":
            if declared not in (None, ()):
                problems.append(
                    _slot(
                        name,
                        "devices",
                        "slot-devices",
                        f"the {v.engine} engine owns no devices",
                        "Remove its devices (a CPU slot owns cores)",
                    )
                )
            continue
        if problem := _illegal_mesh(name, mesh, host, slots.host):
            problems.append(problem)
        elif isinstance(declared, tuple):
            problems += _declared(name, declared, mesh, total, slots.host)
            owned[name] = declared
    problems += _overlaps(owned, "device")
    taken = {d for devices in owned.values() for d in devices}
    for name, v in validated.items():
        if v.engine != "tt" or name in owned or _illegal_mesh(name, v.config.mesh, host, slots.host):
            continue
        need = device_count(v.config.mesh)
        free = [d for d in range(total) if d not in taken][:need]
        if len(free) < need:
            problems.append(
                _slot(
                    name,
                    "devices",
                    "slot-no-free-devices",
                    f"mesh={v.config.mesh.option} needs {need} free device(s); {len(free)} of the host's "
                    f"{total} are left after {', '.join(sorted(owned))}",
                    "Give a slot fewer devices",
                )
            )
            continue
        owned[name] = tuple(free)
        taken |= set(free)
    return problems, owned


def assign_cores(
    slots: SlotsFile, validated: Mapping[str, ValidatedConfig], cpus: Sequence[int]
) -> tuple[list[Problem], dict[str, tuple[int, ...]]]:
    """Each cpu slot's cores: declared ones checked, the rest of the host's split evenly."""
    problems: list[Problem] = []
    cpu_slots = [name for name, v in validated.items() if v.engine == "cpu"]
    owned = {n: c for n in cpu_slots if (c := slots.slots[n].cores) is not None}
    for name, cores in owned.items():
        if not cores:
            problems.append(_slot(name, "cores", "slot-no-cores", "owns no cores", "List at least one core"))
        if missing := sorted(set(cores) - set(cpus)):
            problems.append(
                _slot(
                    name,
                    "cores",
                    "slot-cores-missing",
                    f"core(s) {missing} are not this host's (it has {_ranges(cpus)})",
                    "Pick cores the appliance may run on",
                )
            )
    problems += _overlaps(owned, "core")
    rest = [n for n in cpu_slots if n not in owned]
    free = [c for c in cpus if not any(c in cores for cores in owned.values())]
    if rest and len(free) < len(rest):
        problems.append(
            Problem(
                code="slot-no-free-cores",
                key=f"slots.{rest[0]}.cores",
                message=f"slots {', '.join(rest)} need a core each; "
                f"{len(free)} of the host's {len(cpus)} are unclaimed",
                fix="Give each slot its cores",
            )
        )
    elif rest:
        share = len(free) // len(rest)
        owned |= {n: tuple(free[i * share : (i + 1) * share]) for i, n in enumerate(rest)}
    return problems, owned


def port_problems(validated: Mapping[str, ValidatedConfig]) -> list[Problem]:
    """Engine ports distinct between slots and from the control API's."""
    problems: list[Problem] = []
    for (a, va), (b, vb) in combinations(validated.items(), 2):
        if va.config.serving.port == vb.config.serving.port:
            problems.append(
                Problem(
                    code="slot-port-collision",
                    key=f"slots.{b}.serving.port",
                    message=f"slots {a} and {b} both serve on port {va.config.serving.port}",
                    fix=f"Set slots.{b}.serving.port to a free port",
                )
            )
    for name, v in validated.items():
        if v.config.serving.port == v.config.control.port:
            problems.append(
                _slot(
                    name,
                    "serving.port",
                    "slot-port-collision",
                    f"serving.port {v.config.serving.port} is the control API's port",
                    "Pick another",
                )
            )
    return problems


def control_problems(validated: Mapping[str, ValidatedConfig]) -> list[Problem]:
    """One control API serves the host: every slot must agree on it (and on the state dir its locks use)."""
    problems: list[Problem] = []
    first, *others = validated.items()
    for name, v in others:
        for key, mine, theirs in (
            ("control", v.config.control, first[1].config.control),
            ("paths.state_dir", v.config.paths.state_dir, first[1].config.paths.state_dir),
        ):
            if mine != theirs:
                problems.append(
                    Problem(
                        code="slot-control-differs",
                        key=f"slots.{name}.{key}",
                        message=f"slots {first[0]} and {name} differ in {key} ({theirs} vs {mine}); "
                        "one control API serves every slot",
                        fix=f"Set {key} once, not per slot",
                    )
                )
    return problems


def _illegal_mesh(name: str, mesh: MeshConfig, host: MeshConfig, host_option: str) -> Problem | None:
    """A slot's mesh must be a part of the host's: same architecture and board, no more devices."""
    need, total = device_count(mesh), device_count(host)
    if need > total:
        return _slot(
            name,
            "mesh",
            "slot-larger-than-host",
            f"mesh={mesh.option} takes {need} device(s); host {host_option} has {total}",
            "Choose a smaller mesh for the slot",
        )
    if (mesh.arch, mesh.board_name) != (host.arch, host.board_name):
        return _slot(
            name,
            "mesh",
            "slot-mesh-not-on-host",
            f"mesh={mesh.option} ({mesh.board_name}) is not part of host {host_option} ({host.board_name} boards)",
            f"Choose a mesh of {host.board_name} boards",
        )
    return None


def _declared(name: str, devices: tuple[int, ...], mesh: MeshConfig, total: int, host: str) -> list[Problem]:
    problems = []
    if len(devices) != device_count(mesh) or len(set(devices)) != len(devices):
        problems.append(
            _slot(
                name,
                "devices",
                "slot-devices-mesh",
                f"mesh={mesh.option} takes {device_count(mesh)} "
                f"distinct device(s), {list(devices)} lists {len(devices)}",
                "List that many or `any`",
            )
        )
    if outside := sorted(d for d in devices if d >= total):
        problems.append(
            _slot(
                name,
                "devices",
                "slot-devices-missing",
                f"device(s) {outside} are not on host {host} (devices 0-{total - 1})",
                "Use the host's device indices",
            )
        )
    return problems


def _overlaps(owned: Mapping[str, tuple[int, ...]], what: str) -> list[Problem]:
    return [
        Problem(
            code=f"slot-{what}-overlap",
            key=f"slots.{b}.{what}s",
            message=f"slots {a} and {b} both claim {what}(s) {sorted(shared)}",
            fix=f"Give each slot its own {what}s",
        )
        for (a, da), (b, db) in combinations(owned.items(), 2)
        if (shared := set(da) & set(db))
    ]


def _slot(name: str, key: str, code: str, message: str, fix: str) -> Problem:
    return Problem(code=code, key=f"slots.{name}.{key}", message=f"slot {name}: {message}", fix=fix)


def _ranges(cpus: Sequence[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))
