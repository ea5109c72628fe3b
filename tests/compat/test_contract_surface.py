"""The surface the 0.26.0 plugin state added, judged before boot, and the same configs under 0.25.1."""

from __future__ import annotations

import json

import pytest

from appliance.compat.matrix import CompatibilityMatrix
from appliance.compat.validate import InstalledClass, ValidatedConfig, validate
from appliance.config.compose import compose_config
from appliance.errors import ConfigError, Problem
from appliance.plan import LaunchPlan, build_plan
from testkit.helpers import TINY, Cli

LLAMA = ["+model=llama", "mesh=t3k", "model.checkpoint=meta-llama/Llama-3.3-70B-Instruct"]
DIFFUSION = ["+model=gemma", "mesh=p300x2", "model.checkpoint=google/diffusiongemma-26B-A4B-it"]
LLAMA_CLASS = "models.ttt_compat.tt.generator_vllm:LlamaForCausalLM"
DIFFUSION_CLASS = "models.experimental.diffusion_gemma.tt.generator_vllm:DiffusionGemmaForCausalLM"
UNDER_0_25 = "not supported by vllm-tt-plugin at e3fc849 (vLLM 0.25.1); supported from 01078a0 (vLLM 0.26.0)"


def judged(
    matrix: CompatibilityMatrix,
    *overrides: str,
    against: str | None = None,
    installed: dict[str, InstalledClass] | None = None,
) -> ValidatedConfig:
    return validate(compose_config(list(overrides)), matrix, against=against, installed=installed)


def refused(
    matrix: CompatibilityMatrix,
    *overrides: str,
    against: str | None = None,
    installed: dict[str, InstalledClass] | None = None,
) -> list[Problem]:
    with pytest.raises(ConfigError) as caught:
        judged(matrix, *overrides, against=against, installed=installed)
    return [p for p in caught.value.problems if p.severity == "error"]


def after(plan: LaunchPlan, flag: str) -> str:
    argv = list(plan.argv)
    return argv[argv.index(flag) + 1]


def test_dotted_and_json_additional_config_fold_into_the_plans_one_json_flag(matrix: CompatibilityMatrix) -> None:
    """vLLM appends dotted keys as a JSON flag that would replace the plan's own wholesale; the plan merges them."""
    plan = build_plan(
        judged(
            matrix,
            *LLAMA,
            "engine.extra_args=[--additional-config.tt.trace_mode,decode_only,"
            """'--additional-config={"tt": {"worker_l1_size": 1344544}}',--max-logprobs,5]""",
        )
    )
    assert list(plan.argv).count("--additional-config") == 1
    assert json.loads(after(plan, "--additional-config"))["tt"] == {
        "trace_mode": "decode_only",
        "worker_l1_size": 1344544,
        "trace_region_size": 30000000,
    }
    assert plan.argv[-2:] == ("--max-logprobs", "5")
    problems = refused(matrix, *LLAMA, "engine.extra_args=[--additional-config.tt.trace_mode,fast]")
    assert [p.code for p in problems] == ["tt-config-value"] and "Invalid trace_mode: fast" in problems[0].message


def test_a_folded_key_that_contradicts_the_config_is_refused(matrix: CompatibilityMatrix) -> None:
    problems = refused(
        matrix, *LLAMA, "tt.trace_mode=all", "engine.extra_args=[--additional-config.tt.trace_mode,none]"
    )
    assert [p.code for p in problems] == ["flag-owned-by-config"]


