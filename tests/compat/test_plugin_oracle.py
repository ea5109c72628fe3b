"""The real vllm-tt-plugin's behaviour at 01078a0 as test vectors (testkit/data/plugin_oracle_01078a0.yaml).

Each run of each recorded case is judged by the appliance with the class capabilities that run's stand-in
declared, given as the installed class would give them (`InstalledClass`): the appliance's verdict, the rule
behind its refusal, the adjustments it predicts and the values it expects the engine to settle on must match
what the plugin's own config-time code did. Runs whose refusal came from the recording's environment, and the
appliance's intentional refusals, carry the reason in the data and are checked for that reason instead.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest

from appliance.compat.matrix import load_matrix
from appliance.compat.validate import InstalledClass, ValidatedConfig, validate
from appliance.config.compose import compose_config
from appliance.data_files import parse_yaml
from appliance.errors import ConfigError
from appliance.plan import build_plan
from testkit.paths import DATA

ORACLE: dict[str, Any] = parse_yaml((DATA / "plugin_oracle_01078a0.yaml").read_text())
RUNS = [(case, mode) for case, entry in ORACLE["cases"].items() for mode in entry["runs"]]
# The rule the appliance names for each kind of refusal the plugin or vLLM gave (first words of the refusal).
REFUSAL_RULES = {
    "does not support on-d": "capability.supports_sample_on_device",
    "supports_spec_decode": "capability.supports_spec_decode",
    "DiffusionGemma must declare output_tokens_per_step": "block_output.required",
    "lane mode and speculative decoding cannot be combined": "speculative.lane_dp",
    "async scheduling is only supported with": "speculative.async",
}
# The plan sets these itself, so the plugin's doing is a no-op the record may or may not name.
EXPLICIT = {"chunked_prefill_off", "batched_tokens_raised"}
MATRIX = load_matrix()


@cache
def judged(case: str, mode: str, *extra: str) -> ValidatedConfig | ConfigError:
    declared = mode.split("_")[0]  # caps_tf5131 declares what caps does
    installed = {
        target: InstalledClass(dict(modes.get(declared, {})) if declared != "nocaps" else {})
        for target, modes in ORACLE["classes"].items()
    }
    composed = compose_config([*ORACLE["cases"][case]["overrides"], *extra])
    try:
        return validate(composed, MATRIX, installed=installed)
    except ConfigError as error:
        return error


@pytest.mark.parametrize(("case", "mode"), RUNS, ids=[f"{c}/{m}" for c, m in RUNS])
def test_the_appliance_judges_as_the_real_plugin_did(case: str, mode: str) -> None:
    run = ORACLE["cases"][case]["runs"][mode]
    note = ORACLE["annotations"].get(f"{case}/{mode}", {})
    result = judged(case, mode)
    if "environment" in note:  # the refusal came from the recording's environment, not from the config
        assert run["verdict"] == "rejected" and note["environment"]
        return
    if "intentional" in note:  # the appliance refuses on purpose what the plugin lets through
        assert run["verdict"] == "accepted" and isinstance(result, ConfigError), note["intentional"]
        return
    if "launch_changed" in note:  # the appliance now plans another launch than the one recorded
        if not isinstance(result, ConfigError):
            assert build_plan(result).env[note["launch_changed"]] == "1"
        assert not isinstance(result, ConfigError) or "context-above-checkpoint" not in result.args[0]
        return
    if "capability_drop" in run["adjustments"] and isinstance(result, ConfigError):
        # features.strict (the default) refuses what the plugin would drop; strict=false is the recorded behaviour.
        assert "the plugin drops it" in str(result)
        result = judged(case, mode, "features.strict=false")
    if run["verdict"] == "rejected":
        assert isinstance(result, ConfigError), f"{case}/{mode}: the plugin refused ({run['refusal']}); we accept"
        expected = next(rule for words, rule in REFUSAL_RULES.items() if words in run["refusal"])
        rules = {p.rule for p in result.problems if p.severity == "error"}
        assert expected in rules, f"{case}/{mode}: the plugin refused with {expected}; we named {rules}"
        return
    assert not isinstance(result, ConfigError), f"{case}/{mode}: the plugin accepted; we refused: {result}"
    predicted = {a.id for a in build_plan(result).adjustments}
    seen = set(run["adjustments"])
    assert not seen - predicted, f"{case}/{mode}: the plugin also did {seen - predicted}"
    assert predicted - seen <= EXPLICIT, f"{case}/{mode}: predicted but not done: {predicted - seen - EXPLICIT}"


EFFECTIVE = [case for case, entry in ORACLE["cases"].items() if "effective" in entry]


@pytest.mark.parametrize("case", EFFECTIVE)
def test_the_plan_expects_the_values_the_real_plugin_settled_on(case: str) -> None:
    result = judged(case, "caps")
    if isinstance(result, ConfigError):  # strict about a drop (see above), or an intentional refusal
        result = judged(case, "caps", "features.strict=false")
    if isinstance(result, ConfigError):
        assert "intentional" in ORACLE["annotations"][f"{case}/caps"]
        return
    expected, effective = build_plan(result).expected, ORACLE["cases"][case]["effective"]
    for key in expected.keys() & effective.keys():
        have = effective[key].rsplit(".", 1)[-1] if key == "scheduler_cls" else effective[key]
        assert expected[key] == have, f"{case}: the plan expects {key}={expected[key]!r}; the plugin set {have!r}"
