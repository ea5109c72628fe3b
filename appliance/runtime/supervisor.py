"""Run the engine from a LaunchPlan: boot, readiness, crash restarts, hangs, drain and stop.

The supervisor alone changes the lifecycle state; others read a frozen `snapshot()` and hear
of changes through `subscribe()`. Spawning (own process group, death with the appliance) is `spawn`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import socket
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx

from appliance.host.share import Placement
from appliance.plan import LaunchPlan
from appliance.runtime.boot_record import BootClock, BootProgress
from appliance.runtime.drain import InFlight
from appliance.runtime.engine_log import EngineLog
from appliance.runtime.faults import Fault, FaultLadder, load_fault_ladder, run_reset
from appliance.runtime.lifecycle import TRANSITIONS, EngineEvent, EngineState, drain_finished_in_log, phase_from_log
from appliance.runtime.spawn import SpawnFn, engine_environment, engine_placement, spawn_engine

__all__ = ["HISTORY", "Command", "EngineSupervisor", "Listener", "SupervisorSnapshot"]

log = logging.getLogger(__name__)
Command = Literal["drain", "restart", "stop"]
_S = EngineState
_BOOT_ORDER = (_S.STARTING, _S.LOADING, _S.WARMING)
_STABLE_FACTOR = 10  # ready this many max-backoffs counts as recovered from a crash streak
_CAUSE_SCAN = 300  # engine lines searched for the exception that explains a failure
# "ValueError: ...", "OSError: [Errno 98] Address already in use", "RuntimeError: ..."
_EXCEPTION = re.compile(r"\b[A-Z]\w*(?:Error|Exception): .*")
# Lines that name an error without being one: vLLM's wrappers around the real error (logged on every
# shutdown too) and its boot-time advice that a low fd limit "can cause ... OSError: [Errno 24]".
_NOT_A_CAUSE = re.compile(
    r"EngineDeadError|EngineCore encountered an issue|Engine core initialization failed|Found ulimit of \d+"
)
HISTORY = 200
"""Lifecycle events a supervisor keeps (the oldest go first): a crash loop must not grow memory."""


Listener = Callable[[EngineEvent], None]


@dataclass(frozen=True, slots=True)
class SupervisorSnapshot:
    """The supervisor at one moment: what GET /state reports of the lifecycle."""

    state: EngineState
    pid: int | None
    """The engine's pid (and process group); None while no engine runs."""
    uptime_s: float | None
    """Seconds since the engine became ready; None while it is not ready."""
    restarts: int
    """Crash restarts since the appliance started."""
    last_error: str | None
    events: tuple[EngineEvent, ...]
    """The most recent lifecycle changes, oldest first (at most the supervisor's `history`)."""
    fault: Fault | None = None
    """The fault-ladder match that ended the last boot, with its next step."""
    quarantined: bool = False
    """The device fault came back after the one reset `on_device_fault: reset_once` allows: hands needed."""
    boot: BootProgress | None = None
    """The boot under way against this config's record on this host."""
    drain_cancelled: int | None = None
    """Requests the last drain's deadline cancelled (0: it finished them all); None before a drain, or unread."""
    host_share: str | None = None
    """Where the engine runs on the host (its cgroup and weight, or nice, and cores); None: unbounded."""


