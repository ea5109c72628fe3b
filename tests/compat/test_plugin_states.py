"""Plugin states as data: loading, selection (--against), and every rule of every state exercised by a config.

Each rule id in a state file must appear in RULE_TRIGGERS with a config (or direct call) that makes the
appliance report it: a finding carrying the rule id, or a plan adjustment with that id. Adding a state file
with a new rule therefore fails here until a test case triggers it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest

from appliance.compat.matrix import CompatibilityMatrix, load_matrix
from appliance.compat.reads import check_plan_reads
from appliance.compat.state_set import PluginStates, load_states
from appliance.compat.states import PluginState
from appliance.compat.validate import InstalledClass, validate
from appliance.config.compose import compose_config
from appliance.config.schema import ComposedConfig
from appliance.errors import ConfigError
from appliance.plan import build_plan
from appliance.resources import build_dir

LLAMA = ("+model=llama", "mesh=t3k", "model.checkpoint=meta-llama/Llama-3.3-70B-Instruct")
GALAXY = ("+model=llama", "mesh=galaxy", "model.checkpoint=meta-llama/Llama-3.3-70B-Instruct")
GEMMA3 = ("+model=gemma", "mesh=t3k", "model.checkpoint=google/gemma-3-27b-it")
GEMMA4 = ("+model=gemma", "mesh=p300x2", "model.checkpoint=google/gemma-4-31B-it")
VISION = ("+model=llama", "mesh=t3k", "model.checkpoint=meta-llama/Llama-3.2-11B-Vision-Instruct")
DIFFUSION = ("+model=gemma", "mesh=p300x2", "model.checkpoint=google/diffusiongemma-26B-A4B-it")
MISTRAL3 = ("+model=mistral", "mesh=t3k", "model.checkpoint=mistralai/Mistral-Small-3.1-24B-Instruct-2503")
NGRAM = "features.speculative=ngram"
NO_DEVICE_SAMPLING = "features.sample_on_device=off"
DIFFUSION_CLASS = "models.experimental.diffusion_gemma.tt.generator_vllm:DiffusionGemmaForCausalLM"
BLOCK_OUTPUT = {"output_tokens_per_step": 256, "supports_sample_on_device": True}
Trigger = tuple[str, ...] | Callable[[PluginState], set[str]]


def _unread_flag(state: PluginState) -> set[str]:
    return {p.rule for p in check_plan_reads(["--no-such-flag"], [], state)}


def installed(overrides: tuple[str, ...], caps: dict[str, bool | int]) -> Trigger:
    """A config judged as on a host whose tt-metal environment has the DiffusionGemma class with `caps`."""
    return lambda state: rules_seen(overrides, state, MATRIX, {DIFFUSION_CLASS: InstalledClass(caps)})


RULE_TRIGGERS: dict[str, tuple[Trigger, ...]] = {
    "tt.sample_on_device_mode": ((*LLAMA, "tt.sample_on_device_mode=fast"),),
    "tt.trace_mode": ((*LLAMA, "tt.trace_mode=fast"),),
    "tt.enable_model_warmup": ((*LLAMA, "tt.enable_model_warmup=yes"),),
    "tt.trace_region_size": ((*LLAMA, "tt.trace_region_size=-1"),),
    "tt.worker_l1_size": ((*LLAMA, "tt.worker_l1_size=0"),),
    "tt.l1_small_size": ((*LLAMA, "tt.l1_small_size=-5"),),
    "tt.fabric_config": ((*LLAMA, "tt.fabric_config=FABRIC_3D"),),
    "tt.fabric_reliability_mode": ((*LLAMA, "tt.fabric_reliability_mode=LOOSE"),),
    "tt.dispatch_core_axis": ((*LLAMA, "tt.dispatch_core_axis=diagonal"),),
    "tt.register_test_models": ((*LLAMA, "tt.register_test_models=maybe"),),
    "tt.always_compat_sampling": ((*LLAMA, "tt.always_compat_sampling=true"),),
    "tt.optimizations": ((*LLAMA, "tt.optimizations=accuracy"),),
    "tt.rank_binding": ((*LLAMA, "tt.rank_binding=rank.yaml"),),
    "tt.mpi_args": ((*LLAMA, "tt.mpi_args=-np"),),
    "tt.extra_ttrun_args": ((*LLAMA, "tt.extra_ttrun_args=-x"),),
    "tt.config_pkl_dir": ((*LLAMA, "tt.config_pkl_dir=/tmp"),),
    "tt.env_passthrough": ((*LLAMA, "tt.env_passthrough=[VLLM_*]"),),
    "tt.tt_data_parallel_size": ((*LLAMA, "tt.tt_data_parallel_size=2"),),
    "tt.decode_interleave_enabled": ((*LLAMA, "tt.decode_interleave_enabled=sometimes"),),
    "tt.decode_interleave_prefill_steps": ((*LLAMA, "tt.decode_interleave_prefill_steps=0"),),
    "tt.decode_interleave_decode_steps": ((*LLAMA, "tt.decode_interleave_decode_steps=-1"),),
    "env.TT_LLAMA_TEXT_VER": ((*LLAMA, "engine.env.TT_LLAMA_TEXT_VER=llama4"),),
    "env.TT_QWEN3_TEXT_VER": ((*LLAMA, "engine.env.TT_QWEN3_TEXT_VER=qwen9"),),
    "env.TT_QWEN35_TEXT_VER": ((*LLAMA, "engine.env.TT_QWEN35_TEXT_VER=other"),),
    "env.MESH_DEVICE": ((*LLAMA, "engine.env.MESH_DEVICE=T4K"),),
    "env.VLLM_USE_V2_MODEL_RUNNER": ((*LLAMA, "engine.env.VLLM_USE_V2_MODEL_RUNNER='1'"),),
    "env.TT_MODEL_CLASS_OVERRIDES": ((*LLAMA, "engine.env.TT_MODEL_CLASS_OVERRIDES=garbage"),),
    "feature.speculative": ((*LLAMA, NGRAM),),
    "feature.tensor_parallel": ((*LLAMA, "engine.extra_args=[--tensor-parallel-size,2]"),),
    "feature.pipeline_parallel": ((*LLAMA, "engine.extra_args=[-pp,2]"),),
    "feature.lora": ((*LLAMA, "engine.extra_args=[--enable-lora]"),),
    "feature.multi_host": ((*LLAMA, "engine.extra_args=[--nnodes,2]"),),
    "feature.prompt_embeds": ((*LLAMA, "engine.extra_args=[--enable-prompt-embeds]"),),
    "feature.data_parallel_backend": ((*LLAMA, "engine.extra_args=[--data-parallel-backend,ray]"),),
    "feature.max_logprobs": ((*LLAMA, "engine.extra_args=[--max-logprobs,50]"),),
    "feature.model_class_overrides": (
        (*LLAMA, "engine.env.TT_MODEL_CLASS_OVERRIDES='TTLlamaForCausalLM=models.x:Other'"),
    ),
    "capability.supports_prefix_caching": ((*GEMMA3, "features.prefix_caching=true"),),
    "capability.supports_async_decode": (
        (*LLAMA, "features.async_decode=true"),
        (*MISTRAL3, "features.async_decode=true"),
    ),
    "capability.supports_sample_on_device": ((*VISION, "features.sample_on_device=all"),),
    "capability.supports_chunked_prefill": (
        (*LLAMA, "features.chunked_prefill=true"),
        (*GEMMA3, NO_DEVICE_SAMPLING, "features.chunked_prefill=true"),
    ),
    "capability.supports_spec_decode": ((*LLAMA, NGRAM),),
    "adjustment.chunked_prefill_off": (GEMMA3, (*GEMMA3, NO_DEVICE_SAMPLING)),
    "adjustment.batched_tokens_raised": (GEMMA3, (*GEMMA3, NO_DEVICE_SAMPLING)),
    "adjustment.long_prefill_token_threshold_zero": (GEMMA3, (*GEMMA3, NO_DEVICE_SAMPLING)),
    "adjustment.chunked_mm_input_off": (GEMMA4, LLAMA, (*GEMMA4, NO_DEVICE_SAMPLING)),
    "adjustment.compact_json": (LLAMA,),
    "adjustment.lane_dp_fold": ((*GALAXY, NO_DEVICE_SAMPLING),),
    "adjustment.capability_drop": (
        (*GEMMA3, "features.prefix_caching=true", "features.strict=false"),
        (*GEMMA3, NO_DEVICE_SAMPLING, "features.prefix_caching=true", "features.strict=false"),
    ),
    "adjustment.generation_config_normalized": (installed(DIFFUSION, BLOCK_OUTPUT),),
    "block_output.required": (installed(DIFFUSION, {}),),
    "adjustment.decode_interleave": (LLAMA,),
    "reads.env": ((*LLAMA, "engine.env.VLLM_RPC_TIMEOUT='100000'"),),
    "reads.flags": (_unread_flag,),
    "chunked_prefill.model_type": ((*LLAMA, "features.chunked_prefill=true"),),
    "chunked_prefill.capability": ((*DIFFUSION, "features.chunked_prefill=true"),),
    "additional_config.forms": ((*LLAMA, "engine.extra_args=[--additional-config.foo.bar,1]"),),
    "speculative.lane_dp": ((*GALAXY, NGRAM),),
    "speculative.async": ((*LLAMA, NGRAM, "features.async_decode=true"),),
    "speculative.requests": ((*LLAMA, NGRAM, "workload=structured"),),
    "speculative.greedy": ((*LLAMA, NGRAM),),
    "block_output.max_num_seqs": ((*DIFFUSION, "serving.max_concurrency=2"),),
    "block_output.data_parallel": ((*DIFFUSION, "serving.data_parallel=2"),),
    "block_output.synchronous": ((*DIFFUSION, "features.async_decode=true"),),
    "block_output.sample_on_device": ((*DIFFUSION, "features.sample_on_device=decode_only"),),
    "block_output.prefix_caching": ((*DIFFUSION, "features.prefix_caching=true"),),
    "block_output.speculative": ((*DIFFUSION, NGRAM),),
}

STATES = load_states()
MATRIX = load_matrix()
CASES = [(s.name, rule) for s in STATES.states for rule, _, _ in s.rules()]


@cache
def composed(overrides: tuple[str, ...]) -> ComposedConfig:
    return compose_config(list(overrides))


def rules_seen(
    trigger: Trigger, state: PluginState, matrix: CompatibilityMatrix, classes: dict[str, InstalledClass] | None = None
) -> set[str]:
    """Rule ids the appliance reports for a trigger under `state`: finding rules and plan adjustments."""
    if callable(trigger):
        return trigger(state)
    try:
        validated = validate(composed(trigger), matrix, STATES, f"vllm={state.vllm}", classes)
    except ConfigError as error:
        return {p.rule for p in error.problems}
    plan = build_plan(validated)
    return {p.rule for p in plan.warnings} | {f"adjustment.{a.id}" for a in plan.adjustments}


@pytest.mark.parametrize(("state_name", "rule"), CASES, ids=[f"{s}:{r}" for s, r in CASES])
def test_every_rule_of_every_state_is_exercised(state_name: str, rule: str) -> None:
    state = next(s for s in STATES.states if s.name == state_name)
    assert rule in RULE_TRIGGERS, f"{state_name}: rule {rule} has no triggering config in RULE_TRIGGERS"
    seen = [rules_seen(t, state, MATRIX) for t in RULE_TRIGGERS[rule]]
    assert any(rule in s for s in seen), f"{state_name}: no trigger reported {rule}; saw {seen}"


def test_every_rule_names_its_source() -> None:
    for state in STATES.states:
        assert all(source for _, source, _ in state.rules()), state.name
        assert state.found and state.architectures_source and state.kv_source and state.forms_source


def test_the_pin_is_vllm_0_26_0_and_the_previous_state_stays_recorded() -> None:
    assert STATES.pinned.vllm == "0.26.0" and STATES.pinned.plugin_commit.startswith("01078a0")
    previous = STATES.select("vllm=0.25.1")
    assert previous.plugin_commit.startswith("e3fc849")


def test_a_key_a_later_state_added_is_refused_naming_both_states() -> None:
    with pytest.raises(ConfigError) as caught:
        validate(composed((*LLAMA, "tt.decode_interleave_prefill_steps=4")), MATRIX, STATES, "vllm=0.25.1")
    (problem,) = [p for p in caught.value.problems if p.severity == "error"]
    assert (
        problem.message
        == "not supported by vllm-tt-plugin at e3fc849 (vLLM 0.25.1); supported from 01078a0 (vLLM 0.26.0)"
    )
    validate(composed((*LLAMA, "tt.decode_interleave_prefill_steps=4")), MATRIX, STATES)


def test_an_unverified_rule_warns_instead_of_refusing() -> None:
    """always_compat_sampling: platform.py@01078a0 still raises, README.md@01078a0 calls it an option."""
    validated = validate(composed((*LLAMA, "tt.always_compat_sampling=true")), MATRIX, STATES)
    (warning,) = [w for w in validated.warnings if w.rule == "tt.always_compat_sampling"]
    assert warning.severity == "warning" and "unverified at 01078a0 (vLLM 0.26.0)" in warning.message
    with pytest.raises(ConfigError, match="always_compat_sampling is not yet supported"):
        validate(composed((*LLAMA, "tt.always_compat_sampling=true")), MATRIX, STATES, "vllm=0.25.1")


def test_against_an_unrecorded_state_is_one_error_listing_the_recorded_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        validate(composed(LLAMA), MATRIX, STATES, "vllm=0.24.0")
    (problem,) = caught.value.problems
    assert problem.code == "bad-against" and "vllm=0.25.1, vllm=0.26.0" in problem.fix


def copy_build(tmp_path: Path) -> Path:
    shutil.copytree(build_dir() / "tt", tmp_path / "tt")
    return tmp_path


def test_adding_a_state_is_adding_a_file(tmp_path: Path) -> None:
    root = copy_build(tmp_path)
    source = root / "tt" / "plugin-states" / "vllm-0.26.0@01078a0.yaml"
    text = source.read_text().replace('vllm: "0.26.0"', 'vllm: "0.27.0"')
    text = text.replace("plugin_commit: 01078a07128216ae085a966749974376cea8e721", "plugin_commit: " + "a" * 40)
    (root / "tt" / "plugin-states" / "vllm-0.27.0@aaaaaaa.yaml").write_text(text)
    states: PluginStates = load_states(root)
    assert [s.vllm for s in states.states] == ["0.25.1", "0.26.0", "0.27.0"]
    assert validate(composed(LLAMA), MATRIX, states, "vllm=0.27.0").state == states.for_vllm("0.27.0")


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (
            (
                "kind: bool\n    default: true\n    checked: worker",
                "kind: boolean\n    default: true\n    checked: worker",
            ),
            "tt_keys.enable_model_warmup.kind",
        ),
        (("max_logprobs: 20", "max_logprobs: twenty"), "max_logprobs"),
        (("kv_block_tokens: 32\n", ""), "kv_block_tokens"),
    ],
)
def test_a_malformed_state_file_is_one_line_naming_the_file_and_the_key(
    tmp_path: Path, edit: tuple[str, str], key: str
) -> None:
    root = copy_build(tmp_path)
    path = root / "tt" / "plugin-states" / "vllm-0.25.1@e3fc849.yaml"
    assert edit[0] in path.read_text()
    path.write_text(path.read_text().replace(edit[0], edit[1], 1))
    with pytest.raises(ConfigError) as caught:
        load_states(root)
    (problem,) = caught.value.problems
    assert problem.code == "plugin-state-invalid" and problem.key == f"{path}:{key}"
    assert "\n" not in problem.render()
