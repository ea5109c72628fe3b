"""What a plan emits must be read by someone: every VLLM_* variable and every flag, at the state's vLLM.

vLLM itself warns `Unknown vLLM environment variable detected: X` for a VLLM_* name it does not read
(issue 17 saw it for VLLM_RPC_TIMEOUT at 0.25.1), so a plan that sets one is not the plan that runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from appliance.compat.states import PluginState
from appliance.errors import Problem

__all__ = ["check_env_reads", "check_plan_reads"]


def check_env_reads(env: Mapping[str, str], state: PluginState) -> Iterator[Problem]:
    """VLLM_* variables in engine.env that vLLM at the state does not read (a warning: vLLM ignores them)."""
    for name in env:
        if not name.startswith("VLLM_") or state.reads_env(name) is not None:
            continue
        known = state.not_read(name)
        why = (
            f"no vLLM at {state.label} reads it ({known.source})"
            if known
            else (f"it is not among the variables recorded as read at {state.label}")
        )
        yield Problem(
            code="env-not-read",
            key=f"engine.env.{name}",
            message=why,
            fix=f"Remove {name}",
            severity="warning",
            rule="reads.env",
        )


def check_plan_reads(flags: Iterable[str], env: Iterable[str], state: PluginState) -> Iterator[Problem]:
    """Flags and VLLM_* variables the appliance itself emits that the state does not record as read."""
    for flag in dict.fromkeys(flags):
        if state.reads_flag(flag) is None:
            yield Problem(
                code="flag-not-read",
                key="plan",
                message=f"the plan passes {flag}, which vLLM at {state.label} is not recorded to read",
                fix="Record the flag's source in build/tt/plugin-states",
                severity="warning",
                rule="reads.flags",
            )
    yield from check_env_reads(dict.fromkeys(env, ""), state)
