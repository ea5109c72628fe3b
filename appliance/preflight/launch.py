"""What `serve` refuses before it binds or spawns, judged without an engine: one set of checks that `validate`,
`plan` and `serve` all run, so `validate` exit 0 means `serve` will not refuse the config for a reason it could
have known.

The checks read this machine: the files the config names (control.tls), the paths it runs (the engine's
interpreter, a local checkpoint, the state and log directories), its ports, the secrets it names by variable and
the cores the host share leaves the engine. They run where the config could be served: always for engine=cpu,
and for engine=tt where Tenstorrent devices are. A machine without them (a CI job gating a TT site's config)
cannot know the TT host's files, ports or environment, so `validate` names those checks as host-only, beside the
host checks (boards, firmware, KMD, hugepages, disk, memory: preflight/checks.py) that `appliance check` runs.
"""

from __future__ import annotations

import errno
import os
import re
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from appliance.errors import ConfigError, Problem
from appliance.host.share import BIND, engine_cores
from appliance.plan import LaunchPlan
from appliance.preflight.results import CheckResult, check
from appliance.resources import engine_build_command

__all__ = [
    "HOST_CHECKS",
    "SECRETS_DIR_ENV",
    "LaunchChecks",
    "bound_socket",
    "launch_check",
    "launch_checks",
    "secrets_from_dir",
]

HOST_CHECKS = (
    "host.mesh",
    "host.firmware",
    "host.kmd",
    "host.holders",
    "host.boards",
    "host.hugepages",
    "host.disk",
    "host.memory",
    "host.weights",
    "host.tensor_cache",
)
"""The host checks' ids (preflight/checks.py): `serve` runs them on the host, `validate` only names them."""
# The hub token is optional (only a gated hub checkpoint needs it); every other secret a config names is required.
_OPTIONAL_SECRETS = frozenset({"HF_TOKEN"})
_PORT_SEARCH = 100
SECRETS_DIR_ENV = "APPLIANCE_SECRETS_DIR"
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class LaunchChecks:
    problems: tuple[Problem, ...]
    host_only: tuple[str, ...]
    """What could not be judged on this machine, by name: each runs on the host (`serve`, `appliance check`)."""

    @property
    def errors(self) -> tuple[Problem, ...]:
        """The refusals (the rest are warnings: a port a dead appliance's engine still frees)."""
        return tuple(p for p in self.problems if p.severity == "error")


def launch_checks(plan: LaunchPlan, environ: Mapping[str, str], *, devices: bool) -> LaunchChecks:
    """The pre-boot refusals of `plan` on this machine; `devices`: whether Tenstorrent devices are here."""
    if plan.engine == "tt" and not devices:
        named = ["Tenstorrent devices", f"the tt-metal environment {plan.python}", "the ports and secrets it names"]
        if plan.control.tls is not None:
            named.append("the control.tls files")
        return LaunchChecks((), (*named, *HOST_CHECKS))
    problems = [*_tls(plan), *_paths(plan), *_ports(plan), *_secrets(plan, environ), *_cores(plan)]
    return LaunchChecks(tuple(problems), HOST_CHECKS)


def launch_check(plan: LaunchPlan, environ: Mapping[str, str], *, devices: bool) -> CheckResult:
    """The same checks as one of `appliance check`'s results. `check` runs beside the appliance it checks, so a
    port an appliance's lock record says it holds is that appliance's, not a refusal."""
    title = "What serve needs before boot (files, paths, ports, secrets, cores)"
    if plan.engine == "tt" and not devices:
        return check(
            "host.launch",
            title,
            "unknown",
            "not judged: no Tenstorrent devices here",
            "Run it on the TT host",
            blocking=True,
        )
    found = launch_checks(plan, environ, devices=devices).errors
    refused = [p for p in found if not (p.code == "port-in-use" and "held by an appliance" in p.message)]
    if refused:
        return check(
            "host.launch",
            title,
            "fail",
            "; ".join(p.render() for p in refused),
            refused[0].fix,
            blocking=True,
            codes=[p.code for p in refused],
        )
    held = f" (ports held by the appliance: {', '.join(p.key for p in found)})" if found else ""
    return check("host.launch", title, "pass", "serve would refuse nothing here" + held, blocking=True)


