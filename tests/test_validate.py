from __future__ import annotations

from dataclasses import replace

import pytest

from appliance.compat.matrix import CompatibilityMatrix, load_matrix
from appliance.compat.state_set import load_states
from appliance.compat.validate import validate
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
        compose_config([
            "+model=llama", "mesh=t3k", "model.checkpoint=meta-llama/Llama-3.3-70B-Instruct",
            "serving.max_context=65536", "serving.max_concurrency=32", "features.prefix_caching=true",
            "features.async_decode=true", "precision=accuracy", "site=lab-t3k",
        ]),
        matrix,
    )  # fmt: skip
    assert validated.engine == "tt"
    # The capabilities come from a source that names no tt-metal commit, and the row records no KV capacity:
    # both are warnings that say so, not a silent yes.
    assert {w.code for w in validated.warnings} == {
        "async-without-device-sampling",
        "capability-unverified",
        "kv-capacity-unverified",
    }
    unverified = [w for w in validated.warnings if w.code == "capability-unverified"]
    assert {w.key for w in unverified} == {"features.prefix_caching", "features.async_decode"}
    assert all("750ca54" in w.message for w in unverified)


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
        matrix, "+model=llama", "mesh=n150", "serving.max_context=131072", "serving.max_concurrency=64",
        "tt.trace_mode=fast", "engine.extra_args=[--enable-lora]",
    )  # fmt: skip
    assert {"context-too-long", "concurrency-too-high", "tt-config-value", "unsupported-feature"} <= found


def test_a_capability_is_only_a_warning_when_not_strict(matrix: CompatibilityMatrix) -> None:
    validated = validate(
        compose_config([
            "+model=gemma", "mesh=t3k", "model.checkpoint=google/gemma-3-27b-it", "features.prefix_caching=true",
            "features.strict=false",
        ]),
        matrix,
    )  # fmt: skip
    assert "capability-not-declared" in {w.code for w in validated.warnings}


def test_lane_data_parallelism_follows_the_galaxy_text_version(matrix: CompatibilityMatrix) -> None:
    validated = validate(
        compose_config(["+model=llama", "mesh=galaxy", "model.checkpoint=meta-llama/Llama-3.3-70B-Instruct"]), matrix
    )
    assert validated.lane_dp and validated.data_parallel == 4


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
    validated = validate(with_checkpoint(compose_config([f"model={family}", f"mesh={mesh}"]), checkpoint), matrix)
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
