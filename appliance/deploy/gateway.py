"""One OpenAI endpoint in front of a site's appliances: HAProxy, routing by model, admitting what the engines hold.

HAProxy routes to each engine's OpenAI port but health-checks the appliance's control API
(`GET /readyz`, or `/slots/<slot>/readyz` for a slot), which turns 503 the moment a drain, restart or stop begins;
the appliance then waits `supervisor.deregister_s` before its engine stops accepting. The balancer so takes an
instance out of rotation before it drains, and puts it back when it is ready again. Requests that
meet a closed connection or a 502/503 before any byte came back are retried on another instance.

Each served model has a backend of the engines serving it; a request goes to the one its JSON body's `model`
names (gateway_frontend), each engine given the requests its plan runs at once and the rest queued by priority
class for a bounded wait (gateway_admission). Readiness is checked once per engine, in a backend of its own that
the model's server tracks (manual 5.2 `track`): HAProxy sends one check request per backend (`http-check send`),
and the slots of one appliance answer readiness on different paths.

HAProxy was chosen over vllm-router because it checks an address and port other than the one it
routes to (`check addr … port …`), which is what lets the control API's readiness lead a drain.
vllm-router 0.1.17 (PyPI, checked with its `--help`) health-checks only a path on the worker URL it
routes to (`--health-check-endpoint`, default /health, every whole second at best, 3 failures by
default), and vLLM's /health stays 200 while it drains. HAProxy is a Debian package, not a build.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from urllib.parse import urlsplit

from appliance.config.schema import GatewayConfig
from appliance.deploy.gateway_admission import ModelRoute, model_routes
from appliance.deploy.gateway_answers import Answer, errorfile, return_line
from appliance.deploy.gateway_classes import CLASSES_PATH, classes_backend
from appliance.deploy.gateway_clients import KEYS_MAP, ClientKey, client_table, keys_map
from appliance.deploy.gateway_frontend import MODELS_FILE, frontend, models_document
from appliance.errors import ConfigError, LaunchError, Problem

__all__ = [
    "METRICS_LISTEN",
    "Backend",
    "GatewayFiles",
    "backend",
    "haproxy_binary",
    "render_gateway",
    "run_haproxy",
    "write_gateway",
]

METRICS_LISTEN = "127.0.0.1:8405"
"""Where HAProxy's own Prometheus exporter listens by default: loopback (its series name the site's models and
engines), on the port HAProxy's documentation uses for it."""
_HEADER_ROOM = 16 * 1024
"""Buffer room beyond the largest body: the request's headers and HAProxy's rewrite reserve (tune.maxrewrite)."""


@dataclass(frozen=True, slots=True)
class Backend:
    """One engine behind the gateway: where it serves, the model and concurrency it runs, where its readiness is
    asked."""

    name: str
    engine_host: str
    engine_port: int
    control_host: str
    control_port: int
    control_ca: str | None = None
    """For an https control API, what its health checks verify it with (`@system-ca`: the system's store)."""
    model: str = ""
    """The served model name clients pass as `model`."""
    max_concurrency: int = 1
    """Requests its plan runs at once (max_concurrency)."""
    check_path: str = "/readyz"


@dataclass(frozen=True, slots=True)
class GatewayFiles:
    """What the gateway runs from: haproxy.cfg, the files it names beside it, and the ones only its owner reads."""

    config: str
    files: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    secret_files: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    routes: tuple[ModelRoute, ...] = ()


def backend(
    name: str,
    engine_url: str,
    control_url: str,
    ca_file: str | None = None,
    *,
    model: str = "",
    max_concurrency: int = 1,
    check_path: str = "/readyz",
) -> Backend:
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
    return Backend(
        name, engine.hostname, engine.port, control.hostname, control.port, ca, model, max_concurrency, check_path
    )


def render_gateway(
    backends: Sequence[Backend],
    listen: str,
    folder: Path,
    gateway: GatewayConfig,
    clients: tuple[ClientKey, ...] = (),
    check_interval_ms: int = 500,
    metrics_listen: str = METRICS_LISTEN,
) -> GatewayFiles:
    """haproxy.cfg and its files, to be written into `folder`: one frontend on `listen` (host:port), one backend per
    served model, one readiness check per engine, HAProxy's Prometheus exporter on `metrics_listen`. ConfigError
    when a limit exceeds what an engine runs."""
    routes = model_routes(backends, gateway)
    by_name = {b.name: b for b in backends}
    shed = {f"shed-{r.backend}.http": errorfile(_shed(r)) for r in routes}
    config = "\n".join(
        [
            "# Rendered by `appliance gateway`; health = each engine's control API readiness.",
            *(f"# {r.line()}" for r in routes),
            "global",
            "    log stdout format raw local0 notice",
            "    maxconn 4096",
            # The body is read whole to route by its model (option http-buffer-request): it must fit one buffer.
            f"    tune.bufsize {gateway.max_body_kib * 1024 + _HEADER_ROOM}",
            "",
            "defaults",
            "    mode http",
            "    log global",
            "    timeout connect 2s",
            "    timeout client 10m",
            "    timeout server 10m",  # a long generation streams for minutes
            # Headers and body, with http-buffer-request (manual 4.2 "timeout http-request"): a slowloris gets 408.
            f"    timeout http-request {round(gateway.request_timeout_s * 1000)}ms",
            # A request whose client gave up while it queued leaves the queue then, not when a slot frees: by default
            # HAProxy still sends it and an engine generates for no one (manual 4.2 "option abortonclose"). Set here,
            # not in the models' backends: 2.6 read an HTTP/1 client's close while queued only with it in defaults.
            "    option abortonclose",
            "    retries 3",
            "    option redispatch 1",
            "    retry-on conn-failure empty-response 502 503",
            "",
            *frontend(listen, folder, routes, gateway, clients),
            *_exporter(metrics_listen),
            *classes_backend(folder),
            *(line for r in routes for line in _model_backend(r, folder, by_name, gateway.sheddable)),
            *(line for b in backends for line in _readiness_backend(b, check_interval_ms)),
            *client_table(clients),
            "",
        ]
    )
    files = {MODELS_FILE: models_document(routes), **shed, **_refusals()}
    secret = {KEYS_MAP: keys_map(clients)} if clients else {}
    return GatewayFiles(config, MappingProxyType(files), MappingProxyType(secret), routes)


