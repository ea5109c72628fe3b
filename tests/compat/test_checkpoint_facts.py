from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.compat.checkpoint_config import CheckpointConfig
from appliance.compat.matrix import CompatibilityMatrix
from appliance.compat.max_len import derive_max_len
from appliance.compat.validate import validate
from appliance.config.compose import compose_config
from appliance.errors import ConfigError, Problem
from appliance.plan import build_plan
from testkit.helpers import Cli

# The Galaxy class's on-device sampling is unverified (refused offline, tests/compat/test_validate.py): off here.
QWEN3_32B_GALAXY = ("+model=qwen", "mesh=galaxy", "model.checkpoint=Qwen/Qwen3-32B", "features.sample_on_device=off")
LLAMA3 = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3",
}
QWEN3_YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}


def facts(
    length: int | None = 40960, rope: dict[str, object] | None = None, model_type: str = "qwen3", **other: object
) -> CheckpointConfig:
    return CheckpointConfig(None, model_type, length, rope, "test", "verified", other=other)


def tokens(config: CheckpointConfig, vllm: str) -> int | None:
    derived = derive_max_len(config, vllm)
    return derived.tokens if derived else None


def problems(*overrides: str, matrix: CompatibilityMatrix) -> tuple[Problem, ...]:
    try:
        return validate(compose_config(list(overrides)), matrix).warnings
    except ConfigError as caught:
        return caught.problems


def tiny_dir(tmp_path: Path, **config: object) -> Path:
    """A local checkpoint folder named like the tiny model, so it counts as appliance/tiny-llama."""
    folder = tmp_path / "tiny-llama"
    folder.mkdir()
    base = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "max_position_embeddings": 2048,
        "rope_scaling": None,
        "rope_theta": 10000.0,
    }
    (folder / "config.json").write_text(json.dumps(base | config))
    return folder


def tiny(folder: Path, *overrides: str) -> tuple[str, ...]:
    return ("+model=tiny", "mesh=cpu", "engine=cpu", f"model.checkpoint={folder}", *overrides)


def test_every_matrix_checkpoint_has_its_facts_with_a_source_unless_unknown(matrix: CompatibilityMatrix) -> None:
    for family in matrix.families.values():
        for checkpoint in family.checkpoints:
            config = checkpoint.config
            assert config is not None, f"{checkpoint.checkpoint} has no entry in models/checkpoints.yaml"
            assert (config.source is None) == (config.status == "unknown"), checkpoint.checkpoint
            assert config.status == "unknown" or config.max_position_embeddings, checkpoint.checkpoint


def test_llama3_rope_does_not_multiply() -> None:
    assert tokens(facts(131072, LLAMA3, "llama"), "0.26.0") == 131072


def test_yarn_starts_from_the_original_length_before_vllm_0_32_and_no_longer_multiplies_from_it() -> None:
    qwen = facts(40960, QWEN3_YARN)
    assert tokens(qwen, "0.26.0") == 131072
    assert tokens(qwen, "0.32.0") == 40960


def test_a_linear_factor_multiplies_except_for_gemma3() -> None:
    linear = {"rope_type": "linear", "factor": 8.0}
    assert tokens(facts(4096, linear, "llama"), "0.32.0") == 32768
    assert tokens(facts(131072, linear, "gemma3"), "0.32.0") == 131072


def test_the_smallest_length_key_wins_and_no_key_cannot_be_judged() -> None:
    derived = derive_max_len(facts(8192, n_positions=4096, seq_length=16384), "0.26.0")
    assert derived is not None and (derived.tokens, derived.key) == (4096, "n_positions=4096")
    assert derive_max_len(facts(None), "0.26.0") is None


