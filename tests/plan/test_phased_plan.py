"""engine.scheduler=phased in the launch plan: the scheduler class, no chunked prefill, its PYTHONPATH."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from appliance.compat.matrix import CompatibilityMatrix
from appliance.compat.validate import validate
from appliance.config.compose import compose_config
from appliance.errors import ConfigError
from appliance.plan import ENGINE_PLUGINS, PHASED_MODULE, LaunchPlan, build_plan
from testkit.paths import DATA

HELP = DATA / "vllm-cpu-api-server-help.txt"


def plan_for(matrix: CompatibilityMatrix, *overrides: str) -> LaunchPlan:
    return build_plan(validate(compose_config(list(overrides)), matrix))


def after(argv: tuple[str, ...], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_the_default_scheduler_adds_no_flag(matrix: CompatibilityMatrix) -> None:
    plan = plan_for(matrix, "mesh=cpu", "engine=cpu")
    assert "--scheduler-cls" not in plan.argv and "PYTHONPATH" not in plan.env


def test_phased_scheduling_on_the_cpu_engine_disables_chunked_prefill(matrix: CompatibilityMatrix) -> None:
    plan = plan_for(matrix, "mesh=cpu", "engine=cpu", "engine.scheduler=phased")
    assert after(plan.argv, "--scheduler-cls") == f"{PHASED_MODULE}.PhasedScheduler"
    assert "--no-enable-chunked-prefill" in plan.argv
    budget, context = int(after(plan.argv, "--max-num-batched-tokens")), int(after(plan.argv, "--max-model-len"))
    assert budget >= context == plan.max_context
    assert plan.env["PYTHONPATH"] == str(ENGINE_PLUGINS)
    assert (ENGINE_PLUGINS / Path(*PHASED_MODULE.split("."))).with_suffix(".py").is_file()


def test_async_decode_selects_the_async_phased_scheduler_and_keeps_an_operators_pythonpath(
    matrix: CompatibilityMatrix,
) -> None:
    plan = plan_for(
        matrix,
        "mesh=cpu",
        "engine=cpu",
        "engine.scheduler=phased",
        "features.async_decode=true",
        "features.strict=false",
        "engine.env.PYTHONPATH=/opt/site",
    )
    assert after(plan.argv, "--scheduler-cls") == f"{PHASED_MODULE}.AsyncPhasedScheduler"
    assert plan.env["PYTHONPATH"] == f"{ENGINE_PLUGINS}:/opt/site"


def test_every_flag_phased_scheduling_emits_exists_in_the_installed_vllm(matrix: CompatibilityMatrix) -> None:
    known = set(re.findall(r"--[a-z0-9-]+", HELP.read_text()))
    plan = plan_for(matrix, "mesh=cpu", "engine=cpu", "engine.scheduler=phased")
    assert {a for a in plan.argv if a.startswith("--")} <= known


def test_on_a_tt_mesh_phased_is_the_plugins_own_scheduler_and_only_warns(matrix: CompatibilityMatrix) -> None:
    validated = validate(compose_config(["+model=llama", "mesh=t3k", "engine.scheduler=phased"]), matrix)
    expected = {"kv-capacity-unverified", "tt-metal-layout", "revision-unpinned"}
    assert [w.code for w in validated.warnings if w.code not in expected] == ["scheduler-native"]
    assert "--scheduler-cls" not in build_plan(validated).argv


@pytest.mark.parametrize("flag", ["--max-num-batched-tokens,512", "--enable-chunked-prefill", "--scheduler-cls,x.Y"])
def test_raw_flags_that_fight_phased_scheduling_are_refused(matrix: CompatibilityMatrix, flag: str) -> None:
    overrides = ["mesh=cpu", "engine=cpu", "engine.scheduler=phased", f"engine.extra_args=[{flag}]"]
    with pytest.raises(ConfigError, match="flag-owned-by-config"):  # the budget: by the plan, which writes it here
        plan_for(matrix, *overrides)


def test_the_scheduler_module_stays_out_of_the_appliance_package() -> None:
    assert importlib.util.find_spec("appliance_phased") is None  # it imports vLLM; only the engine loads it