def write_gateway(files: GatewayFiles, folder: Path) -> Path:
    """The files written into `folder` (the secret ones 0600 from their creation); the path of haproxy.cfg."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.secret_files.items():
        path = folder / name
        path.unlink(missing_ok=True)  # a file left by another run keeps its mode: made afresh, owner-only
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(text)
    for name, text in files.files.items():
        (folder / name).write_text(text)
    config = folder / "haproxy.cfg"
    config.write_text(files.config)
    return config


def _exporter(metrics_listen: str) -> list[str]:
    """HAProxy's own Prometheus exporter (built into Debian's package: `haproxy -vv` lists PROMEX), on a listener of
    its own so that the OpenAI endpoint never serves it (manual 4.2 "http-request use-service"), and beside it the
    gateway's per-class counters (gateway_classes)."""
    return [
        "",
        "frontend metrics",
        f"    bind {metrics_listen}",
        "    http-request use-service prometheus-exporter if { path /metrics }",
        f"    http-request return status 404 unless {{ path {CLASSES_PATH} }}",
        "    use_backend classes",
    ]


def _model_backend(
    route: ModelRoute, folder: Path, by_name: Mapping[str, Backend], sheddable: Sequence[str]
) -> list[str]:
    servers = [
        f"    server {name} {by_name[name].engine_host}:{by_name[name].engine_port} maxconn {limit} "
        f"track ready_{name}/{name}"
        for name, limit in zip(route.servers, route.maxconn, strict=True)
    ]
    return [
        "",
        f"backend {route.backend}  # {route.model}",
        "    balance leastconn",
        # Past each server's maxconn a request waits in this backend's queue, highest priority class first
        # (manual 4.2 "timeout queue", "http-request set-priority-class"); past the bound HAProxy answers 503,
        # which this errorfile sends as the 429 it is: no capacity within the SLO, try later.
        f"    timeout queue {route.wait_ms}ms",
        f"    errorfile 503 {folder / f'shed-{route.backend}.http'}",
        *_shed_at_once(route, sheddable),
        *servers,
    ]


def _shed_at_once(route: ModelRoute, sheddable: Sequence[str]) -> list[str]:
    """A sheddable class is refused at once while the model has requests queued: denied here, in the model's
    backend, so the exporter counts it per model (haproxy_backend_requests_denied_total); a queue timeout counts as
    a connection error of the backend (haproxy_backend_connection_errors_total). Together: the model's 429s."""
    if not sheddable:
        return []
    shed = Answer(
        429,
        f"model {route.model} is saturated: requests of this priority class are shed first; retry later",
        "rate_limit_error",
        code="shed",
        retry_after_s=route.retry_after_s,
    )
    condition = f"if {{ var(txn.class) -m str {' '.join(sheddable)} }} {{ queue({route.backend}) gt 0 }}"
    return [return_line(shed, condition, deny=True)]


def _readiness_backend(b: Backend, check_interval_ms: int) -> list[str]:
    tls = f" check-ssl verify required ca-file {b.control_ca}" if b.control_ca else ""
    return [
        "",
        f"backend ready_{b.name}",
        "    option httpchk",
        f"    http-check send meth GET uri {b.check_path}",
        "    http-check expect status 200",
        # A 503 from /readyz answers at once, so two checks lead a drain by 2 × inter; a busy host's
        # slow answer is given 2 s before it counts as a failed check (flapping otherwise, under load).
        "    timeout check 2s",
        f"    default-server inter {check_interval_ms}ms fall 2 rise 1",
        f"    server {b.name} {b.engine_host}:{b.engine_port} check addr {b.control_host} port {b.control_port}{tls}",
    ]


def _shed(route: ModelRoute) -> Answer:
    message = f"model {route.model} is at capacity: not admitted within {route.wait_s:g}s; retry later"
    return Answer(429, message, "rate_limit_error", code="model_at_capacity", retry_after_s=route.retry_after_s)


def _refusals() -> dict[str, str]:
    """What HAProxy answers itself to a malformed request (400) or one not sent in time (408)."""
    return {
        "400.http": errorfile(Answer(400, "the request is not valid HTTP", code="bad_request")),
        "408.http": errorfile(Answer(408, "the request was not sent in time", code="request_timeout")),
    }


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
