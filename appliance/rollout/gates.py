"""The gates an upgraded appliance must pass before it rejoins the rotation, and the figures they compare.

Figures are measured on the engine itself (not through the balancer: the appliance is out of rotation), on
the old generation before the change and on the new one after it, with the same evaluation set and the same
short run of the site's workload, so the two differ only by the change.

| gate | figure | passes when |
|---|---|---|
| ready | seconds from the switch to ready | ready within `ready_s` (default: the new plan's `ready_timeout_s`) |
| capabilities | differences between the plan and what the engine enabled | none |
| eval | `appliance eval` accuracy | at least the baseline minus `eval_tolerance` (points) |
| goodput | requests meeting the workload's SLO, per second | at least the baseline times 1 - `goodput_tolerance` |
| ttft_p95 | TTFT p95 (ms) | at most the baseline times 1 + `ttft_tolerance` |
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from appliance.config.schema import WorkloadConfig
from appliance.control.upgrade_documents import GateDocument
from appliance.errors import ConfigError, EngineError, Problem
from appliance.loadtest.generator import RunWindow
from appliance.loadtest.run import LoadTarget, run_loadtest
from appliance.plan import LaunchPlan
from appliance.quality.evalset import DEFAULT_EVAL_SET, load_eval_set
from appliance.quality.run import run_eval

__all__ = ["SKIPPABLE", "GateSettings", "judge", "measure", "parse_settings"]

Skippable = Literal["capabilities", "eval", "workload"]
SKIPPABLE: tuple[Skippable, ...] = ("capabilities", "eval", "workload")
Figures = dict[str, float]


@dataclass(frozen=True, slots=True)
class GateSettings:
    """Every threshold with its default; `appliance upgrade` sets them by flag, each within its range."""

    __pydantic_config__ = ConfigDict(extra="forbid")

    ready_s: Annotated[float, Field(gt=0, le=86400)] | None = None
    """Boot budget of the new generation; None: its plan's ready_timeout_s."""
    eval_tolerance: Annotated[float, Field(ge=0, le=1)] = 0.1
    """Accuracy points the new generation may lose (0.1 is 2.5 of the basic set's 25 questions)."""
    eval_set: str | None = None
    """Evaluation set file; None: build/eval/basic.yaml."""
    load_duration_s: Annotated[float, Field(gt=0, le=3600)] = 15.0
    load_requests: Annotated[int, Field(ge=1, le=100000)] = 40
    goodput_tolerance: Annotated[float, Field(ge=0, le=1)] = 0.25
    ttft_tolerance: Annotated[float, Field(ge=0, le=100)] = 0.5
    skip: tuple[Skippable, ...] = ()


_SETTINGS: TypeAdapter[GateSettings] = TypeAdapter(GateSettings)


def parse_settings(data: object, where: str) -> GateSettings:
    """Gate settings from the wire (`where` "gates.") or the command line ("--"); ConfigError naming the field or
    flag and its range otherwise."""
    try:
        return _SETTINGS.validate_python(data)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        field = field.replace("_", "-") if where == "--" else field  # named as the command line's flag
        hint = "See `appliance upgrade --help` for each gate's range"
        raise ConfigError((Problem("bad-gate", f"{where}{field}", first["msg"].lower(), hint),)) from None


async def measure(plan: LaunchPlan, workload: WorkloadConfig, settings: GateSettings) -> Figures:
    """Accuracy, goodput and TTFT p95 of the engine `plan` serves (those of the gates not skipped)."""
    figures: Figures = {}
    key_env = plan.secret_env.get("VLLM_API_KEY")  # the variable that holds the engine's API key
    if "eval" not in settings.skip:
        evalset = load_eval_set(Path(settings.eval_set) if settings.eval_set else DEFAULT_EVAL_SET)
        figures["accuracy"] = (await run_eval(evalset, plan.base_url, api_key_env=key_env)).accuracy
    if "workload" not in settings.skip:
        target = LoadTarget(plan.base_url, f"upgrade gate {plan.config_hash}", key_env)
        window = RunWindow(settings.load_duration_s, settings.load_requests, drain_s=settings.load_duration_s * 4)
        report = await run_loadtest(workload, target, window)
        if report.failed:
            raise EngineError(f"the gate's workload run had {report.failed} failed requests of {report.sent}")
        figures["goodput"] = report.goodput.rate_per_s
        figures["ttft_p95"] = report.ttft.p95 or 0.0
    return figures


def judge(baseline: Figures, now: Figures, settings: GateSettings) -> tuple[GateDocument, ...]:
    """Each measured gate's verdict, its figure against its threshold."""
    results = []
    if "accuracy" in now:
        low = max(0.0, baseline["accuracy"] - settings.eval_tolerance)
        results.append(_at_least("eval", now["accuracy"], low, f"accuracy {now['accuracy']:.2f}, baseline "
                                 f"{baseline['accuracy']:.2f} - {settings.eval_tolerance:.2f}"))  # fmt: skip
    if "goodput" in now:
        low = baseline["goodput"] * (1 - settings.goodput_tolerance)
        results.append(_at_least("goodput", now["goodput"], low, f"goodput {now['goodput']:.2f}/s, baseline "
                                 f"{baseline['goodput']:.2f}/s x {1 - settings.goodput_tolerance:.2f}"))  # fmt: skip
        high = baseline["ttft_p95"] * (1 + settings.ttft_tolerance)
        passed = now["ttft_p95"] <= high
        results.append(GateDocument("ttft_p95", passed, now["ttft_p95"], high, f"TTFT p95 {now['ttft_p95']:.0f} ms, "
                                  f"at most {high:.0f} ms (baseline {baseline['ttft_p95']:.0f} ms)"))  # fmt: skip
    return tuple(results)


def _at_least(name: str, figure: float, threshold: float, detail: str) -> GateDocument:
    return GateDocument(name, figure >= threshold, figure, threshold, f"{detail} = {threshold:.2f} at least")
