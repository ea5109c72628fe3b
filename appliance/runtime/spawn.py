"""Start the engine process: its environment, its own process group, and death with the appliance.

The engine leads a process group of its own, so a stop reaches every worker it forked, and it gets
SIGTERM if the appliance dies, so a killed appliance leaves no engine holding devices. It stays in
the appliance's session: Linux's autogroup scheduler shares the CPU between sessions, and an engine
in a session of its own starved the appliance on a saturated 2-core host (its main thread ran 1.4 %
of the time and waited in the run queue 78.7 %; `/readyz` took 0.85 s at the median, 13.8 s at
worst, under 4 closed-loop streams), so balancers took a serving appliance for a dead one.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

from appliance.compat.media import proxy_env
from appliance.host.share import BIND, Placement, placement_for
from appliance.plan import LaunchPlan

__all__ = ["SpawnFn", "engine_environment", "engine_placement", "spawn_engine"]

SpawnFn = Callable[[Sequence[str], Mapping[str, str], str, Placement | None], Awaitable[asyncio.subprocess.Process]]
_LINE_LIMIT = 1 << 20  # engine log lines can be long (full config dumps)


def engine_environment(plan: LaunchPlan, base: Mapping[str, str], placement: Placement | None = None) -> dict[str, str]:
    """The engine's environment: the appliance's, minus its control token, plus the plan's (a vision engine's
    fetches go through its media gate); the OpenMP threads bound to the cores the `placement` owns where the plan
    binds none."""
    env = {k: v for k, v in base.items() if k != plan.control.token_env}
    if placement is not None and placement.cores is not None:
        env[BIND] = ",".join(map(str, placement.cores))
    env.update(plan.env)
    if plan.media is not None:
        env.update(proxy_env(plan.port, base))
    env.update({target: base[source] for target, source in plan.secret_env.items() if source in base})
    return env


def engine_placement(plan: LaunchPlan, name: str | None = None) -> Placement | None:
    """Where `plan`'s engine runs on the host (its engine.host_share), its cgroup named `name` (default: the
    engine's port's); None: unbounded."""
    share = plan.host_share
    if share is None:
        return None
    return placement_for(name or f"engine-{plan.port}", share.weight, share.reserve_cores, plan.env.get(BIND))


def _engine_child(placement: Placement | None) -> None:
    """Runs in the child before exec: lead a process group of its own, get SIGTERM when the appliance dies, and
    take the engine's place on the host (host_share)."""
    os.setpgid(0, 0)  # `process_group=0` from Python 3.11 only
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    if placement is not None:
        placement.enter()


async def spawn_engine(
    argv: Sequence[str], env: Mapping[str, str], cwd: str, placement: Placement | None, *, stdin: int | None = None
) -> asyncio.subprocess.Process:
    """The engine in a process group of its own, at its `placement`, in `cwd`: never the operator's directory,
    whose stray `re.py` or `torch/` would shadow the engine's imports (`python -m` puts the working directory
    first). `stdin`: none (the default), or a pipe for an engine that waits to be told to go."""
    Path(cwd).mkdir(parents=True, exist_ok=True)
    return await asyncio.create_subprocess_exec(
        *argv,
        env=dict(env),
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL if stdin is None else stdin,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        preexec_fn=functools.partial(_engine_child, placement),
        limit=_LINE_LIMIT,
    )
