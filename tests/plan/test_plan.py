from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.compat.matrix import CompatibilityMatrix
from appliance.compat.validate import validate
from appliance.config.compose import compose_config
from appliance.plan import ENGINE_MODULE, LaunchPlan, build_plan


def plan_for(matrix: CompatibilityMatrix, *overrides: str) -> LaunchPlan:
    return build_plan(validate(compose_config(list(overrides)), matrix))


def test_the_embedded_default_plan_runs_the_cpu_engine_on_the_generated_model(matrix: CompatibilityMatrix) -> None:
    plan = plan_for(matrix, "mesh=cpu", "engine=cpu")
    assert plan.argv[1:] == (
        "-m",
        ENGINE_MODULE,
        "--model",
        plan.model_path,
        "--served-model-name",
        "appliance/smollm2-135m-instruct",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--max-model-len",
        "2048",
        "--max-num-seqs",
        "8",
        "--no-enable-prefix-caching",
        "--no-async-scheduling",
        "--shutdown-timeout",
        "60",
        "--gpu-memory-utilization",
        "0.2",
        "--enforce-eager",
        "--dtype",
        "float32",
    )
    assert plan.generate == "smollm2-135m-instruct" and plan.model_path.endswith("models/smollm2-135m-instruct")
    assert plan.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert "MESH_DEVICE" not in plan.env


def test_a_relative_local_checkpoint_and_state_dir_become_absolute(
    matrix: CompatibilityMatrix, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine runs in the state directory, so paths relative to the operator's must not reach it."""
    monkeypatch.chdir(tmp_path)
    plan = plan_for(
        matrix, "+model=llama", "mesh=n300", "model.checkpoint=./weights/Llama-3.1-8B-Instruct", "paths.state_dir=state"
    )
    assert plan.model_path == str(tmp_path / "weights" / "Llama-3.1-8B-Instruct")
    assert plan.argv[plan.argv.index("--model") + 1] == plan.model_path
    assert plan.state_dir == str(tmp_path / "state")
    hub = plan_for(matrix, "+model=llama", "mesh=n300")
    assert hub.model_path == "meta-llama/Llama-3.1-8B-Instruct"


def test_a_t3k_plan_carries_features_precision_and_the_rows_tt_config(matrix: CompatibilityMatrix) -> None:
    plan = plan_for(
        matrix,
        "+model=llama",
        "mesh=t3k",
        "model.checkpoint=meta-llama/Llama-3.3-70B-Instruct",
        "serving.max_context=65536",
        "features.prefix_caching=true",
        "features.async_decode=true",
        "features.sample_on_device=decode_only",
        "precision=accuracy",
        "engine.extra_args=[--max-logprobs,5]",
    )
    argv = list(plan.argv)
    assert argv[argv.index("--max-model-len") + 1] == "65536"
    assert argv[argv.index("--max-num-seqs") + 1] == "32"
    assert "--enable-prefix-caching" in argv and "--async-scheduling" in argv
    assert json.loads(argv[argv.index("--additional-config") + 1]) == {
        "tt": {"optimizations": "accuracy", "sample_on_device_mode": "decode_only", "trace_region_size": 30000000}
    }
    assert argv[-2:] == ["--max-logprobs", "5"]
    assert plan.env["MESH_DEVICE"] == "T3K" and plan.env["VLLM_ENGINE_READY_TIMEOUT_S"] == "3600"
    # vLLM reads no VLLM_RPC_TIMEOUT at the pinned version (it logs the variable as unknown).
    assert "VLLM_RPC_TIMEOUT" not in plan.env


def test_galaxy_lane_data_parallelism_divides_the_sequences_per_lane(matrix: CompatibilityMatrix) -> None:
    # The Galaxy class's sampling capability is unverified, so the row's on-device sampling is refused offline.
    plan = plan_for(
        matrix,
        "+model=llama",
        "mesh=galaxy",
        "model.checkpoint=meta-llama/Llama-3.3-70B-Instruct",
        "features.sample_on_device=off",
    )
    argv = list(plan.argv)
    assert argv[argv.index("--data-parallel-size") + 1] == "4"
    assert argv[argv.index("--max-num-seqs") + 1] == "8"
    assert plan.env["TT_LLAMA_TEXT_VER"] == "llama3_70b_galaxy"
    assert plan.env["VLLM_ENGINE_READY_TIMEOUT_S"] == "3600" and plan.env["MESH_DEVICE"] == "TG"
    assert "lane_dp_fold" in {a.id for a in plan.adjustments}


def test_sample_on_device_off_removes_the_rows_mode(matrix: CompatibilityMatrix) -> None:
    plan = plan_for(
        matrix,
        "+model=llama",
        "mesh=galaxy",
        "model.checkpoint=meta-llama/Llama-3.3-70B-Instruct",
        "features.sample_on_device=off",
    )
    argv = list(plan.argv)
    assert "sample_on_device_mode" not in argv[argv.index("--additional-config") + 1]


def test_secrets_appear_only_as_variable_names(matrix: CompatibilityMatrix, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_supersecret")
    monkeypatch.setenv("LAB_OPENAI_KEY", "sk-supersecret")
    plan = plan_for(matrix, "site=lab-t3k", "+model=llama")
    text = json.dumps(plan.to_json()) + plan.command_line()
    assert "supersecret" not in text
    assert plan.secret_env == {"HF_TOKEN": "HF_TOKEN", "VLLM_API_KEY": "LAB_OPENAI_KEY"}
    assert "VLLM_API_KEY=$LAB_OPENAI_KEY" in plan.command_line()


def test_plan_json_has_the_documented_keys(matrix: CompatibilityMatrix) -> None:
    data = plan_for(matrix, "mesh=cpu").to_json()
    assert {"engine", "argv", "env", "health_url", "config_hash", "provenance"} <= set(data)
    assert data["health_url"] == "http://127.0.0.1:8000/health"
    assert data["provenance"]["mesh.name"] == "command line" or data["provenance"]["mesh.name"].endswith("cpu.yaml")