def test_speculative_ngram_is_planned_at_0_26_and_refused_naming_the_states_at_0_25(
    matrix: CompatibilityMatrix,
) -> None:
    spec = ("features.speculative=ngram", "features.speculative_tokens=3")
    # The ttt_compat class declares no supports_spec_decode (tt-metal 3dfeae9): the plugin refuses, as it did
    # for real (plugin-oracle-01078a0.md l8_t3k_spec).
    (problem,) = refused(matrix, *LLAMA, *spec)
    assert problem.rule == "capability.supports_spec_decode" and "cannot serve a speculative_config" in problem.message
    caps = {"supports_spec_decode": True, "supports_prefix_caching": True}  # a class that declares it, installed
    plan = build_plan(judged(matrix, *LLAMA, *spec, installed={LLAMA_CLASS: InstalledClass(caps)}))
    assert json.loads(after(plan, "--speculative-config")) == {"method": "ngram", "num_speculative_tokens": 3}
    assert "speculative-greedy" in {w.code for w in plan.warnings}
    (problem,) = refused(matrix, *LLAMA, "features.speculative=ngram", against="vllm=0.25.1")
    assert problem.message.startswith(f"speculative decoding is {UNDER_0_25}")
    assert "Speculative decoding is not yet supported for TT backend" in problem.message


def test_chunked_prefill_is_set_as_it_will_run(matrix: CompatibilityMatrix) -> None:
    """0.25.1 turns it off for every model_type but gemma4, so the plan says so; at 0.26.0 Llama declares it."""
    old = build_plan(judged(matrix, *LLAMA, "serving.max_context=65536", against="vllm=0.25.1"))
    assert "--no-enable-chunked-prefill" in old.argv and after(old, "--max-num-batched-tokens") == "65536"
    assert {"chunked_prefill_off": True, "compact_json": False}.items() <= {
        a.id: a.explicit for a in old.adjustments
    }.items()
    new = build_plan(judged(matrix, *LLAMA, "serving.max_context=65536"))
    assert "--no-enable-chunked-prefill" not in new.argv
    assert "chunked_mm_input_off" in {a.id for a in new.adjustments}
    off = build_plan(judged(matrix, *LLAMA, "features.chunked_prefill=false"))
    assert "--no-enable-chunked-prefill" in off.argv
    (problem,) = refused(matrix, *LLAMA, "features.chunked_prefill=true", against="vllm=0.25.1")
    assert problem.code == "capability-not-declared" and UNDER_0_25 in problem.message


def test_model_class_overrides_are_read_from_0_26_and_make_capabilities_unverified(matrix: CompatibilityMatrix) -> None:
    override = "engine.env.TT_MODEL_CLASS_OVERRIDES='TTLlamaForCausalLM=models.demos.x.tt.generator_vllm:Other'"
    validated = judged(matrix, *LLAMA, override, "features.prefix_caching=true", "features.strict=false")
    assert validated.capabilities is not None
    assert validated.capabilities.target == "models.demos.x.tt.generator_vllm:Other"
    # No record for the class: the plugin takes the missing key for no and drops prefix caching.
    (warning,) = [w for w in validated.warnings if w.code == "capability-not-declared"]
    assert "no record says models.demos.x.tt.generator_vllm:Other declares supports_prefix_caching" in warning.message
    drops = [a for a in build_plan(validated).adjustments if a.id == "capability_drop"]
    assert [a.effect.rsplit(": ", 1)[-1] for a in drops] == ["prefix_caching"]
    (problem,) = refused(matrix, *LLAMA, override, against="vllm=0.25.1")
    assert problem.rule == "feature.model_class_overrides" and UNDER_0_25 in problem.message


def test_a_block_output_model_runs_at_its_rows_settings_and_only_from_0_26(matrix: CompatibilityMatrix) -> None:
    # Offline its sampling capability is unverified, so the row's on-device sampling is refused; installed, the
    # class's own model_capabilities decide.
    assert {p.rule for p in refused(matrix, *DIFFUSION)} == {"capability.supports_sample_on_device"}
    with pytest.raises(ConfigError) as offline:  # its block shape rests on an unverified record: said, not refused
        judged(matrix, *DIFFUSION)
    assert "capability.output_tokens_per_step" in {p.rule for p in offline.value.problems if p.severity == "warning"}
    installed = {DIFFUSION_CLASS: InstalledClass({"output_tokens_per_step": 256, "supports_sample_on_device": True})}
    plan = build_plan(judged(matrix, *DIFFUSION, installed=installed))
    assert after(plan, "--max-num-seqs") == "1" and "--no-async-scheduling" in plan.argv
    assert "--no-enable-chunked-prefill" in plan.argv  # block output cannot resume a split prompt
    # The plugin normalises --generation-config auto to vllm for a block-output model (oracle dg_p300x2).
    assert "generation_config_normalized" in {a.id for a in plan.adjustments}
    assert plan.expected["generation_config"] == "vllm"
    nocaps = {DIFFUSION_CLASS: InstalledClass({})}
    assert {p.rule for p in refused(matrix, *DIFFUSION, installed=nocaps)} >= {"block_output.required"}
    problems = refused(matrix, *DIFFUSION, "features.async_decode=true", installed=installed)
    assert {p.rule for p in problems} >= {"block_output.synchronous"}
    (problem,) = refused(matrix, *DIFFUSION, against="vllm=0.25.1")
    assert problem.code == "architecture-not-registered" and UNDER_0_25 in problem.message


