"""The plan's prediction against what the engine settled on, on a recorded probe result (no engine runs here).

testkit/data/vllm-cpu-config-probe.json is the JSON line `appliance_probe.py config` printed for the tiny model's
plan on the real CPU engine (vLLM 0.32.0); tests/engines/test_config_probe.py runs the probe itself.
"""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any

from appliance.cli.engine_verdict import refused, verdict_lines
from appliance.compat.matrix import CompatibilityMatrix
from appliance.compat.validate import validate
from appliance.config.compose import compose_config
from appliance.engines.config_probe import EngineVerdict, compare
from appliance.plan import build_plan
from testkit.helpers import TINY
from testkit.paths import DATA

RECORDED = json.loads((DATA / "vllm-cpu-config-probe.json").read_text())


def verdict(expected: dict[str, Any], data: dict[str, Any] = RECORDED) -> EngineVerdict:
    effective = dict(data["effective"] or {})
    return EngineVerdict(
        "python",
        data["vllm"],
        data["accepted"],
        data["refusal"],
        MappingProxyType(effective),
        compare(expected, effective),
        (),
        5.0,
    )


def test_the_tiny_plan_is_what_the_engine_settled_on(matrix: CompatibilityMatrix) -> None:
    plan = build_plan(validate(compose_config([TINY, "mesh=cpu"]), matrix))
    assert plan.expected["max_model_len"] == 2048 and plan.expected["max_num_seqs"] == 16
    assert compare(plan.expected, RECORDED["effective"]) == ()
    lines = verdict_lines(verdict(dict(plan.expected)))
    assert lines[0] == "engine verdict (vLLM 0.32.0, 5.0s): accepted"
    assert "max_model_len=2048" in lines[1] and "prefix_caching=off" in lines[1] and "dtype=float32" in lines[1]
    assert lines[2].startswith("  as planned")


def test_every_value_the_engine_settled_on_otherwise_is_named(matrix: CompatibilityMatrix) -> None:
    overrides = [TINY, "mesh=cpu", "features.prefix_caching=true", "engine.scheduler=phased"]
    plan = build_plan(validate(compose_config(overrides), matrix))
    differences = {d.key: (d.expected, d.effective) for d in compare(plan.expected, RECORDED["effective"])}
    assert differences == {  # the recorded engine ran the default plan: no prefix caching, chunked prefill on
        "enable_prefix_caching": (True, False),
        "enable_chunked_prefill": (False, True),
        "scheduler_cls": ("PhasedScheduler", "Scheduler"),
    }
    lines = verdict_lines(verdict(dict(plan.expected)))
    assert (
        "  differs from the plan: enable_prefix_caching: the plan predicted True, the engine settled on False" in lines
    )
    assert not any(line.startswith("  as planned") for line in lines)


def test_a_refusal_is_one_line_and_a_config_error() -> None:
    refusal_line = (
        "ValidationError: 1 validation error for SchedulerConfig Value error, max_num_batched_tokens (8) "
        "must be greater than or equal to max_num_seqs (16)."
    )
    said = {"vllm": "0.32.0", "accepted": False, "effective": None, "refusal": refusal_line}
    refusal = verdict({}, said)
    assert verdict_lines(refusal) == [f"engine verdict (vLLM 0.32.0, 5.0s): refused: {said['refusal']}"]
    (problem,) = refused(refusal).problems
    assert problem.code == "engine-refused" and problem.render().count("\n") == 0
    assert problem.message.endswith("max_num_seqs (16)") and "nothing was started" in problem.fix