def test_qwen3_32b_on_galaxy_at_131072_is_served_with_the_long_context_variable_set(
    matrix: CompatibilityMatrix,
) -> None:
    validated = validate(compose_config(list(QWEN3_32B_GALAXY)), matrix)
    assert validated.max_context == 131072
    (beyond,) = [w for w in validated.warnings if w.code == "context-beyond-checkpoint"]
    assert "derived maximum 40960 (max_position_embeddings=40960 under vLLM 0.26.0" in beyond.message
    assert build_plan(validated).env["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] == "1"


def test_the_plan_command_shows_the_long_context_variable(cli: Cli) -> None:
    done = cli("plan", "--json", *QWEN3_32B_GALAXY)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["env"]["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] == "1"


def test_a_rope_override_is_derived_with_and_refused_when_it_does_not_reach(matrix: CompatibilityMatrix) -> None:
    row_env_off = "engine.env.VLLM_ALLOW_LONG_MAX_MODEL_LEN=0"
    yarn = f"engine.extra_args=['--hf-overrides', '{json.dumps({'rope_scaling': QWEN3_YARN})}']"
    assert "context-above-checkpoint" in {p.code for p in problems(*QWEN3_32B_GALAXY, row_env_off, matrix=matrix)}
    found = {p.code for p in problems(*QWEN3_32B_GALAXY, row_env_off, yarn, matrix=matrix)}
    assert not found & {"context-above-checkpoint", "context-beyond-checkpoint"}


def test_a_local_checkpoint_s_config_wins_and_a_row_without_the_variable_is_refused_above_it(
    matrix: CompatibilityMatrix, tmp_path: Path
) -> None:
    folder = tiny_dir(tmp_path, max_position_embeddings=1024)
    (refused,) = [p for p in problems(*tiny(folder), matrix=matrix) if p.severity == "error"]
    assert refused.code == "context-above-checkpoint" and refused.fix == "Use serving.max_context ≤ 1024"
    assert "appliance/tiny-llama's derived maximum 1024" in refused.message
    assert f"local config.json at {folder / 'config.json'}" in refused.message
    assert validate(compose_config(list(tiny(folder, "serving.max_context=1024"))), matrix).max_context == 1024


def test_a_local_checkpoint_s_linear_rope_raises_its_derived_maximum(
    matrix: CompatibilityMatrix, tmp_path: Path
) -> None:
    tiny_row = matrix.families["tiny"].checkpoints[0]
    assert tiny_row.config is not None and tiny_row.config.max_position_embeddings == 2048
    folder = tiny_dir(tmp_path, rope_scaling={"rope_type": "linear", "factor": 2.0}, max_position_embeddings=1024)
    assert not [p for p in problems(*tiny(folder), matrix=matrix) if p.severity == "error"]


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"max_position_embeddings": "long"}', None])
def test_a_broken_local_config_json_is_one_line_naming_the_file(
    matrix: CompatibilityMatrix, tmp_path: Path, content: str | None
) -> None:
    folder = tiny_dir(tmp_path)
    path = folder / "config.json"
    if content is None:
        path.unlink()
    else:
        path.write_text(content)
    (broken,) = [p for p in problems(*tiny(folder), matrix=matrix) if p.code == "checkpoint-config-invalid"]
    assert broken.key == str(path) and broken.severity == "error" and "\n" not in broken.render()


def test_a_local_checkpoint_not_on_this_machine_is_judged_by_the_data_file(matrix: CompatibilityMatrix) -> None:
    found = problems(*tiny(Path("/nonexistent/tiny-llama")), matrix=matrix)
    assert not [p for p in found if p.severity == "error"]


def test_an_unknown_checkpoint_without_the_variable_only_warns_that_it_cannot_be_judged(
    matrix: CompatibilityMatrix,
) -> None:
    found = problems("+model=qwen", "mesh=p300x2", "model.checkpoint=Qwen/Qwen3.6-27B", matrix=matrix)
    (unjudged,) = [p for p in found if p.code == "context-unjudged"]
    assert unjudged.severity == "warning" and "Qwen/Qwen3.6-27B" in unjudged.message


def test_the_cpu_engine_is_judged_under_its_pinned_vllm(matrix: CompatibilityMatrix, tmp_path: Path) -> None:
    # vLLM 0.32.0 no longer multiplies a yarn factor: the original length times 4 is not reached.
    folder = tiny_dir(
        tmp_path, max_position_embeddings=1024, rope_scaling=QWEN3_YARN | {"original_max_position_embeddings": 512}
    )
    (refused,) = [p for p in problems(*tiny(folder), matrix=matrix) if p.severity == "error"]
    assert "under vLLM 0.32.0" in refused.message and refused.fix.endswith("≤ 1024")
