"""Run the engine from a LaunchPlan: boot, readiness, crash restarts, hangs, drain and stop.

The engine runs in its own session (process group), so a stop reaches every worker it forked,
and it gets SIGTERM if the appliance dies, so a killed appliance leaves no engine holding devices.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx

from appliance.plan import LaunchPlan
from appliance.runtime.engine_log import EngineLog
from appliance.runtime.lifecycle import TRANSITIONS, EngineState, phase_from_log

__all__ = ["Command", "EngineEvent", "EngineSupervisor", "SpawnFn", "engine_environment", "spawn_engine"]

log = logging.getLogger(__name__)
Command = Literal["drain", "restart", "stop"]
SpawnFn = Callable[[Sequence[str], Mapping[str, str], str], Awaitable[asyncio.subprocess.Process]]
_S = EngineState
_BOOT_ORDER = (_S.STARTING, _S.LOADING, _S.WARMING)
_STABLE_FACTOR = 10  # ready this many max-backoffs counts as recovered from a crash streak
_CAUSE_SCAN = 300  # engine lines searched for the exception that explains a failure
# "ValueError: ...", "OSError: [Errno 98] Address already in use", "RuntimeError: ..."
_EXCEPTION = re.compile(r"\b[A-Z]\w*(?:Error|Exception): .*")
# Wrappers vLLM logs around the real error (and on every shutdown); they never explain a failure.
_WRAPPER_NOISE = re.compile(r"EngineDeadError|EngineCore encountered an issue|Engine core initialization failed")
_LINE_LIMIT = 1 << 20  # engine log lines can be long (full config dumps)


@dataclass(frozen=True, slots=True)
class EngineEvent:
    at: float
    """Wall-clock time (epoch seconds)."""
    previous: EngineState
    state: EngineState
    reason: str


def engine_environment(plan: LaunchPlan, base: Mapping[str, str]) -> dict[str, str]:
    """The engine's environment: the appliance's, minus its control token, plus the plan's."""
    env = {k: v for k, v in base.items() if k != plan.control.token_env}
    env.update(plan.env)
    env.update({target: base[source] for target, source in plan.secret_env.items() if source in base})
    return env


def _die_with_parent() -> None:
    """Runs in the child before exec: deliver SIGTERM to the engine when the appliance dies."""
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


async def spawn_engine(argv: Sequence[str], env: Mapping[str, str], cwd: str) -> asyncio.subprocess.Process:
    """The engine in its own session, in `cwd`: never the operator's directory, whose stray `re.py`
    or `torch/` would shadow the engine's imports (`python -m` puts the working directory first)."""
    Path(cwd).mkdir(parents=True, exist_ok=True)
    return await asyncio.create_subprocess_exec(
        *argv,
        env=dict(env),
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_die_with_parent,
        limit=_LINE_LIMIT,
    )