def test_galaxy_rows_read_the_capabilities_of_the_class_their_text_version_selects(matrix: CompatibilityMatrix) -> None:
    (problem,) = refused(matrix, "+model=llama", "mesh=galaxy", "model.checkpoint=meta-llama/Llama-3.3-70B-Instruct")
    assert problem.key == "features.sample_on_device" and "e867533" in problem.message
    assert "models.demos.llama3_70b_galaxy.tt.generator_vllm:LlamaForCausalLM" in problem.message


def test_validate_ends_with_the_fit_in_three_buckets(cli: Cli) -> None:
    runnable = cli("validate", "mesh=cpu")
    assert runnable.returncode == 0 and runnable.stdout.splitlines()[-1] == "fit: runnable"
    change = cli("validate", "+model=llama", "mesh=n150", "serving.max_context=131072")
    assert change.returncode == 2
    fit = "fit: runnable with a change: serving.max_context: Set serving.max_context=32768"
    assert change.stderr.splitlines()[-1].startswith(fit)
    not_runnable = cli("validate", "+model=gpt_oss", "mesh=n150")
    assert not_runnable.stderr.splitlines()[-1].startswith("fit: not runnable: mesh: model=gpt_oss")
    kv = cli(
        "validate",
        TINY,
        "mesh=cpu",
        "engine=cpu",
        "~engine.env.VLLM_CPU_KVCACHE_SPACE",
        "engine.extra_args=[--kv-cache-memory-bytes,1572864]",
    )
    assert kv.returncode == 0 and kv.stdout.splitlines()[-1].startswith("fit: runnable with a change: ")
    assert "max_context ≤ 128 fits 16 users on cpu" in kv.stdout


def test_validate_and_plan_take_against_and_the_matrix_reports_fit(cli: Cli) -> None:
    old = cli("validate", *DIFFUSION, "--against", "vllm=0.25.1", "--json")
    assert old.returncode == 2 and json.loads(old.stdout)["fit"]["bucket"] == "not runnable"
    plan = cli("plan", *LLAMA, "--against", "vllm=0.25.1")
    assert plan.returncode == 0 and "# judged under vllm-tt-plugin state vllm-0.25.1@e3fc849" in plan.stdout
    assert "# the plugin adjusts (set in this plan): chunked prefill is switched off" in plan.stdout
    rows = json.loads(cli("matrix", "--mesh", "p300x2", "--model", "gemma", "--json").stdout)
    buckets = {r["checkpoint"]: r["fit"]["bucket"] for r in rows}
    # Its on-device sampling rests on an unverified record, and a block-output model must sample on device: no
    # setting runs it, as validate says (switching sampling off would only bring back the block-output refusal).
    assert buckets["google/diffusiongemma-26B-A4B-it"] == "not runnable"
    rows = json.loads(
        cli("matrix", "--mesh", "p300x2", "--model", "gemma", "--against", "vllm=0.25.1", "--json").stdout
    )
    assert {r["checkpoint"]: r["fit"]["bucket"] for r in rows}["google/diffusiongemma-26B-A4B-it"] == "not runnable"
    bad = cli("validate", *LLAMA, "--against", "vllm=9")
    assert bad.returncode == 2 and bad.stderr.startswith("error[bad-against] --against:")
