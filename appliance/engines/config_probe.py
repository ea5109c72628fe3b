"""The engine's own verdict on a launch plan, asked before anything boots.

The probe runs vLLM's serve parser, `AsyncEngineArgs.from_cli_args` and `create_engine_config` (with the
platform's config hooks: on TT the plugin's `check_and_update_config`) in the engine's interpreter, with the
plan's argv and environment, in a subprocess with a bound (`engine.probe_timeout_s`). It loads no weights and
serves nothing; the appliance imports none of it. What it settled on is set against the plan's prediction
(`LaunchPlan.expected`), so an adjustment the records missed, or a prediction that did not happen, is named.

On TT, standard data parallelism makes the plugin discover device groups at config time, which opens the
chips. The probe runs while `serve` holds the device lock and exits before the engine spawns, so the
chips are free again when the engine opens them; `check` and `plan --probe` take the same lock and refuse
to probe while another appliance holds it (engine_env.probe_ttnn's rule), instead of fighting it for the chips.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from appliance.compat.validate import InstalledClass, InstalledClasses
from appliance.engines.engine_env import MARKER, PROBE_SCRIPT, holding_devices, run_probe
from appliance.errors import LaunchError
from appliance.host.discovery import Board
from appliance.host.share import Placement, placement_for
from appliance.plan import ENGINE_MODULE, LaunchPlan

__all__ = [
    "Difference",
    "EngineVerdict",
    "compare",
    "engine_args",
    "failed",
    "gated_argv",
    "probe_config",
    "probe_placement",
    "read_classes",
    "verdict_from",
]


@dataclass(frozen=True, slots=True)
class Difference:
    """One value where the engine and the plan's prediction part ways."""

    key: str
    expected: Any
    effective: Any

    def line(self) -> str:
        return f"{self.key}: the plan predicted {self.expected!r}, the engine settled on {self.effective!r}"


@dataclass(frozen=True, slots=True)
class EngineVerdict:
    """What the engine's config code said of a plan."""

    interpreter: str
    vllm: str | None
    accepted: bool
    refusal: str | None
    """The engine's refusal in one line (None when accepted)."""
    effective: Mapping[str, Any]
    """The values the engine settled on (empty when refused)."""
    differences: tuple[Difference, ...]
    logged: tuple[str, ...]
    """What the engine logged at WARNING and above, and the platform's INFO lines about changes it made."""
    elapsed_s: float


def engine_args(plan: LaunchPlan) -> tuple[str, ...]:
    """The engine's own arguments: argv after `python -m vllm.entrypoints.openai.api_server`."""
    return plan.argv[plan.argv.index(ENGINE_MODULE) + 1 :]


def gated_argv(plan: LaunchPlan) -> tuple[str, ...]:
    """The engine's process behind its own verdict: the probe's `gate` mode, which becomes the API server on `go`."""
    return (plan.python, str(PROBE_SCRIPT), "gate", MARKER, "--", *engine_args(plan))


def probe_placement(plan: LaunchPlan) -> Placement | None:
    """The probe's place on the host: the engine's weight (no cores to bind: it runs no kernels), in a cgroup of
    its own removed when it ends."""
    share = plan.host_share
    return None if share is None else placement_for(f"probe-{plan.port}-{os.getpid()}", share.weight, 0, None)


def probe_config(
    plan: LaunchPlan, env: Mapping[str, str], boards: tuple[Board, ...] = (), lock_dir: Path | None = None
) -> EngineVerdict:
    """Ask the engine's config code about `plan` with the engine's environment `env` (spawn.engine_environment).

    `boards` and `lock_dir`: take the device lock first (engine_env.holding_devices), for a caller that does not
    hold it already. LaunchError, naming the engine environment and the next step, when the probe cannot give
    a verdict: the interpreter is missing, vLLM does not import, the probe crashed or hung past its bound.
    """
    started = time.monotonic()
    try:
        with holding_devices(boards, lock_dir) as holder:
            if holder is not None:
                raise LaunchError(f"the devices are held by {holder}, and the plugin may open them at config time")
            data = run_probe(
                plan.python, "config", plan.probe_timeout_s, ("--", *engine_args(plan)), env, probe_placement(plan)
            )
    except LaunchError as error:
        raise failed(plan.engine, error) from None
    return verdict_from(plan, data, started)


def verdict_from(plan: LaunchPlan, data: Mapping[str, Any], started: float) -> EngineVerdict:
    """The probe's JSON result on `plan`, set against the plan's prediction; `started`: when it was asked
    (time.monotonic)."""
    effective: dict[str, Any] = data.get("effective") or {}
    accepted = bool(data.get("accepted"))
    return EngineVerdict(
        interpreter=plan.python,
        vllm=data.get("vllm"),
        accepted=accepted,
        refusal=None if accepted else str(data.get("refusal") or "refused without a reason"),
        effective=MappingProxyType(effective),
        differences=compare(plan.expected, effective) if accepted else (),
        logged=tuple(data.get("logged") or ()),
        elapsed_s=time.monotonic() - started,
    )


def read_classes(python: str, targets: tuple[str, ...], env: Mapping[str, str], timeout_s: float) -> InstalledClasses:
    """Each `module:Class`'s `model_capabilities`, imported in the tt-metal environment (nothing is built or opened).

    `env`: the appliance's environment with the engine's (tt-metal's `models` package is found through it, as the
    engine finds it). LaunchError when the interpreter cannot run the probe at all.
    """
    try:
        data = run_probe(python, "classes", timeout_s, targets, env)
    except LaunchError as error:
        raise failed("tt", error) from None
    return MappingProxyType(
        {target: InstalledClass(read.get("capabilities"), read.get("error")) for target, read in data.items()}
    )


def compare(expected: Mapping[str, Any], effective: Mapping[str, Any]) -> tuple[Difference, ...]:
    """Every predicted key whose effective value differs; a scheduler compares by class name."""
    found = []
    for key, want in expected.items():
        have = effective.get(key)
        if key == "scheduler_cls" and isinstance(have, str):
            have = have.rsplit(".", 1)[-1]
        if key in effective and have != want:
            found.append(Difference(key, want, have))
    return tuple(found)


def failed(engine: str, error: LaunchError) -> LaunchError:
    """A probe that gave no verdict, in one line naming the engine and the next step."""
    return LaunchError(
        f"config-time probe of engine {engine} failed: {error}; rebuild the environment "
        f"(`appliance build engine={engine}`) or pass --no-probe"
    )
