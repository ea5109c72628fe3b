"""The engine's share of the host's CPU: below the appliance and below an operator's ordinary processes.

A CPU engine takes every core it can get, and the host's control plane (the appliance's own API, sshd, Ansible's
workers, exporters) must still answer beside it (bench/host_share.py measures both). An engine process, and the
config probe, is placed by the first mechanism the host lets the appliance write:
1. the cgroup cpu controller: a group of its own under the appliance's cgroup, weighted `cpu.weight` on cgroup v2,
   `cpu.shares` (the weight scaled, 100 -> 1024) on v1. Outside the root group this is systemd's delegation
   (the rendered unit's `Delegate=`); on v2 the appliance first moves itself into a `tt-control` leaf, as the
   "no internal processes" rule asks. A group outside the root also leaves the kernel's autogroups, under which
   every session (each ssh login, each Ansible worker) would otherwise count as much as the engine's.
2. otherwise the nice value the weight stands for, in the appliance's own session, with one warning saying why.
Its threads run on the cores it owns: a slot's, or the host's less `reserve` (the lowest-numbered ones).
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import psutil

__all__ = [
    "BIND",
    "DEFAULT_WEIGHT",
    "Mechanism",
    "Placement",
    "engine_cores",
    "nice_for",
    "owned_cores",
    "parse_cores",
    "place",
    "placement_for",
]

Mechanism = Literal["cgroup v2", "cgroup v1", "nice"]
DEFAULT_WEIGHT = 100
"""cgroup v2's default `cpu.weight`: an ordinary process's (nice 0)."""
_V1_SHARES_PER_WEIGHT = 1024 / DEFAULT_WEIGHT
_NICE_STEP = 1.25  # each nice level is about 1.25 times less CPU than the one before (the kernel's weight table)
BIND = "VLLM_CPU_OMP_THREADS_BIND"
"""vLLM's CPU engine binds its OpenMP threads to the cores this variable lists ("auto" by default)."""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where an engine process runs: its cgroup or nice value, and its cores."""

    mechanism: Mechanism
    weight: int
    group: str | None = None
    """The cgroup directory the process joins; None with nice."""
    nice: int = 0
    cores: tuple[int, ...] | None = None
    """The cores its threads are bound to; None leaves the affinity it inherits."""
    warning: str | None = None
    """Why no cgroup could be written, said once by whoever placed it."""

    def describe(self) -> str:
        where = f"{self.group}, weight {self.weight}" if self.group else f"nice {self.nice} (weight {self.weight})"
        cores = "" if self.cores is None else f", cores {','.join(map(str, self.cores))}"
        return f"{self.mechanism}: {where}{cores}"

    def enter(self) -> None:
        """In the child, before exec: join the group (or lower the priority) and bind to the cores; whatever the
        process starts afterwards inherits both."""
        if self.group is not None:
            Path(self.group, "cgroup.procs").write_text(str(os.getpid()))
        elif self.nice:
            os.nice(self.nice)
        if self.cores is not None:
            os.sched_setaffinity(0, self.cores)

    def release(self) -> None:
        """Remove the group once its processes are gone (a group still in use stays)."""
        if self.group is not None:
            with contextlib.suppress(OSError):
                Path(self.group).rmdir()


def parse_cores(text: str) -> tuple[int, ...] | None:
    """A core list as vLLM's VLLM_CPU_OMP_THREADS_BIND spells it ("0,2-3"); None for "auto" or anything else."""
    cores: list[int] = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        if not first.isdigit() or (last and not last.isdigit()):
            return None
        cores += range(int(first), int(last or first) + 1)
    return tuple(sorted(set(cores)))


def owned_cores(
    reserve: int, declared: tuple[int, ...] | None, allowed: tuple[int, ...] | None = None
) -> tuple[int, ...] | None:
    """The cores the engine owns: `declared` (a slot's), else the allowed ones less the `reserve` lowest; None when
    that is every allowed core (nothing to bind). ValueError when the reserve leaves the engine no core."""
    if declared is not None:
        return declared
    cpus = tuple(sorted(os.sched_getaffinity(0))) if allowed is None else allowed
    if reserve >= len(cpus):
        raise ValueError(f"reserves {reserve} of the {len(cpus)} cores this appliance may use, leaving the engine none")
    return cpus[reserve:] if reserve else None


