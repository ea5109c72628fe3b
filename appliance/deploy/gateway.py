"""One OpenAI endpoint in front of a site's appliances: HAProxy, gated by each appliance's readiness.

HAProxy routes to each engine's OpenAI port but health-checks the appliance's control API
(`GET /readyz`), which turns 503 the moment a drain, restart or stop begins; the appliance then
waits `supervisor.deregister_s` before its engine stops accepting. The balancer so takes an
instance out of rotation before it drains, and puts it back when it is ready again. Requests that
meet a closed connection or a 502/503 before any byte came back are retried on another instance.

HAProxy was chosen over vllm-router because it checks an address and port other than the one it
routes to (`check addr … port …`), which is what lets the control API's readiness lead a drain.
vllm-router 0.1.17 (PyPI, checked with its `--help`) health-checks only a path on the worker URL it
routes to (`--health-check-endpoint`, default /health, every whole second at best, 3 failures by
default), and vLLM's /health stays 200 while it drains. HAProxy is a Debian package, not a build.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from appliance.errors import ConfigError, LaunchError, Problem

__all__ = ["Backend", "backend", "haproxy_binary", "render_haproxy", "run_haproxy"]


@dataclass(frozen=True, slots=True)
class Backend:
    """One appliance behind the gateway: where its engine serves and where its readiness is asked."""

    name: str
    engine_host: str
    engine_port: int
    control_host: str
    control_port: int
    control_ca: str | None = None
    """For an https control API, what its health checks verify it with (`@system-ca`: the system's store)."""


def backend(name: str, engine_url: str, control_url: str, ca_file: str | None = None) -> Backend:
    """A backend from the two URLs an appliance reports; ConfigError naming it when one has no port."""
    engine, control = urlsplit(engine_url), urlsplit(control_url)
    if not (engine.hostname and engine.port and control.hostname and control.port):
        raise ConfigError(
            (
                Problem(
                    code="gateway-backend",
                    key=name,
                    message=f"engine {engine_url} / control {control_url} lack a host or port",
                    fix="List each appliance's control URL with its port",
                ),
            )
        )
    ca = (ca_file or "@system-ca") if control.scheme == "https" else None
    return Backend(name, engine.hostname, engine.port, control.hostname, control.port, ca)


def render_haproxy(backends: Sequence[Backend], listen: str, check_interval_ms: int = 500) -> str:
    """The haproxy.cfg text: one frontend on `listen` (host:port), one backend per appliance."""
    servers = [
        f"    server {b.name} {b.engine_host}:{b.engine_port} check addr {b.control_host} port {b.control_port}"
        + (f" check-ssl verify required ca-file {b.control_ca}" if b.control_ca else "")
        for b in backends
    ]
    return "\n".join(
        [
            "# Rendered by `appliance gateway`; health = each appliance's control API GET /readyz.",
            "global",
            "    log stdout format raw local0 notice",
            "    maxconn 4096",
            "",
            "defaults",
            "    mode http",
            "    log global",
            "    timeout connect 2s",
            "    timeout client 10m",
            "    timeout server 10m",  # a long generation streams for minutes
            "    retries 3",
            "    option redispatch 1",
            "    retry-on conn-failure empty-response 502 503",
            "",
            "frontend openai",
            f"    bind {listen}",
            "    default_backend appliances",
            "",
            "backend appliances",
            "    balance leastconn",
            "    option httpchk",
            "    http-check send meth GET uri /readyz",
            "    http-check expect status 200",
            # A 503 from /readyz answers at once, so two checks lead a drain by 2 × inter; a busy host's
            # slow answer is given 2 s before it counts as a failed check (flapping otherwise, under load).
            "    timeout check 2s",
            f"    default-server inter {check_interval_ms}ms fall 2 rise 1",
            *servers,
            "",
        ]
    )


def haproxy_binary() -> str:
    """The haproxy executable, or a LaunchError saying how to get it."""
    found = shutil.which("haproxy")
    if found is None:
        raise LaunchError("haproxy is not installed: install the Debian package `haproxy` (apt-get install haproxy)")
    return found


def run_haproxy(config: Path) -> subprocess.Popen[bytes]:
    """HAProxy in the foreground on `config`, after its own syntax check; the caller owns the process."""
    binary = haproxy_binary()
    checked = subprocess.run([binary, "-c", "-q", "-f", str(config)], capture_output=True, text=True)
    if checked.returncode != 0:
        raise LaunchError(f"haproxy refused {config}: {' '.join(checked.stderr.split())[:300]}")
    return subprocess.Popen([binary, "-W", "-db", "-f", str(config)])
