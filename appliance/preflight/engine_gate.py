"""`serve`'s first boot behind the engine's own verdict, in one process: vLLM is imported once for both.

The engine's process starts as the probe's `gate` (engine_plugins/appliance_probe.py) before the checkpoint is
checked or built, and imports vLLM's server while that runs: the two are independent, and each takes a core. Told to
judge, it runs vLLM's config code on the plan's command line and prints its verdict. Accepted, it is told to go and
becomes the API server in the same interpreter, so the import the verdict paid for is the boot's (a separate probe
was a cold import of its own: 28.3 s of a 164.9 s first answer, issue 43). Refused, it is dismissed, and nothing
ever listened on the OpenAI port. Restarts spawn the plain command line: the verdict is the plan's, and a crash loop
does not pay for it again.

TT keeps the probe of its own (engines/config_probe.py): with standard data parallelism the plugin opens the chips
at config time, and that probe exits before the engine opens them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from appliance.engines.config_probe import EngineVerdict, failed, gated_argv, verdict_from
from appliance.engines.engine_env import MARKER, no_result, probe_result, timed_out
from appliance.errors import LaunchError
from appliance.host.share import Placement
from appliance.plan import LaunchPlan
from appliance.runtime.spawn import engine_environment, engine_placement, spawn_engine

__all__ = ["GatedEngine", "verdict_in_engine"]

_TAIL = 20  # lines kept to say why a gate gave no verdict


def verdict_in_engine(plan: LaunchPlan) -> bool:
    """Whether `serve` boots `plan` behind its verdict in one process (the CPU engine) or probes apart (TT)."""
    return plan.engine == "cpu"


class GatedEngine:
    """The engine's process, importing and then waiting to be told to judge and to go; its `spawn` (a supervisor's
    SpawnFn) lets it go the first time."""

    def __init__(
        self, plan: LaunchPlan, proc: asyncio.subprocess.Process, env: Mapping[str, str], placement: Placement | None
    ) -> None:
        self._plan = plan
        self._proc: asyncio.subprocess.Process | None = proc
        self._env = dict(env)
        self._placement = placement

    @classmethod
    async def start(cls, plan: LaunchPlan, environ: Mapping[str, str]) -> GatedEngine:
        """Start `plan`'s engine as its supervisor would place it; it imports while the caller goes on."""
        placement = engine_placement(plan)
        env = engine_environment(plan, environ, placement)
        proc = await spawn_engine(gated_argv(plan), env, plan.state_dir, placement, stdin=asyncio.subprocess.PIPE)
        return cls(plan, proc, env, placement)

    @property
    def pid(self) -> int | None:
        """The waiting engine's pid; None once it was let go or dismissed."""
        return None if self._proc is None else self._proc.pid

    async def judge(self) -> EngineVerdict:
        """The engine's verdict on the plan (its checkpoint in place now). A refusal dismisses the engine; no verdict
        within `engine.probe_timeout_s` is a LaunchError in the probe's words, the engine dismissed."""
        plan, proc = self._plan, self._proc
        assert proc is not None and proc.stdin is not None  # judged once, before it is let go
        started = time.monotonic()
        try:
            await _tell(proc, "judge")
            data = await asyncio.wait_for(_verdict(proc, plan.python), plan.probe_timeout_s)
        except (LaunchError, TimeoutError) as error:
            await self.close()
            if isinstance(error, TimeoutError):
                error = timed_out(plan.python, "config", plan.probe_timeout_s)
            raise failed(plan.engine, error) from None
        verdict = verdict_from(plan, data, started)
        if not verdict.accepted:
            await self.close()
        return verdict

    async def spawn(
        self, argv: Sequence[str], env: Mapping[str, str], cwd: str, placement: Placement | None
    ) -> asyncio.subprocess.Process:
        """The waiting engine, told to go, when the supervisor asks for the command line it was judged on; else
        (a restart, another generation's plan) a plain spawn."""
        proc, self._proc = self._proc, None
        if proc is not None and (tuple(argv), dict(env)) == (self._plan.argv, self._env) and proc.returncode is None:
            await _tell(proc, "go")
            return proc
        if proc is not None:
            await _dismiss(proc)
        return await spawn_engine(argv, env, cwd, placement)

    async def close(self) -> None:
        """Dismiss the engine if it was never let go (refused, or serve stopped before the supervisor spawned), and
        remove its place on the host: no supervisor took it over."""
        proc, self._proc = self._proc, None
        if proc is not None:
            await _dismiss(proc)
            if self._placement is not None:
                self._placement.release()


async def _tell(proc: asyncio.subprocess.Process, word: str) -> None:
    """One line to the gate; one that died meanwhile is seen by whoever reads it next (its exit, its output)."""
    assert proc.stdin is not None  # spawned with a pipe
    proc.stdin.write(f"{word}\n".encode())
    with contextlib.suppress(ConnectionError):
        await proc.stdin.drain()
    if word == "go":
        proc.stdin.close()


async def _verdict(proc: asyncio.subprocess.Process, python: str) -> dict[str, Any]:
    """Read the gate's output up to its verdict line."""
    assert proc.stdout is not None  # spawned with a pipe
    tail: deque[str] = deque(maxlen=_TAIL)
    while line := (await proc.stdout.readline()).decode(errors="replace"):
        if line.startswith(MARKER):
            return probe_result(line)
        tail.append(line)
    raise no_result(python, "config", await proc.wait(), " ".join(tail))


async def _dismiss(proc: asyncio.subprocess.Process) -> None:
    """End a gate that will not serve: its group is killed if it is still there (it holds nothing yet)."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()
