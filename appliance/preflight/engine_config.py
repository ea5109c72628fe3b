"""The check that asks the engine's own config code about the plan (engines/config_probe.py), for `appliance check`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from appliance.engines.config_probe import probe_config
from appliance.errors import LaunchError
from appliance.host.discovery import HostFacts
from appliance.plan import LaunchPlan
from appliance.preflight.results import CheckResult, check
from appliance.runtime.spawn import engine_environment

__all__ = ["engine_config_check"]

_ID, _TITLE = "engine.config", "the engine's own config code accepts the plan"


def engine_config_check(plan: LaunchPlan, host: HostFacts) -> CheckResult:
    """pass: accepted as planned; warn: accepted with differences; fail: refused; unknown: could not be asked.

    On TT it takes the device lock (the plugin may open chips for standard-DP discovery) and says who holds it.
    """
    if plan.generate is not None and not Path(plan.model_path).is_dir():
        return check(
            _ID,
            _TITLE,
            "unknown",
            f"the embedded {plan.generate} is not built yet in {plan.model_path}",
            "Run `appliance serve` once (it builds the model), then check again",
        )
    boards = host.boards if plan.engine == "tt" else ()
    try:
        verdict = probe_config(plan, engine_environment(plan, os.environ), boards, Path(plan.state_dir) / "locks")
    except LaunchError as error:
        return check(_ID, _TITLE, "unknown", str(error), "Build the engine environment, or run the check on its host")
    evidence: dict[str, Any] = {
        "vllm": verdict.vllm,
        "elapsed_s": round(verdict.elapsed_s, 1),
        "effective": dict(verdict.effective),
        "logged": list(verdict.logged),
    }
    if not verdict.accepted:
        return check(
            _ID,
            _TITLE,
            "fail",
            f"vLLM {verdict.vllm} refused it: {verdict.refusal}",
            "Change the setting the refusal names",
            **evidence,
        )
    if verdict.differences:
        lines = "; ".join(d.line() for d in verdict.differences)
        return check(
            _ID,
            _TITLE,
            "warn",
            f"accepted, but not as planned: {lines}",
            "Record what the engine does in models/ or the plugin state, or set it explicitly",
            differences=[d.key for d in verdict.differences],
            **evidence,
        )
    return check(_ID, _TITLE, "pass", f"vLLM {verdict.vllm} accepted it as planned", **evidence)