class EngineSupervisor:
    """Owns one engine process at a time and every change of its lifecycle state.

    Nothing else writes its state: `request()` asks for a change, the run loop makes it.
    """

    def __init__(
        self,
        plan: LaunchPlan,
        engine_log: EngineLog,
        *,
        spawn: SpawnFn = spawn_engine,
        clock: Callable[[], float] = time.monotonic,
        environ: Mapping[str, str] | None = None,
        history: int = HISTORY,
        faults: FaultLadder | None = None,
        name: str = "engine",
    ) -> None:
        self.plan = plan
        self.name = name
        """How its log lines name the engine ("slot chat" when several run in one appliance)."""
        self.log = engine_log
        self._state = _S.VALIDATING
        self._pid: int | None = None
        self._restarts = 0
        self._last_error: str | None = None
        self._ready_since: float | None = None
        self._events: deque[EngineEvent] = deque(maxlen=history)
        self._listeners: list[Listener] = []
        self._spawn = spawn
        self._clock = clock
        self._environ = os.environ if environ is None else environ
        self._placement: Placement | None = None
        """Where the engine runs on the host, taken when it spawns (a supervisor that never runs leaves no cgroup)."""
        self._env = engine_environment(plan, self._environ)
        self._next_plan: LaunchPlan | None = None
        self._commands: asyncio.Queue[Command] = asyncio.Queue()
        self._pending: asyncio.Task[Command] | None = None
        self._crashes = 0
        self._faults = faults or load_fault_ladder()
        self._fault: Fault | None = None
        self._faulted = asyncio.Event()
        self._drained = asyncio.Event()
        self._drain_cancelled: int | None = None
        self._resets = 0
        self._boot = self._boot_clock(plan)
        self._listeners.append(self._boot.on_event)

    def request(self, command: Command) -> None:
        """Ask the run loop to drain, restart or stop; safe to call from signal handlers."""
        self._commands.put_nowait(command)

    def switch(self, plan: LaunchPlan) -> None:
        """Drain the engine and boot `plan` in its place (an upgrade, or its rollback); the control API stays up.

        The caller has taken the appliance out of rotation, so the drain does not wait `deregister_s` again.
        """
        self._next_plan = plan
        self.request("restart")

    def board_fault(self, line: str) -> Fault | None:
        """A board monitor's line (a stalled heartbeat, a trip, a vanished board), judged by the same fault ladder
        as the engine's log: a device fault during boot or while ready stops the engine and climbs the ladder
        (fail with the next step, or reset once, then quarantine) before the engine hangs on the board."""
        self.log.write(line)
        fault = self._faults.classify(line)
        if fault is not None and fault.device and self._fault is None and self._state in (*_BOOT_ORDER, _S.READY):
            self._fault = fault
            self._faulted.set()
        return fault

    def snapshot(self) -> SupervisorSnapshot:
        """The lifecycle as it is now, frozen."""
        uptime = None if self._ready_since is None else self._clock() - self._ready_since
        quarantined = self._resets > 0 and self._state is _S.FAILED
        return SupervisorSnapshot(
            self._state,
            self._pid,
            uptime,
            self._restarts,
            self._last_error,
            tuple(self._events),
            self._fault,
            quarantined,
            self._boot.progress(),
            self._drain_cancelled,
            None if self._placement is None else self._placement.describe(),
        )

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call `listener` with every lifecycle change from now on; returns the unsubscribe call."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):  # unsubscribing twice is harmless
                self._listeners.remove(listener)

        return unsubscribe

    async def run(self) -> None:
        """Supervise until a stop command has been carried out."""
        async with httpx.AsyncClient(timeout=10.0) as http:
            self._http = http
            action = "start"
            while action != "exit":
                action = await (self._attempt() if action == "start" else self._idle())
        if self._pending is not None:
            self._pending.cancel()
        if self._placement is not None:
            self._placement.release()

    def _change(self, state: EngineState, reason: str) -> None:
        if state not in TRANSITIONS[self._state]:
            raise RuntimeError(f"illegal engine transition {self._state.value} -> {state.value} ({reason})")
        event = EngineEvent(time.time(), self._state, state, reason)
        self._state = state
        self._events.append(event)
        log.info("%s %s -> %s: %s", self.name, event.previous.value, state.value, reason)
        for listener in tuple(self._listeners):  # a listener may unsubscribe itself
            listener(event)

    def _place(self) -> None:
        """Take the engine's place on the host before it spawns (serve's preflight refused a reserve that leaves it
        no core), said once for each place it takes."""
        placement = engine_placement(self.plan)
        if placement is not None and placement != self._placement:
            log.log(
                logging.WARNING if placement.warning else logging.INFO,
                "%s host share: %s",
                self.name,
                placement.warning or placement.describe(),
            )
        self._placement = placement
        self._env = engine_environment(self.plan, self._environ, placement)

    @property
    def placement(self) -> Placement | None:
        return self._placement

    def _boot_clock(self, plan: LaunchPlan) -> BootClock:
        return BootClock(
            Path(plan.state_dir) / "boot-records.json",
            f"{plan.config_hash}@{socket.gethostname()}",
            tensor_cache=plan.tensor_cache,
        )

    def _adopt_next_plan(self) -> None:
        plan, self._next_plan = self._next_plan, None
        if plan is None:
            return
        clock = self._boot_clock(plan)
        self._listeners[self._listeners.index(self._boot.on_event)] = clock.on_event
        self.plan, self._boot, self._env = plan, clock, engine_environment(plan, self._environ)
        self._crashes = 0

    async def _attempt(self) -> str:
        self._adopt_next_plan()
        self._change(_S.STARTING, "spawning the engine")
        self._fault = None
        self._faulted.clear()
        self._drained.clear()
        self._place()
        proc = await self._spawn(self.plan.argv, self._env, self.plan.state_dir, self._placement)
        self._pid = proc.pid
        pump = asyncio.create_task(self._pump(proc))
        exited = asyncio.create_task(proc.wait())
        outcome = await self._watch(proc, exited)
        if outcome in ("drain", "restart", "stop"):
            was_ready = self._state is _S.READY
            self._change(_S.DRAINING, f"{outcome} requested")
            if was_ready and self._next_plan is None:  # readiness is 503 from now: let balancers notice first
                await asyncio.wait({exited}, timeout=self.plan.supervisor.deregister_s)
            await self._stop(proc, graceful=True)
        else:  # exited too: whatever is left of its group is orphaned
            await self._stop(proc, graceful=False)
        await pump
        ready_for = None if self._ready_since is None else self._clock() - self._ready_since
        self._pid, self._ready_since = None, None
        return await self._after(outcome, proc.returncode, ready_for)

    async def _after(self, outcome: str, code: int | None, ready_for: float | None) -> str:
        if outcome == "drain":
            self._change(_S.STOPPED, "drained" + self._cancelled_note())
            return "idle"
        if outcome == "stop":
            self._change(_S.STOPPED, "stopped" + self._cancelled_note())
            return "exit"
        if outcome == "restart":
            self._change(_S.STOPPED, "drained for restart" + self._cancelled_note())
            self._crashes = 0
            return "start"
        if self._fault is not None and (ready_for is None or outcome == "device-fault"):
            return await self._on_fault(self._fault)
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
        self._last_error = f"engine {cause}; {tail}"
        self._change(_S.RESTARTING, self._last_error)
        self._restarts += 1
        delay = min(sup.backoff_initial_s * 2 ** (self._crashes - 1), sup.backoff_max_s)
        command = await self._next_command(timeout=delay)
        if command == "stop":
            self._change(_S.STOPPED, "stopped while waiting to restart")
            return "exit"
        return "start"

    async def _on_fault(self, fault: Fault) -> str:
        """A fault-ladder line ended the boot: reset once if so configured, else fail with the next step."""
        sup = self.plan.supervisor
        if fault.device and sup.on_device_fault == "reset_once" and self._resets == 0:
            self._resets += 1
            self._change(_S.RESTARTING, f"{fault.cause}; resetting the boards once: {' '.join(sup.reset_command)}")
            error = await run_reset(sup.reset_command, self.log)
            return "start" if error is None else self._fail(f"{error}; the boot had failed with {fault.render()}")
        prefix = "quarantined (the fault came back after a reset): " if self._resets and fault.device else ""
        return self._fail(prefix + fault.render())

    def _cause(self) -> str:
        """The engine's own words for what went wrong: its last exception line, else its last lines."""
        recent = self.log.tail(_CAUSE_SCAN)
        fault = next((f for line in reversed(recent) if (f := self._faults.classify(line))), None)
        if fault is not None:
            return f"cause: {fault.render()}"
        errors = [m.group(0) for line in recent if (m := _EXCEPTION.search(line)) and not _NOT_A_CAUSE.search(line)]
        if errors:
            return f"cause: {errors[-1].strip()}"
        return "last lines: " + " | ".join(recent[-5:])

    def _fail(self, message: str) -> str:
        self._last_error = message
        self._change(_S.FAILED, message)
        return "idle"

    async def _idle(self) -> str:
        while True:
            command = await self._next_command()
            if command == "stop":
                if self._state is _S.FAILED:
                    self._change(_S.STOPPED, "stopped after failure")
                return "exit"
            if command == "restart":
                if self._state is _S.FAILED:
                    self._change(_S.RESTARTING, "operator restart")
                self._crashes = self._resets = 0  # an operator's restart also lifts a quarantine
                return "start"

    async def _next_command(self, timeout: float | None = None) -> Command | None:
        if self._pending is None:
            self._pending = asyncio.create_task(self._commands.get())
        done, _ = await asyncio.wait({self._pending}, timeout=timeout)
        if not done:
            return None
        command, self._pending = self._pending.result(), None
        return command

    async def _watch(self, proc: asyncio.subprocess.Process, exited: asyncio.Task[int]) -> str:
        """Wait for exit, a command, a hang or the readiness budget; probe health meanwhile."""
        faulted = asyncio.ensure_future(self._faulted.wait())
        try:
            return await self._watch_until(proc, exited, faulted)
        finally:
            faulted.cancel()

    async def _watch_until(
        self, proc: asyncio.subprocess.Process, exited: asyncio.Task[int], faulted: asyncio.Future[Any]
    ) -> str:
        sup = self.plan.supervisor
        deadline = self._clock() + self.plan.ready_timeout_s
        last_ok = self._clock()
        while True:
            interval = sup.health_interval_s if self._state is _S.READY else 1.0
            if self._pending is None:
                self._pending = asyncio.create_task(self._commands.get())
            waits: set[asyncio.Future[Any]] = {exited, self._pending, faulted}
            done, _ = await asyncio.wait(waits, timeout=interval, return_when="FIRST_COMPLETED")
            # proc.wait() also waits for the engine's output pipe, which its orphaned children hold
            # open after a kill -9 of the server: its return code is the exit itself.
            if exited in done or proc.returncode is not None:
                return "exited"
            if faulted in done:
                return "device-fault"
            if self._pending in done:
                command, self._pending = self._pending.result(), None
                return command
            if self._state is not _S.READY:
                if self._clock() > deadline:
                    return "boot-timeout"
                if await self._healthy() and await self._answers_one_token():
                    self._change(_S.READY, "/health answered and a one-token completion succeeded")
                    self._ready_since = last_ok = self._clock()
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
            if self._state in _BOOT_ORDER and self._fault is None and (fault := self._faults.classify(line)):
                self._fault = fault  # ends the boot at once instead of waiting out the readiness budget
                self._faulted.set()
            if self._state is _S.DRAINING and drain_finished_in_log(line):
                self._drained.set()
            phase = phase_from_log(line)
            if (
                phase is not None
                and self._state in _BOOT_ORDER
                and _BOOT_ORDER.index(phase) > _BOOT_ORDER.index(self._state)
            ):
                self._change(phase, line.strip()[:200])

    def _cancelled_note(self) -> str:
        """What the drain could not finish, for the STOPPED reason (the log, /state, systemd's STATUS)."""
        if not self._drain_cancelled:
            return ""
        deadline = self.plan.supervisor.shutdown_timeout_s
        return f"; the drain deadline ({deadline:.0f}s) cancelled {self._drain_cancelled} requests still in flight"

    async def _stop(self, proc: asyncio.subprocess.Process, *, graceful: bool) -> None:
        """SIGTERM the engine (it drains), then SIGKILL whatever is left of its process group: after
        stop_grace_s more once its drain is over (it says so, or shutdown_timeout_s has passed)."""
        if graceful and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            sup = self.plan.supervisor
            exited, drained = asyncio.ensure_future(proc.wait()), asyncio.ensure_future(self._drained.wait())
            in_flight = InFlight(self._http, f"{self.plan.base_url}/metrics")
            watch = asyncio.ensure_future(in_flight.watch())
            await asyncio.wait({exited, drained}, timeout=sup.shutdown_timeout_s, return_when=asyncio.FIRST_COMPLETED)
            drained.cancel()
            watch.cancel()
            self._drain_cancelled = 0 if self._drained.is_set() else in_flight.last
            if self._drain_cancelled:
                log.warning(
                    "%s: the drain deadline (%.0fs) cancelled %d requests still in flight; size "
                    "supervisor.shutdown_timeout_s to them (docs: Reliability, Sizing the drain deadline)",
                    self.name,
                    sup.shutdown_timeout_s,
                    self._drain_cancelled,
                )
            await asyncio.wait({exited}, timeout=sup.stop_grace_s)
            exited.cancel()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
