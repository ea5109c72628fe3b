from __future__ import annotations

from dataclasses import replace

import pytest

from appliance.compat.fit import fit_row
from appliance.compat.matrix import CompatibilityMatrix, load_matrix
from appliance.compat.state_set import load_states
from appliance.compat.validate import InstalledClass, validate
from appliance.config.compose import compose_config
from appliance.config.schema import ComposedConfig
from appliance.errors import ConfigError
from appliance.plan import build_plan


def codes(matrix: CompatibilityMatrix, *overrides: str, against: str | None = None) -> set[str]:
    with pytest.raises(ConfigError) as caught:
        validate(compose_config(list(overrides)), matrix, against=against)
    return {p.code for p in caught.value.problems}


def test_the_contract_example_validates_with_only_warnings(matrix: CompatibilityMatrix) -> None:
    validated = validate(
        compose_config(
            [
                "+model=llama",
                "mesh=t3k",
                "model.checkpoint=meta-llama/Llama-3.3-70B-Instruct",
                "serving.max_context=65536",
                "serving.max_concurrency=32",
                "features.prefix_caching=true",
                "features.async_decode=true",
                "precision=accuracy",
                "site=lab-t3k",
            ]
        ),
        matrix,
    )
    assert validated.engine == "tt"
    # The capabilities are the class's own (a verified read of tt-metal's ttt_compat at 3dfeae9); the row records
    # no KV capacity and was validated at a tt-metal not known to have ttt_compat, and names no revision: warnings
    # that say so.
    assert {w.code for w in validated.warnings} == {
        "async-without-device-sampling",
        "kv-capacity-unverified",
        "tt-metal-layout",
        "revision-unpinned",
    }
    assert validated.capabilities is not None
    assert validated.capabilities.declared("supports_prefix_caching")
    assert "3dfeae9" in validated.capabilities.facts["supports_async_decode"].source
    layout = next(w for w in validated.warnings if w.code == "tt-metal-layout")
    assert "750ca54" in layout.message and "models.ttt_compat" in layout.message


def test_context_above_the_row_names_the_limit_and_bigger_meshes(matrix: CompatibilityMatrix) -> None:
    with pytest.raises(ConfigError) as caught:
        validate(compose_config(["+model=llama", "mesh=n150", "serving.max_context=131072"]), matrix)
    (problem,) = [p for p in caught.value.problems if p.severity == "error"]
    assert problem.code == "context-too-long"
    assert "exceeds 32768, the most validated for meta-llama/Llama-3.1-8B-Instruct on n150" in problem.message
    assert "mesh=n300|t3k" in problem.fix