class EngineSupervisor:
    """Owns one engine process at a time and every change of its lifecycle state."""

    def __init__(
        self,
        plan: LaunchPlan,
        engine_log: EngineLog,
        *,
        spawn: SpawnFn = spawn_engine,
        clock: Callable[[], float] = time.monotonic,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.plan = plan
        self.log = engine_log
        self.state = _S.VALIDATING
        self.pid: int | None = None
        self.restarts = 0
        self.last_error: str | None = None
        self.ready_since: float | None = None
        self.events: list[EngineEvent] = []
        self.listeners: list[Callable[[EngineEvent], None]] = []
        self._spawn = spawn
        self._clock = clock
        self._env = engine_environment(plan, os.environ if environ is None else environ)
        self._commands: asyncio.Queue[Command] = asyncio.Queue()
        self._pending: asyncio.Task[Command] | None = None
        self._crashes = 0

    def request(self, command: Command) -> None:
        """Ask the run loop to drain, restart or stop; safe to call from signal handlers."""
        self._commands.put_nowait(command)

    def uptime(self) -> float | None:
        return None if self.ready_since is None else self._clock() - self.ready_since

    async def run(self) -> None:
        """Supervise until a stop command has been carried out."""
        async with httpx.AsyncClient(timeout=10.0) as http:
            self._http = http
            action = "start"
            while action != "exit":
                action = await (self._attempt() if action == "start" else self._idle())
        if self._pending is not None:
            self._pending.cancel()

    def _change(self, state: EngineState, reason: str) -> None:
        if state not in TRANSITIONS[self.state]:
            raise RuntimeError(f"illegal engine transition {self.state.value} -> {state.value} ({reason})")
        event = EngineEvent(time.time(), self.state, state, reason)
        self.state = state
        self.events.append(event)
        log.info("engine %s -> %s: %s", event.previous.value, state.value, reason)
        for listener in self.listeners:
            listener(event)

    async def _attempt(self) -> str:
        self._change(_S.STARTING, "spawning the engine")
        proc = await self._spawn(self.plan.argv, self._env, self.plan.state_dir)
        self.pid = proc.pid
        pump = asyncio.create_task(self._pump(proc))
        exited = asyncio.create_task(proc.wait())
        outcome = await self._watch(exited)
        if outcome in ("drain", "restart", "stop"):
            self._change(_S.DRAINING, f"{outcome} requested")
            await self._stop(proc, graceful=True)
        elif outcome != "exited":
            await self._stop(proc, graceful=False)
        await pump
        ready_for = self.uptime()
        self.pid, self.ready_since = None, None
        return await self._after(outcome, proc.returncode, ready_for)

    async def _after(self, outcome: str, code: int | None, ready_for: float | None) -> str:
        if outcome == "drain":
            self._change(_S.STOPPED, "drained")
            return "idle"
        if outcome == "stop":
            self._change(_S.STOPPED, "stopped")
            return "exit"
        if outcome == "restart":
            self._change(_S.STOPPED, "drained for restart")
            self._crashes = 0
            return "start"
        tail = self._cause()
        if outcome == "boot-timeout":
            return self._fail(f"not ready within {self.plan.ready_timeout_s:.0f}s; {tail}")
        if ready_for is None:
            # Boot failures (bad model, port taken, too little memory) repeat identically: no restart.
            return self._fail(f"engine exited with code {code} during boot; {tail}")
        sup = self.plan.supervisor
        if ready_for >= _STABLE_FACTOR * sup.backoff_max_s:
            self._crashes = 0  # a long healthy run ends the previous crash streak
        self._crashes += 1
        cause = "stopped answering /health" if outcome == "hung" else f"exited with code {code}"
        if self._crashes > self.plan.supervisor.max_restarts:
            return self._fail(f"crash loop: {self._crashes} crashes in a row, last {cause}; {tail}")
        self.last_error = f"engine {cause}; {tail}"
        self._change(_S.RESTARTING, self.last_error)
        self.restarts += 1
        delay = min(sup.backoff_initial_s * 2 ** (self._crashes - 1), sup.backoff_max_s)
        command = await self._next_command(timeout=delay)
        if command == "stop":
            self._change(_S.STOPPED, "stopped while waiting to restart")
            return "exit"
        return "start"

    def _cause(self) -> str:
        """The engine's own words for what went wrong: its last exception line, else its last lines."""
        recent = self.log.tail(_CAUSE_SCAN)
        errors = [m.group(0) for line in recent if (m := _EXCEPTION.search(line)) and not _WRAPPER_NOISE.search(line)]
        if errors:
            return f"cause: {errors[-1].strip()}"
        return "last lines: " + " | ".join(recent[-5:])

    def _fail(self, message: str) -> str:
        self.last_error = message
        self._change(_S.FAILED, message)
        return "idle"

    async def _idle(self) -> str:
        while True:
            command = await self._next_command()
            if command == "stop":
                if self.state is _S.FAILED:
                    self._change(_S.STOPPED, "stopped after failure")
                return "exit"
            if command == "restart":
                if self.state is _S.FAILED:
                    self._change(_S.RESTARTING, "operator restart")
                self._crashes = 0
                return "start"

    async def _next_command(self, timeout: float | None = None) -> Command | None:
        if self._pending is None:
            self._pending = asyncio.create_task(self._commands.get())
        done, _ = await asyncio.wait({self._pending}, timeout=timeout)
        if not done:
            return None
        command, self._pending = self._pending.result(), None
        return command

    async def _watch(self, exited: asyncio.Task[int]) -> str:
        """Wait for exit, a command, a hang or the readiness budget; probe health meanwhile."""
        sup = self.plan.supervisor
        deadline = self._clock() + self.plan.ready_timeout_s
        last_ok = self._clock()
        while True:
            interval = sup.health_interval_s if self.state is _S.READY else 1.0
            if self._pending is None:
                self._pending = asyncio.create_task(self._commands.get())
            done, _ = await asyncio.wait({exited, self._pending}, timeout=interval, return_when="FIRST_COMPLETED")
            if exited in done:
                return "exited"
            if self._pending in done:
                command, self._pending = self._pending.result(), None
                return command
            if self.state is not _S.READY:
                if self._clock() > deadline:
                    return "boot-timeout"
                if await self._healthy() and await self._answers_one_token():
                    self._change(_S.READY, "/health answered and a one-token completion succeeded")
                    self.ready_since = last_ok = self._clock()
            elif await self._healthy():
                last_ok = self._clock()
            elif self._clock() - last_ok > sup.hang_timeout_s:
                return "hung"

    async def _healthy(self) -> bool:
        try:
            return (await self._http.get(self.plan.health_url, timeout=5.0)).status_code == 200
        except httpx.HTTPError:
            return False

    async def _answers_one_token(self) -> bool:
        key = self._env.get("VLLM_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        body = {"model": self.plan.served_name, "prompt": "ping", "max_tokens": 1}
        try:
            reply = await self._http.post(f"{self.plan.base_url}/v1/completions", json=body, headers=headers)
        except httpx.HTTPError:
            return False
        return reply.status_code == 200

    async def _pump(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None  # spawned with stdout=PIPE
        async for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            self.log.write(line)
            phase = phase_from_log(line)
            if (
                phase is not None
                and self.state in _BOOT_ORDER
                and _BOOT_ORDER.index(phase) > _BOOT_ORDER.index(self.state)
            ):
                self._change(phase, line.strip()[:200])

    async def _stop(self, proc: asyncio.subprocess.Process, *, graceful: bool) -> None:
        """SIGTERM the engine (it drains), then SIGKILL whatever is left of its process group."""
        if graceful and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            sup = self.plan.supervisor
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(proc.wait(), sup.shutdown_timeout_s + sup.stop_grace_s)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