def _cores(plan: LaunchPlan) -> Iterator[Problem]:
    """engine.host_share.reserve_cores must leave the engine a core of those this process may run on."""
    share = plan.host_share
    if share is None:
        return
    try:
        engine_cores(share.reserve_cores, plan.env.get(BIND))
    except ValueError as err:
        yield Problem(
            code="host-share-no-core",
            key="engine.host_share.reserve_cores",
            message=str(err),
            fix="Set engine.host_share.reserve_cores=0 or lower it to leave the engine a core",
            change=("engine.host_share.reserve_cores=0",),
        )


def _tls(plan: LaunchPlan) -> Iterator[Problem]:
    from appliance.preflight.tls_files import check_server_files  # cryptography: only for a config with control.tls

    if plan.control.tls is None:
        return
    try:
        check_server_files(plan.control.tls)
    except ConfigError as refused:
        yield from refused.problems


def _paths(plan: LaunchPlan) -> Iterator[Problem]:
    if (
        plan.generate is None
        and plan.weights is None
        and plan.model_path.startswith(("/", ".", "~"))
        and not Path(plan.model_path).is_dir()
    ):
        # vLLM would take the path for a hub repo id and fail only after its imports.
        yield Problem(
            code="checkpoint-missing",
            key="model.checkpoint",
            message=f"{plan.model_path} is not a directory on this host",
            fix="Copy the checkpoint there or point model.checkpoint at its folder",
        )
    if not Path(plan.python).is_file():
        fix = (
            f"Run `{engine_build_command('cpu')}`"
            if plan.engine == "cpu"
            else ("Set engine.python to the tt-metal environment's")
        )
        yield Problem(
            code="engine-missing",
            key="engine.python",
            message=f"the engine's interpreter {plan.python} does not exist",
            fix=fix,
        )
    if plan.media is not None and plan.media.site_local_dir and not Path(plan.media.local_dir).is_dir():
        # vLLM refuses the folder only once its server starts, after its imports.
        yield Problem(
            code="media-dir-missing",
            key="serving.local_media_dir",
            message=f"{plan.media.local_dir} is not a directory on this host",
            fix="Create it, or remove serving.local_media_dir",
        )
    for key, where in (("paths.state_dir", plan.state_dir), ("paths.log_dir", plan.log_dir)):
        found = _nearest_existing(Path(where).expanduser())
        if not (found.is_dir() and os.access(found, os.W_OK | os.X_OK)):
            yield Problem(
                code="path-not-writable",
                key=key,
                message=f"{where} cannot be created or written ({found} is not a directory this user may write)",
                fix=f"Give this user write access to {found} or set {key}",
            )


def _nearest_existing(path: Path) -> Path:
    return next(p for p in (path, *path.parents) if p.exists())


def _ports(plan: LaunchPlan) -> Iterator[Problem]:
    taken = {plan.port, plan.control.port}
    for key, host, port in (
        ("serving.port", plan.host, plan.port),
        ("control.port", plan.control.host, plan.control.port),
    ):
        reason = _bind_refusal(host, port)
        if reason is None:
            continue
        record = _lock_record(Path(plan.state_dir), port)
        if record is not None and not _alive(record):
            # An appliance that died (SIGKILL, a crash) leaves its engine stopping for a while (PR_SET_PDEATHSIG
            # sends it SIGTERM): the port frees by itself, as systemd's Restart= expects. Not a refusal.
            yield Problem(
                code="port-in-use",
                key=key,
                message=f"{host}:{port} is still held, by what an appliance that exited left "
                f"({record}): its engine is stopping",
                fix="serve goes on; the engine binds the port once it is free",
                severity="warning",
            )
            continue
        holder = f", held by an appliance ({record})" if record is not None else ""
        message = f"{host}:{port} cannot be bound: {reason}{holder}"
        free = _free_port(host, port, taken)
        if free is None:
            yield Problem(
                code="port-in-use", key=key, message=message, fix=f"Stop what holds it, or set {key} to a free port"
            )
            continue
        taken.add(free)
        yield Problem(
            code="port-in-use",
            key=key,
            message=message,
            fix=f"Stop what holds it, or set {key}={free}",
            change=(f"{key}={free}",),
        )


