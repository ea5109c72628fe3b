"""The gates an upgraded appliance must pass before it rejoins the rotation, and the figures they compare.

Figures are measured on the engine itself (not through the balancer: the appliance is out of rotation), on
the old generation before the change and on the new one after it, with the same evaluation set and the same
short run of the site's workload, so the two differ only by the change.

| gate | figure | passes when |
|---|---|---|
| ready | seconds from the switch to ready | ready within `ready_s` (default: the new plan's `ready_timeout_s`) |
| capabilities | differences between the plan and what the engine enabled | none |
| eval | `appliance eval` accuracy | at least the baseline minus `eval_tolerance` (points) |
|  | (random weights) share of questions answered, the serving path only | all of them |
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
from appliance.data_files import load_data_file
from appliance.errors import ConfigError, EngineError, Problem
from appliance.loadtest.generator import RunWindow
from appliance.loadtest.run import LoadTarget, run_loadtest
from appliance.plan import LaunchPlan
from appliance.quality.evalset import DEFAULT_EVAL_SET, VISION_EVAL_SET, load_eval_set
from appliance.quality.run import run_eval

__all__ = [
    "SKIPPABLE",
    "EvalMode",
    "GateFile",
    "GateSettings",
    "eval_mode",
    "judge",
    "load_gate_file",
    "measure",
    "parse_settings",
]

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
    """Evaluation set file; None: build/eval/basic.yaml, or build/eval/vision.yaml on a vision model."""
    load_duration_s: Annotated[float, Field(gt=0, le=3600)] = 15.0
    load_requests: Annotated[int, Field(ge=1, le=100000)] = 40
    goodput_tolerance: Annotated[float, Field(ge=0, le=1)] = 0.25
    ttft_tolerance: Annotated[float, Field(ge=0, le=100)] = 0.5
    skip: tuple[Skippable, ...] = ()


_SETTINGS: TypeAdapter[GateSettings] = TypeAdapter(GateSettings)


@dataclass(frozen=True, slots=True)
class GateFile:
    """`serve --gates FILE`: the figures a recorded generation reached, and the gates' settings (a Kubernetes pod's
    gates, from a ConfigMap). Each gate that runs needs its baseline: `accuracy` for eval, `goodput` and `ttft_p95`
    (ms) for the workload run."""

    __pydantic_config__ = ConfigDict(extra="forbid")

    baseline: dict[str, Annotated[float, Field(ge=0)]]
    """accuracy, goodput (requests meeting the SLO per second) and ttft_p95 (ms)."""
    gates: GateSettings = GateSettings()


_GATE_FILE: TypeAdapter[GateFile] = TypeAdapter(GateFile)


@dataclass(frozen=True, slots=True)
class EvalMode:
    """The evaluation set both generations are asked, and whether their replies are graded."""

    eval_set: Path
    graded: bool


def eval_mode(old: LaunchPlan | None, new: LaunchPlan, settings: GateSettings) -> EvalMode:
    """The set named in `settings`, else the vision set where both generations see images; graded unless both
    models' weights are noise. `old` None: a first boot against a recorded baseline, judged by `new` alone."""
    both = (new,) if old is None else (old, new)
    default = VISION_EVAL_SET if all(p.images is not None for p in both) else DEFAULT_EVAL_SET
    return EvalMode(Path(settings.eval_set) if settings.eval_set else default, not all(p.random_weights for p in both))


_NEEDS = {"eval": ("accuracy",), "workload": ("goodput", "ttft_p95")}


