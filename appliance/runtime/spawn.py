"""Start the engine process: its environment, its own session, and death with the appliance.

The engine runs in its own session (process group), so a stop reaches every worker it forked,
and it gets SIGTERM if the appliance dies, so a killed appliance leaves no engine holding devices.
"""

from __future__ import annotations

import asyncio
import ctypes
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

from appliance.plan import LaunchPlan

__all__ = ["SpawnFn", "engine_environment", "spawn_engine"]

SpawnFn = Callable[[Sequence[str], Mapping[str, str], str], Awaitable[asyncio.subprocess.Process]]
_LINE_LIMIT = 1 << 20  # engine log lines can be long (full config dumps)


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