def _bind_refusal(host: str, port: int) -> str | None:
    """Why `port` on `host` cannot be bound now, or None."""
    try:
        bound_socket(host, port).close()
    except OSError as error:
        return "in use" if error.errno == errno.EADDRINUSE else error.strerror or str(error)
    return None


def bound_socket(host: str, port: int) -> socket.socket:
    """A socket bound to `port` on `host` as `serve` binds its control API (SO_REUSEADDR); OSError if it cannot."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _lock_record(state_dir: Path, port: int) -> str | None:
    """What the lock record of `port` says ("pid N, site S, checkpoint"), written by the appliance that took it."""
    try:
        return (state_dir / "locks" / f"port-{port}.owner").read_text().strip()
    except OSError:
        return None


def _alive(record: str) -> bool:
    """Whether the appliance a lock record names still runs (its pid, the record's first words)."""
    pid = record.removeprefix("pid ").partition(",")[0]
    return pid.isdigit() and psutil.pid_exists(int(pid))


def _free_port(host: str, port: int, taken: set[int]) -> int | None:
    """The next port above `port` that binds and that the config does not use already (the fix to suggest); None
    when the next ones are all taken."""
    return next(
        (
            p
            for p in range(port + 1, min(port + _PORT_SEARCH, 65535) + 1)
            if p not in taken and _bind_refusal(host, p) is None
        ),
        None,
    )


def _secrets(plan: LaunchPlan, environ: Mapping[str, str]) -> Iterator[Problem]:
    """Each secret the config names must be set (or mounted as a file: `serve`'s APPLIANCE_SECRETS_DIR); only its
    presence is judged, and no message shows its value."""
    present = {**secrets_from_dir(environ), **environ}
    for target, source in plan.secret_env.items():
        if target in _OPTIONAL_SECRETS or present.get(source):
            continue
        key = "serving.api_key_env" if target == "VLLM_API_KEY" else f"engine.secret_env.{target}"
        yield Problem(
            code="secret-missing",
            key=key,
            message=f"${source} is not set, so the engine would start without {target}",
            fix=f"Export {source} (or mount it as a file in ${SECRETS_DIR_ENV}) before serve",
        )


def secrets_from_dir(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables held as files in `$APPLIANCE_SECRETS_DIR`, one per file named after it, that the
    environment does not set itself: how a Kubernetes Secret mounted as a volume reaches `serve`.

    Unset, nothing is read (a single host passes secrets as variables). Kubelet's own entries in the
    directory (`..data`) are not variable names and are passed over.
    """
    if not (where := environ.get(SECRETS_DIR_ENV)):
        return {}
    directory = Path(where)
    if not directory.is_dir():
        raise ConfigError(
            (
                Problem(
                    code="secrets-dir-missing",
                    key=SECRETS_DIR_ENV,
                    message=f"{where} is not a directory",
                    fix=f"Mount the secrets there or unset {SECRETS_DIR_ENV}",
                ),
            )
        )
    found = {}
    for path in sorted(directory.iterdir()):
        if _VARIABLE.match(path.name) and path.is_file() and not environ.get(path.name):
            try:
                found[path.name] = path.read_text().rstrip("\r\n")
            except OSError as error:
                problem = Problem(
                    code="secret-file",
                    key=SECRETS_DIR_ENV,
                    message=f"cannot read {path}: {error.strerror}",
                    fix="Give the appliance's user read access (fsGroup in the pod)",
                )
                raise ConfigError((problem,)) from None
    return found