def place(
    name: str,
    weight: int,
    cores: tuple[int, ...] | None,
    *,
    proc: Path = Path("/proc/self"),
    mounts: list[tuple[Mechanism, str]] | None = None,
) -> Placement:
    """Prepare `name`'s cgroup under the appliance's own with `weight`, or fall back to nice with a warning.
    `mounts`: the (mechanism, mount point) pairs to try, v2 first; None reads the host's."""
    reasons: list[str] = []
    for mechanism, mount in _cpu_mounts() if mounts is None else mounts:
        try:
            group = _group(mechanism, mount, _own_path(proc / "cgroup", mechanism), name, weight)
        except OSError as err:
            reasons.append(f"{mechanism} at {mount}: {err.strerror or err}")
            continue
        return Placement(mechanism, weight, str(group), cores=cores)
    why = "; ".join(reasons) or "no cgroup cpu controller is mounted"
    nice = nice_for(weight)
    warning = (
        f"cannot give the engine its own cgroup ({why}): it runs at nice {nice} instead, which puts it below "
        "the appliance but not below other sessions' processes"
    )
    return Placement("nice", weight, nice=nice, cores=cores, warning=warning)


def nice_for(weight: int) -> int:
    """The nice value whose CPU weight is nearest `weight` against an ordinary process's 100 (never below 0)."""
    return max(0, min(19, round(math.log(DEFAULT_WEIGHT / weight, _NICE_STEP))))


def _cpu_mounts() -> list[tuple[Mechanism, str]]:
    """The mounted hierarchies that carry the cpu controller, v2 first."""
    found: list[tuple[Mechanism, str]] = []
    for part in psutil.disk_partitions(all=True):
        if part.fstype == "cgroup2" and "cpu" in _read(Path(part.mountpoint, "cgroup.controllers")).split():
            found.insert(0, ("cgroup v2", part.mountpoint))
        elif part.fstype == "cgroup" and "cpu" in part.opts.split(","):
            found.append(("cgroup v1", part.mountpoint))
    return found


def _own_path(cgroup_file: Path, mechanism: Mechanism) -> str:
    """This process's cgroup in the hierarchy `mechanism` names (/proc/self/cgroup)."""
    for line in _read(cgroup_file).splitlines():
        _, controllers, path = line.split(":", 2)
        if (controllers == "") if mechanism == "cgroup v2" else ("cpu" in controllers.split(",")):
            return path
    return "/"


def _group(mechanism: Mechanism, mount: str, own: str, name: str, weight: int) -> Path:
    parent = Path(mount) / own.lstrip("/")
    group = parent / f"tt-{name}"
    if mechanism == "cgroup v2":
        if own != "/" and _read(parent / "cgroup.procs").split():
            control = parent / "tt-control"  # the appliance leaves its group's interior to enable the controller
            control.mkdir(exist_ok=True)
            (control / "cgroup.procs").write_text(str(os.getpid()))
        if "cpu" not in _read(parent / "cgroup.subtree_control").split():
            (parent / "cgroup.subtree_control").write_text("+cpu")
        group.mkdir(exist_ok=True)
        (group / "cpu.weight").write_text(str(weight))
    else:
        group.mkdir(exist_ok=True)
        (group / "cpu.shares").write_text(str(max(2, round(weight * _V1_SHARES_PER_WEIGHT))))
    return group


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def placement_for(name: str, weight: int, reserve: int, bind: str | None) -> Placement:
    """`name`'s placement: `weight`, on the cores a VLLM_CPU_OMP_THREADS_BIND list `bind` names (a slot's), else on
    the host's less `reserve`. ValueError when the reserve leaves it no core."""
    return place(name, weight, engine_cores(reserve, bind))


def engine_cores(reserve: int, bind: str | None) -> tuple[int, ...] | None:
    """The cores an engine owns, from its VLLM_CPU_OMP_THREADS_BIND list `bind` (a slot's) or the `reserve`
    (owned_cores); ValueError when the reserve leaves it none."""
    return owned_cores(reserve, parse_cores(bind) if bind else None)
