"""A systemd unit for a site's gateway: `appliance gateway` (and the HAProxy it runs) as a sandboxed service.

The gateway keeps no state and opens no device, so it runs as a user systemd makes for it (DynamicUser=) rather
than the appliance's `tt-appliance`: there is no account to create, and the client keys it holds share no owner with
an appliance on the same host. It writes only its run folder (RuntimeDirectory=, 0700: haproxy.cfg, the errorfiles
and the 0600 keys map) and reads the site file. Secrets come by reference: the control tokens the site file names
(token_env) from an EnvironmentFile PID 1 reads, each client's key by LoadCredential= from its file, which systemd
copies into the service's own credentials directory, so the file may stay root-only. The sandbox is the appliance
unit's (systemd_sandbox) but for what HAProxy needs, each such setting commented in the unit.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from appliance.config.schema import GatewayConfig
from appliance.deploy.gateway_clients import check_client_name
from appliance.deploy.site_appliance import Appliance
from appliance.deploy.systemd import SystemdUnit
from appliance.deploy.systemd_sandbox import Line, escape, in_home, kernel, privileges, unit_text
from appliance.errors import ConfigError, Problem

__all__ = ["render_gateway_systemd", "unprivileged_port"]

_USER_NAME_MAX = 31  # what systemd accepts as a user name (the utmp field's width)


def render_gateway_systemd(
    site_file: Path,
    entries: Sequence[Appliance],
    gateway: GatewayConfig,
    overrides: Sequence[str],
    *,
    listen: str,
    appliance: str,
    name: str,
    site_dir: Path | None = None,
) -> SystemdUnit:
    """The unit that runs `appliance gateway --site-file site_file --listen listen overrides...` as `name`.service;
    ConfigError naming what cannot be rendered (a client name, a privileged port)."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", name)
    env_file = f"/etc/tt-appliance/{stem}.env"
    run_dir = f"/run/{stem}"
    unprivileged_port(listen)
    for client in gateway.clients:
        check_client_name(client)
    site = str(site_file.absolute())
    argv = [appliance, "gateway", "--site-file", site, "--listen", listen, "--out", run_dir, *overrides]
    argv += ["--site-dir", str(site_dir)] if site_dir else []
    # %d is the credentials directory: each client's key_file as systemd hands it to the service.
    keys = [f"gateway.clients.{client}.key_file=%d/{client}" for client in gateway.clients]
    tokens = sorted({e.token_env for e in entries})
    sections: dict[str, list[Line]] = {
        "Unit": [
            ("Description", f"TT serving appliance gateway: the site of {site}"),
            ("After", "network-online.target"),
            ("Wants", "network-online.target"),
        ],
        "Service": [
            ("Type", "exec"),
            ("ExecStart", " ".join([escape(shlex.join(argv)), *keys])),
            ("EnvironmentFile", f"-{env_file}"),
            *(("LoadCredential", f"{c}:{_absolute(k.key_file)}") for c, k in gateway.clients.items()),
            # SIGTERM to the gateway, which passes it on to HAProxy (and systemd sends it to HAProxy too).
            ("Restart", "on-failure"),
            ("RestartSec", "5"),
            ("DynamicUser", "yes"),
            ("User", stem[:_USER_NAME_MAX].rstrip("-._")),
            *privileges(),
            ("RuntimeDirectory", stem),
            ("RuntimeDirectoryMode", "0700"),
            *_file_system([appliance, site, *(str(d) for d in [site_dir] if d)]),
            *kernel(_NETWORK, _CALLS),
            "# MemoryDenyWriteExecute= stays off: HAProxy compiles the frontend's regular expression (the body's",
            "# JSON check) with PCRE2's JIT, which writes code into memory and then executes it.",
        ],
        "Install": [("WantedBy", "multi-user.target")],
    }
    header = [
        f"# control tokens ({', '.join(tokens)}) go in {env_file} (mode 0600)",
        *(["# client keys: systemd reads each key_file (it may be root-only 0600) for the service"] * bool(keys)),
        "# runs as a user systemd makes for it (DynamicUser=): nothing to create, no file shared with the appliance",
    ]
    return SystemdUnit(f"{stem}.service", unit_text(header, sections), env_file)


_NETWORK = [
    "The site's endpoint, the appliances' engine and control ports, and HAProxy's master-worker socket pair.",
    "IP addresses stay open: the engines' addresses are learned from the appliances at start.",
]
_CALLS = [
    "@system-service keeps @resources: HAProxy raises its open-file limit (setrlimit) to its maxconn.",
    "A call outside the set fails with EPERM rather than killing the gateway.",
]


def _file_system(read: Sequence[str]) -> list[Line]:
    """Everything read-only but the run folder; the home directories hidden unless the gateway reads from one."""
    homes = sorted({p for p in read if in_home(p)})
    protect_home: list[Line] = [("ProtectHome", "yes")]
    if homes:
        protect_home = [
            f"# read-only, not hidden: {', '.join(homes)} under a home directory",
            ("ProtectHome", "read-only"),
        ]
    return [
        ("ProtectSystem", "strict"),
        ("PrivateTmp", "yes"),
        ("PrivateMounts", "yes"),
        ("PrivateDevices", "yes"),
        *protect_home,
        ("ProtectProc", "invisible"),
        ("ProtectControlGroups", "yes"),
    ]


def _absolute(path: str) -> str:
    return str(Path(path).absolute()).replace("%", "%%")


def unprivileged_port(listen: str) -> int:
    """The port of `listen` (host:port); ConfigError unless it is one an unprivileged process binds: the gateway holds
    no capability (and under PrivateUsers= one would not reach the host's network namespace)."""
    port = listen.rpartition(":")[2]
    if not port.isdigit() or not 1024 <= int(port) <= 65535:
        problem = Problem(
            code="gateway-listen",
            key="--listen",
            message=f"{listen!r} is not host:port with a port from 1024 to 65535; the sandboxed gateway binds no "
            "privileged port",
            fix="Listen on a port from 1024 and forward 80/443 to it (a load balancer or a port redirect)",
        )
        raise ConfigError((problem,))
    return int(port)