def load_gate_file(path: Path) -> GateFile:
    """The gate file, or ConfigError naming the file and key (a missing baseline for a gate that runs too)."""
    found = load_data_file(path, _GATE_FILE, "gate-file", "gate file")
    unknown = sorted(set(found.baseline) - {k for keys in _NEEDS.values() for k in keys})
    if unknown:
        raise ConfigError(
            (
                Problem(
                    code="gate-file",
                    key=f"{path}:baseline.{unknown[0]}",
                    message="is not a gate's figure",
                    fix="Use accuracy, goodput and ttft_p95",
                ),
            )
        )
    for gate, keys in _NEEDS.items():
        missing = [k for k in keys if k not in found.baseline]
        if missing and gate not in found.gates.skip:
            raise ConfigError(
                (
                    Problem(
                        code="gate-file",
                        key=f"{path}:baseline",
                        message=f"the {gate} gate needs {', '.join(missing)}",
                        fix=f"Record it, or add {gate} to gates.skip",
                    ),
                )
            )
    return found


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
        raise ConfigError(
            (Problem(code="bad-gate", key=f"{where}{field}", message=first["msg"].lower(), fix=hint),)
        ) from None


async def measure(plan: LaunchPlan, workload: WorkloadConfig, settings: GateSettings, mode: EvalMode) -> Figures:
    """Accuracy (or the share answered, `mode`), goodput and TTFT p95 of the engine `plan` serves (those of the
    gates not skipped)."""
    figures: Figures = {}
    key_env = plan.secret_env.get("VLLM_API_KEY")  # the variable that holds the engine's API key
    if "eval" not in settings.skip:
        graded = await run_eval(load_eval_set(mode.eval_set), plan.base_url, api_key_env=key_env, grade=mode.graded)
        figures["accuracy"] = graded.accuracy
    if "workload" not in settings.skip:
        target = LoadTarget(plan.base_url, f"upgrade gate {plan.config_hash}", key_env)
        window = RunWindow(settings.load_duration_s, settings.load_requests, drain_s=settings.load_duration_s * 4)
        report = await run_loadtest(workload, target, window)
        if report.failed:
            raise EngineError(f"the gate's workload run had {report.failed} failed requests of {report.sent}")
        figures["goodput"] = report.goodput.rate_per_s
        figures["ttft_p95"] = report.ttft.p95 or 0.0
    return figures


def judge(baseline: Figures, now: Figures, settings: GateSettings, mode: EvalMode) -> tuple[GateDocument, ...]:
    """Each measured gate's verdict, its figure against its threshold; not `mode.graded` (random weights): the eval
    figure is the share of questions answered, and all must be."""
    results = []
    if "accuracy" in now and not mode.graded:
        results.append(
            _at_least(
                "eval",
                now["accuracy"],
                1.0,
                f"answered {now['accuracy']:.0%} of the questions, "
                "all required: serving path only, the model's weights are random",
            )
        )
    elif "accuracy" in now:
        low = round(max(0.0, baseline["accuracy"] - settings.eval_tolerance), 9)  # 0.8 - 0.1 is 0.7, not 0.70...01
        results.append(
            _at_least(
                "eval",
                now["accuracy"],
                low,
                f"accuracy {now['accuracy']:.2f}, at least {low:.2f} "
                f"(baseline {baseline['accuracy']:.2f} - {settings.eval_tolerance:.2f})",
            )
        )
    if "goodput" in now:
        low = baseline["goodput"] * (1 - settings.goodput_tolerance)
        results.append(
            _at_least(
                "goodput",
                now["goodput"],
                low,
                f"goodput {now['goodput']:.2f}/s, at least "
                f"{low:.2f}/s (baseline {baseline['goodput']:.2f}/s x "
                f"{1 - settings.goodput_tolerance:.2f})",
            )
        )
        high = baseline["ttft_p95"] * (1 + settings.ttft_tolerance)
        passed = now["ttft_p95"] <= high
        results.append(
            GateDocument(
                "ttft_p95",
                passed,
                now["ttft_p95"],
                high,
                f"TTFT p95 {now['ttft_p95']:.0f} ms, at most {high:.0f} ms (baseline {baseline['ttft_p95']:.0f} ms)",
            )
        )
    return tuple(results)


def _at_least(name: str, figure: float, threshold: float, detail: str) -> GateDocument:
    return GateDocument(name, figure >= threshold, figure, threshold, detail)
