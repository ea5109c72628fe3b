"""A systemd unit for one config: `appliance serve` as a sandboxed Type=notify service.

`serve` reports READY=1 once the engine answers, STATUS= on every lifecycle change and
STOPPING=1 when it begins to drain (appliance/notify.py), so `systemctl start` returns only when
the engine can serve and the start timeout is the config's readiness budget.

The service runs as the static system user `tt-appliance` inside systemd's sandbox: the file system
read-only but for the plan's cache, state and log directories, no capabilities, no device but the
Tenstorrent boards (engine=tt), and the system calls of an ordinary service. Each setting left open
is commented in the unit with why, for the operator who reads it.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from appliance.deploy.systemd_sandbox import Line, escape, in_home, kernel, privileges, unit_text
from appliance.plan import LaunchPlan

__all__ = ["UNIT_PATHS", "USER", "SystemdUnit", "render_systemd", "with_unit_paths"]

_BOOT_MARGIN_S = 300  # imports, host checks and generating the embedded model before the budget starts
USER = "tt-appliance"
UNIT_PATHS = (
    "paths.cache_dir=/var/cache/tt-appliance",
    "paths.state_dir=/var/lib/tt-appliance",
    "paths.log_dir=/var/log/tt-appliance",
)
"""The service's paths where the command line sets none: systemd's own directories for a service,
which it creates for the service's user (the operator's $HOME is neither visible nor writable)."""
_SYSTEMD_DIRS = (("/var/lib/", "StateDirectory"), ("/var/cache/", "CacheDirectory"), ("/var/log/", "LogsDirectory"))
_HUGEPAGES = ("/dev/hugepages-1G", "/dev/hugepages")  # tt-metal maps its host buffers from the 1G mount


@dataclass(frozen=True, slots=True)
class SystemdUnit:
    name: str
    """File name, e.g. tt-appliance-lab-t3k.service."""
    text: str
    env_file: str
    """Where the secrets go (0600, never in the unit): the control token, the hub token, the API key."""


def with_unit_paths(overrides: Sequence[str]) -> list[str]:
    """`overrides` plus UNIT_PATHS' defaults for the paths they leave unset, so the plan the unit is
    rendered from and the one `serve` builds under systemd write to the same directories."""
    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    return [*overrides, *(p for p in UNIT_PATHS if p.split("=", 1)[0] not in given)]


def render_systemd(
    plan: LaunchPlan,
    overrides: Sequence[str],
    *,
    appliance: str,
    site_dir: Path | None = None,
    title: tuple[str, str] | None = None,
) -> SystemdUnit:
    """The unit file that runs `appliance serve overrides...` for `plan`'s config.

    `title` (name suffix, description) names a unit serving several slots instead of `plan`'s model.
    """
    suffix, description = title or ("", f"{plan.checkpoint} on {plan.mesh} (site {plan.site})")
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"tt-appliance-{plan.site}" + (f"-{suffix}" if suffix else ""))
    env_file = f"/etc/tt-appliance/{stem}.env"
    argv = [appliance, "serve", *overrides, *(["--site-dir", str(site_dir)] if site_dir else [])]
    secrets = sorted({plan.control.token_env, *plan.secret_env.values()})
    sup = plan.supervisor
    sections: dict[str, list[Line]] = {
        "Unit": [
            ("Description", f"TT serving appliance: {description}"),
            ("After", "network-online.target"),
            ("Wants", "network-online.target"),
        ],
        "Service": [
            ("Type", "notify"),
            ("NotifyAccess", "main"),  # the engine's workers must not speak for the service
            ("ExecStart", escape(shlex.join(argv))),
            ("EnvironmentFile", f"-{env_file}"),
            ("TimeoutStartSec", str(math.ceil(plan.ready_timeout_s) + _BOOT_MARGIN_S)),
            ("TimeoutStopSec", str(math.ceil(sup.shutdown_timeout_s + sup.stop_grace_s) + 30)),
            # SIGTERM to the appliance only: it drains the engine and then kills the engine's group itself.
            ("KillMode", "mixed"),
            ("SuccessExitStatus", "143"),
            ("Restart", "on-failure"),
            ("RestartSec", "10"),
            *_identity(plan),
            *_file_system(plan, appliance),
            *_devices(plan),
            *_kernel(),
            "# MemoryDenyWriteExecute= stays off: torch's oneDNN kernels and libffi's closures write code into",
            "# memory and then execute it, which it forbids.",
            *_cpu_share(plan),
        ],
        "Install": [("WantedBy", "multi-user.target")],
    }
    header = [
        f"# config {plan.config_hash}; secrets ({', '.join(secrets)}) go in {env_file} (mode 0600)",
        f"# runs as the system user {USER}: useradd --system --no-create-home --shell /usr/sbin/nologin {USER}",
    ]
    return SystemdUnit(f"{stem}.service", unit_text(header, sections), env_file)


def _identity(plan: LaunchPlan) -> list[Line]:
    """A static user rather than DynamicUser=: every appliance unit on a host shares the state
    directory's device locks, which need one owner across units and restarts, and an operator can
    grant a named user the Tenstorrent device nodes and the hugepage mount."""
    state, cache = plan.state_dir, str(plan.resolved["paths.cache_dir"])
    return [
        ("User", USER),
        ("Group", USER),
        "# The engine's libraries cache under $HOME and $XDG_CACHE_HOME (tt-metal's kernels, vLLM, torch).",
        ("Environment", shlex.join([f"HOME={state}", f"XDG_CACHE_HOME={cache}"]).replace("%", "%%")),
        *privileges(),
    ]


def _file_system(plan: LaunchPlan, appliance: str) -> list[Line]:
    paths = [plan.state_dir, str(plan.resolved["paths.cache_dir"]), plan.log_dir]
    homes = sorted({p for p in (appliance, plan.python, *paths) if in_home(p)})
    protect_home: list[Line] = [("ProtectHome", "yes")]
    if homes:
        protect_home = [
            f"# read-only, not hidden: {', '.join(homes)} under a home directory",
            ("ProtectHome", "read-only"),
        ]
    return [
        ("ProtectSystem", "strict"),
        *_writable(paths),
        ("PrivateMounts", "yes"),
        ("PrivateTmp", "yes"),
        *protect_home,
        "# The appliance and its engine read their own /proc/<pid> and the host's /proc/meminfo, /proc/stat",
        "# and /proc/cpuinfo (psutil, vLLM's memory sizing, torch): other users' processes are hidden,",
        "# /proc's system files are not (ProcSubset=pid would hide them).",
        ("ProtectProc", "invisible"),
    ]


def _devices(plan: LaunchPlan) -> list[Line]:
    if plan.engine != "tt":
        return [("PrivateDevices", "yes")]
    return [
        "# engine=tt opens the boards (/dev/tenstorrent/<N>, the tenstorrent character devices; tt-kmd's",
        f"# udev rule must let {USER} read and write them) and maps its host buffers from the 1G hugepage",
        "# mount, so /dev stays the host's and the device cgroup admits the boards alone.",
        ("PrivateDevices", "no"),
        ("DevicePolicy", "closed"),
        ("DeviceAllow", "char-tenstorrent rw"),
        ("ReadWritePaths", " ".join(f"-{p}" for p in _HUGEPAGES)),
    ]


def _kernel() -> list[Line]:
    network = [
        "The OpenAI and control APIs, the hub download and sd_notify; no netlink (glibc's getaddrinfo",
        "does without it). IP addresses stay open: the engine may bind any address and fetches from the hub.",
    ]
    calls = [
        "@system-service keeps @resources: vLLM's CPU backend binds threads and memory to cores and NUMA",
        "nodes (sched_setaffinity, mbind, set_mempolicy). A call outside the set fails with EPERM rather",
        "than killing the engine mid-request.",
    ]
    return kernel(network, calls)


def _cpu_share(plan: LaunchPlan) -> list[Line]:
    """The engine's cgroup below the appliance's (engine.host_share): systemd delegates the unit's cgroup and its cpu
    controller to the appliance, which puts itself in a `tt-control` leaf and the engine in a weighted sibling.
    ProtectControlGroups= would make that subtree read-only."""
    if plan.host_share is None:
        return [("ProtectControlGroups", "yes")]
    return [
        f"# The engine in a cgroup of its own at CPU weight {plan.host_share.weight}, below the appliance's 100:",
        "# the unit's cgroup is delegated to the appliance, so it stays writable (ProtectControlGroups=no).",
        ("Delegate", "cpu"),
        ("ProtectControlGroups", "no"),
    ]


def _writable(paths: Sequence[str]) -> list[Line]:
    """systemd's own directory setting for a path under /var/lib, /var/cache or /var/log (systemd
    creates it, owned by the user, mode 0700), else ReadWritePaths=; a path under another is covered."""
    lines: list[Line] = []
    kept: list[PurePosixPath] = []
    for path in (PurePosixPath(p) for p in paths):
        if any(path == k or k in path.parents for k in kept):
            continue
        kept.append(path)
        root, key = next(((r, k) for r, k in _SYSTEMD_DIRS if str(path).startswith(r)), ("", "ReadWritePaths"))
        lines += [(key, str(path)[len(root) :].replace("%", "%%"))] + ([(f"{key}Mode", "0700")] if root else [])
    return lines
