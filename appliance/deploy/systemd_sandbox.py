"""The sandbox every rendered systemd unit shares (the appliance's and the gateway's), and how a unit is written.

Each unit adds what its own service needs (its identity, writable paths, devices) and says, in comments for the
operator who reads it, why its address families and system calls are the ones left open.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["Line", "escape", "in_home", "kernel", "privileges", "unit_text"]

Line = tuple[str, str] | str
"""A `key=value` setting, or a comment line for the operator."""

_HOMES = ("/home", "/root", "/run/user")


def privileges() -> list[Line]:
    """No capability, no privilege to gain, files private to the service's user."""
    return [
        ("UMask", "0077"),
        ("NoNewPrivileges", "yes"),
        ("CapabilityBoundingSet", ""),
        ("AmbientCapabilities", ""),
        ("RestrictSUIDSGID", "yes"),
        ("PrivateUsers", "yes"),
        ("RemoveIPC", "yes"),
        ("KeyringMode", "private"),
    ]


def kernel(network: Sequence[str], calls: Sequence[str]) -> list[Line]:
    """The kernel's protections; `network` and `calls` are the comments saying why the unit's service needs the
    address families and the system calls left open."""
    return [
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectKernelLogs", "yes"),
        ("ProtectClock", "yes"),
        ("ProtectHostname", "yes"),
        ("RestrictNamespaces", "yes"),
        ("RestrictRealtime", "yes"),
        ("LockPersonality", "yes"),
        *(f"# {line}" for line in network),
        ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6"),
        ("SystemCallArchitectures", "native"),
        *(f"# {line}" for line in calls),
        ("SystemCallFilter", "@system-service"),
        ("SystemCallFilter", "~@privileged"),
        ("SystemCallErrorNumber", "EPERM"),
    ]


def unit_text(header: Sequence[str], sections: Mapping[str, Sequence[Line]]) -> str:
    """The unit file: `header` comment lines, then each section's settings and comments."""
    lines = list(header)
    for section, entries in sections.items():
        lines += ["", f"[{section}]", *(e if isinstance(e, str) else f"{e[0]}={e[1]}" for e in entries)]
    return "\n".join(lines) + "\n"


def in_home(path: str) -> bool:
    """Whether `path` lies under a home directory, which ProtectHome=yes hides."""
    return any(path == h or path.startswith(h + "/") for h in _HOMES)


def escape(command: str) -> str:
    """systemd expands % specifiers and $VARS in ExecStart; the command means them literally."""
    return command.replace("%", "%%").replace("$", "$$")