@pytest.mark.parametrize(
    ("overrides", "code"),
    [
        (["model.family=lama"], "unknown-family"),
        (["+model=llama", "mesh=t3k", "model.checkpoint=meta-llama/Llama-3.1-8B-Instrct"], "unknown-checkpoint"),
        (
            ["+model=qwen", "mesh=t3k", "model.checkpoint=meta-llama/Llama-3.1-8B-Instruct"],
            "checkpoint-family-mismatch",
        ),
        (["+model=gpt_oss", "mesh=n150"], "mesh-not-validated"),
        (["+model=llama", "mesh=t3k", "serving.max_concurrency=64"], "concurrency-too-high"),
        (
            ["+model=qwen", "mesh=n300", "model.checkpoint=Qwen/Qwen2.5-7B-Instruct", "site=edge-n150"],
            "status-below-minimum",
        ),
        (["+model=gpt_oss", "mesh=t3k", "precision=performance"], "precision-not-validated"),
        (
            ["+model=gemma", "mesh=t3k", "model.checkpoint=google/gemma-3-27b-it", "features.prefix_caching=true"],
            "capability-not-declared",
        ),
        (
            [
                "+model=llama",
                "mesh=t3k",
                "model.checkpoint=meta-llama/Llama-3.2-11B-Vision-Instruct",
                "features.sample_on_device=all",
            ],
            "capability-not-declared",
        ),
        (["+model=llama", "mesh=t3k", "engine.extra_args=[--enable-lora]"], "unsupported-feature"),
        (["+model=llama", "mesh=t3k", "engine.extra_args=[--tensor-parallel-size,2]"], "unsupported-feature"),
        (["+model=llama", "mesh=t3k", "engine.extra_args=[--speculative-config,'{}']"], "flag-owned-by-config"),
        (["+model=llama", "mesh=t3k", "engine.extra_args=[--nnodes,2]"], "unsupported-feature"),
        (["+model=llama", "mesh=t3k", "engine.extra_args=[--max-model-len,4096]"], "flag-owned-by-config"),
        (["+model=llama", "mesh=t3k", "engine.extra_args=[--max-logprobs,50]"], "unsupported-feature"),
        (["+model=llama", "mesh=t3k", "engine.extra_args=[oops]"], "extra-args"),
        (
            ["+model=deepseek_v3", "mesh=galaxy", "serving.data_parallel=4", "serving.max_concurrency=256"],
            "data-parallel",
        ),
        (["+model=llama", "mesh=n300", "serving.data_parallel=4"], "data-parallel"),
        (["+model=llama", "mesh=t3k", "tt.trace_mode=fast"], "tt-config-value"),
        (["+model=llama", "mesh=t3k", "tt.fabric_config=FABRIC_3D"], "tt-config-value"),
        (["+model=llama", "mesh=t3k", "tt.trace_region_size=-1"], "tt-config-value"),
        (["+model=llama", "mesh=t3k", "tt.enable_model_warmup=yes"], "tt-config-value"),
        (["+model=llama", "mesh=t3k", "tt.always_compat_sampling=false", "tt.trace_mode=0"], "tt-config-value"),
        (["+model=llama", "mesh=t3k", "tt.rank_binding=x.yaml"], "unsupported-feature"),
        (["+model=llama", "mesh=t3k", "tt.optimizations=accuracy"], "tt-config-key"),
        (["+model=llama", "mesh=t3k", "tt._tt_resolved_lane_count=4"], "tt-config-key"),
        (["+model=llama", "mesh=t3k", "tt.trace_regoin_size=1"], "tt-config-key"),
        (["+model=llama", "mesh=t3k", "engine.env.TT_LLAMA_TEXT_VER=llama4"], "tt-env-value"),
        (["+model=llama", "mesh=t3k", "engine.env.MESH_DEVICE=T4K"], "tt-env-value"),
        (["mesh=cpu", "tt.trace_mode=none"], "tt-options-on-cpu"),
        (["+model=llama", "mesh=t3k", "engine=cpu"], "engine-mesh-mismatch"),
        (["+model=gemma", "mesh=n150", "model.checkpoint=google/gemma-3-1b-it"], "architecture-not-registered"),
        (["+model=llama"], "mesh-auto-unresolved"),
        (
            [
                "mesh=cpu",
                "engine=cpu",
                "model=tiny",
                "~engine.env.VLLM_CPU_KVCACHE_SPACE",
                "engine.extra_args=[--kv-cache-memory-bytes,524288]",
            ],
            "kv-pool-too-small",
        ),
    ],
)
def test_each_rule_reports_its_code(matrix: CompatibilityMatrix, overrides: list[str], code: str) -> None:
    assert code in codes(matrix, *overrides)


def test_every_problem_is_reported_at_once(matrix: CompatibilityMatrix) -> None:
    found = codes(
        matrix,
        "+model=llama",
        "mesh=n150",
        "serving.max_context=131072",
        "serving.max_concurrency=64",
        "tt.trace_mode=fast",
        "engine.extra_args=[--enable-lora]",
    )
    assert {"context-too-long", "concurrency-too-high", "tt-config-value", "unsupported-feature"} <= found


def test_a_capability_is_only_a_warning_when_not_strict(matrix: CompatibilityMatrix) -> None:
    validated = validate(
        compose_config(
            [
                "+model=gemma",
                "mesh=t3k",
                "model.checkpoint=google/gemma-3-27b-it",
                "features.prefix_caching=true",
                "features.strict=false",
            ]
        ),
        matrix,
    )
    assert "capability-not-declared" in {w.code for w in validated.warnings}


GALAXY_70B = ["+model=llama", "mesh=galaxy", "model.checkpoint=meta-llama/Llama-3.3-70B-Instruct"]
GALAXY_CLASS = "models.demos.llama3_70b_galaxy.tt.generator_vllm:LlamaForCausalLM"


def test_lane_data_parallelism_follows_the_galaxy_text_version(matrix: CompatibilityMatrix) -> None:
    # On a host with the tt-metal environment the installed class's capabilities decide.
    installed = {GALAXY_CLASS: InstalledClass({"supports_sample_on_device": True, "supports_async_decode": True})}
    validated = validate(compose_config(GALAXY_70B), matrix, installed=installed)
    assert validated.lane_dp and validated.data_parallel == 4
    assert validated.capabilities is not None and validated.capabilities.target == GALAXY_CLASS
    assert "tt-metal-layout" not in {w.code for w in validated.warnings}  # the class imported: no guess needed


def test_offline_an_unverified_capability_follows_the_plugins_rule_for_a_missing_key(
    matrix: CompatibilityMatrix,
) -> None:
    with pytest.raises(ConfigError) as refused:
        validate(compose_config(GALAXY_70B), matrix)
    problem = next(p for p in refused.value.problems if p.severity == "error")
    assert problem.code == "capability-not-declared" and problem.key == "features.sample_on_device"
    assert "only an unverified record says" in problem.message and "README.md@01078a0" in problem.message
    assert "does not support on-device sampling" in problem.message  # the plugin's own refusal


