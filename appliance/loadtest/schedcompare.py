"""Mixed against phase-exclusive scheduling: boot the engine with each through the real
`appliance serve` (supervisor, readiness, control API), run the same workload on both, stop it.

One engine at a time, so the two runs share the host's cores equally.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import secrets
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from pathlib import Path

from appliance.config.schema import WorkloadConfig
from appliance.control.client import ApiError, ControlClient, Target
from appliance.errors import EngineError
from appliance.loadtest.generator import LoadProgress, RunWindow
from appliance.loadtest.report import LoadReport
from appliance.loadtest.run import LoadTarget, run_loadtest

__all__ = ["SCHEDULERS", "compare_schedulers", "serve_appliance"]

SCHEDULERS = (("mixed", "default"), ("phased", "phased"))
"""(report label, engine.scheduler) in run order."""
_TOKEN_ENV = "APPLIANCE_TOKEN"
_CPU = ("mesh=cpu", "engine=cpu")  # the emulation's engine, unless the overrides say otherwise


async def compare_schedulers(
    overrides: Sequence[str],
    workload: WorkloadConfig,
    window: RunWindow,
    log_dir: Path,
    *,
    progress: Callable[[LoadProgress], None] = lambda _: None,
    announce: Callable[[str], None] = lambda _: None,
    ready_timeout_s: float = 900.0,
) -> tuple[LoadReport, ...]:
    """One report per scheduler, same workload and seed, so the same arrivals."""
    reports = []
    for label, scheduler in SCHEDULERS:
        log = log_dir / f"serve-{label}.log"
        announce(f"booting the engine with engine.scheduler={scheduler} (log: {log})")
        served = serve_appliance([*_CPU, *overrides, f"engine.scheduler={scheduler}"], log, ready_timeout_s)
        async with served as url:
            announce(f"{label}: engine ready at {url}; running workload {workload.name}")
            reports.append(await run_loadtest(workload, LoadTarget(url, label), window, progress))
    return tuple(reports)


@contextlib.asynccontextmanager
async def serve_appliance(
    overrides: Sequence[str], log_path: Path, ready_timeout_s: float, cpus: Collection[int] | None = None
) -> AsyncIterator[str]:
    """`appliance serve` on free ports until the block ends, ready; yields the engine's base URL.

    Its control token is generated here and passed only through the child's environment.
    `cpus` confines the appliance, and so its engine, to those cores: a benchmark client kept on
    the others then measures it as from a machine of its own.
    """
    engine_port, control_port = _free_port(), _free_port()
    token = secrets.token_urlsafe(24)
    argv = [
        sys.executable,
        "-m",
        "appliance.cli",
        "serve",
        *overrides,
        f"serving.port={engine_port}",
        f"control.port={control_port}",
        f"control.token_env={_TOKEN_ENV}",
    ]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as sink:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            env=os.environ | {_TOKEN_ENV: token},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=sink,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=functools.partial(os.sched_setaffinity, 0, cpus) if cpus else None,
        )
    try:
        await _wait_ready(proc, f"http://127.0.0.1:{control_port}", token, log_path, ready_timeout_s)
        yield f"http://127.0.0.1:{engine_port}"
    finally:
        await _stop(proc)


async def _wait_ready(proc: asyncio.subprocess.Process, control: str, token: str, log: Path, timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with ControlClient([Target("appliance", control, token)], timeout_s=5.0) as api:
        while loop.time() < deadline:
            if proc.returncode is not None:
                raise EngineError(f"appliance serve exited with {proc.returncode} before ready: {_tail(log)}")
            with contextlib.suppress(ApiError):  # not listening yet
                state = (await api.state("appliance")).state
                if state == "ready":
                    return
                if state == "failed":
                    raise EngineError(f"the engine failed to boot: {_tail(log)}")
            await asyncio.sleep(0.5)
    raise EngineError(f"the engine was not ready within {timeout:.0f} s: {_tail(log)}")


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM (serve drains and stops its engine group), SIGKILL to the group if it lingers."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), timeout=120.0)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(log: Path) -> str:
    lines = log.read_text(errors="replace").strip().splitlines()
    return " | ".join(lines[-3:]) or "(no output)"