def test_an_installed_class_that_does_not_import_is_refused_and_disagreeing_records_named(
    matrix: CompatibilityMatrix,
) -> None:
    broken = {GALAXY_CLASS: InstalledClass(None, "ModuleNotFoundError: No module named 'models.demos'")}
    with pytest.raises(ConfigError, match="class-not-importable.*No module named 'models.demos'"):
        validate(compose_config(GALAXY_70B), matrix, installed=broken)
    target = "models.ttt_compat.tt.generator_vllm:LlamaForCausalLM"
    installed = {target: InstalledClass({"supports_prefix_caching": False, "supports_chunked_prefill": True})}
    validated = validate(compose_config(["+model=llama", "mesh=t3k"]), matrix, installed=installed)
    disagree = [w for w in validated.warnings if w.code == "capability-record-disagrees"]
    assert any("supports_prefix_caching=False" in w.message and "3dfeae9" in w.message for w in disagree)
    assert validated.chunked_prefill is True


MATRIX = load_matrix()
PINNED = load_states().pinned
ROWS = [
    (f.family, c.checkpoint, d.mesh)
    for f, c, d in MATRIX.rows()
    if d.mesh == "cpu" or f.architectures[c.architecture].tt_class in PINNED.architectures
]


def with_checkpoint(composed: ComposedConfig, checkpoint: str) -> ComposedConfig:
    """`composed` as `model.checkpoint=<checkpoint>` composes it: the checkpoint is a plain value in
    conf/model/ (nothing interpolates it), so the rows of one family and mesh share one Hydra composition."""
    model = replace(composed.config.model, checkpoint=checkpoint)
    return replace(composed, config=replace(composed.config, model=model))


@pytest.mark.parametrize(("family", "checkpoint", "mesh"), ROWS, ids=[f"{c}@{m}" for _, c, m in ROWS])
def test_every_validated_row_yields_a_plan(
    matrix: CompatibilityMatrix, family: str, checkpoint: str, mesh: str
) -> None:
    try:
        validated = validate(with_checkpoint(compose_config([f"model={family}", f"mesh={mesh}"]), checkpoint), matrix)
    except ConfigError as error:
        # Offline, a capability the plugin needs that only an unverified record claims counts as missing (the
        # state's rule for a missing key), and the refusal names the record that would change it.
        errors = [p for p in error.problems if p.severity == "error"]
        assert errors and all(p.code in ("capability-not-declared", "block-output") for p in errors), error
        assert all("unverified record" in p.message or "no record says" in p.message for p in errors), error
        # `appliance matrix` says the same of the row at its own settings.
        f = MATRIX.families[family]
        c = f.checkpoint(checkpoint)
        assert c is not None and (row := c.row(mesh)) is not None
        if any(p.key == "features.sample_on_device" for p in errors):
            assert fit_row(PINNED, f.architectures[c.architecture], row).bucket != "runnable"
        return
    plan = build_plan(validated)
    assert plan.checkpoint == checkpoint and plan.mesh == mesh
    # Every flag and VLLM_* variable the appliance emits is one the pinned vLLM or plugin reads.
    assert not {w.code for w in plan.warnings} & {"flag-not-read", "env-not-read"}


def test_a_cpu_kv_pool_close_to_the_context_is_a_warning(matrix: CompatibilityMatrix) -> None:
    validated = validate(
        compose_config(
            [
                "mesh=cpu",
                "engine=cpu",
                "model=tiny",
                "~engine.env.VLLM_CPU_KVCACHE_SPACE",
                "engine.extra_args=[--kv-cache-memory-bytes,1572864]",
            ]
        ),
        matrix,
    )
    assert {w.code for w in validated.warnings} == {"context-near-pool"}


def test_a_float32_cpu_engine_holds_half_the_kv_tokens(matrix: CompatibilityMatrix) -> None:
    """70,778,880 bytes hold 3,056 smollm2 tokens in bfloat16 but 1,520 in float32: under 2,048."""
    base = ["mesh=cpu", "engine=cpu", "model=smollm2", "~engine.env.VLLM_CPU_KVCACHE_SPACE"]
    pool = "engine.extra_args=[--kv-cache-memory-bytes,70778880"
    assert "kv-pool-too-small" in codes(matrix, *base, f"{pool},--dtype,float32]")
    bf16 = validate(compose_config([*base, f"{pool}]"]), matrix)
    assert {w.code for w in bf16.warnings} == {"context-near-pool"}
