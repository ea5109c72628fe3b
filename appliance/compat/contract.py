"""vllm-tt-plugin's launch contract, checked before boot.

The plugin validates much of this only inside the worker after minutes of boot, passes some
values to ttnn unchecked, and silently drops others; these checks say so up front.
Source: ../shared/reference/tt-plugin-contract.md §1.3, §2.1, §4, §9.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from appliance.errors import Problem

__all__ = [
    "FABRIC_CONFIGS",
    "LANE_DP_ENV",
    "MAX_LOGPROBS",
    "MESH_PRESETS",
    "PLAN_OWNED_FLAGS",
    "check_extra_args",
    "check_tt_env",
    "check_tt_options",
    "cpu_kv_cache_bytes",
    "flag_names",
    "kv_dtype_scale",
]

FABRIC_CONFIGS = (
    "DISABLED",
    "FABRIC_1D",
    "FABRIC_1D_RING",
    "FABRIC_2D",
    "FABRIC_2D_TORUS_X",
    "FABRIC_2D_TORUS_Y",
    "FABRIC_2D_TORUS_XY",
    "CUSTOM",
)
MESH_PRESETS = (
    "N150",
    "P100",
    "P150",
    "P150x2",
    "N300",
    "P300",
    "N150x4",
    "P150x4",
    "T3K",
    "P150x8",
    "P300x2",
    "TG",
    "BH-Galaxy",
)
MAX_LOGPROBS = 20
# Environment that turns data parallelism into in-process lanes for any model (§1.3, §2.1 #20).
LANE_DP_ENV = {"TT_LLAMA_TEXT_VER": "llama3_70b_galaxy", "TT_QWEN3_TEXT_VER": "qwen3_32b_galaxy"}
LANE_DP_CLASSES = ("TTGptOssForCausalLM",)
_TEXT_VERSIONS = {
    "TT_LLAMA_TEXT_VER": ("tt_transformers", "llama3_70b_galaxy", "llama2_70b"),
    "TT_QWEN3_TEXT_VER": ("tt_transformers", "qwen3_32b_galaxy"),
    "TT_QWEN35_TEXT_VER": ("qwen36_blackhole",),
}
_ENUMS: Mapping[str, tuple[str, ...]] = {
    "sample_on_device_mode": ("all", "decode_only"),
    "trace_mode": ("all", "decode_only", "none"),
    "fabric_config": FABRIC_CONFIGS,
    "fabric_reliability_mode": ("STRICT_INIT", "RELAXED_INIT"),
    "dispatch_core_axis": ("row", "col"),
}
_SIZES = ("trace_region_size", "worker_l1_size", "l1_small_size")
_BOOLS = ("enable_model_warmup", "register_test_models")
_MULTI_HOST = ("rank_binding", "mpi_args", "extra_ttrun_args", "config_pkl_dir", "env_passthrough")
# Flags whose value comes from a config key; passing them raw would fight the plan.
PLAN_OWNED_FLAGS: Mapping[str, str] = {
    "--model": "model.checkpoint",
    "--served-model-name": "model.served_name",
    "--host": "serving.host",
    "--port": "serving.port",
    "--max-model-len": "serving.max_context",
    "--max-num-seqs": "serving.max_concurrency",
    "--data-parallel-size": "serving.data_parallel",
    "-dp": "serving.data_parallel",
    "--enable-prefix-caching": "features.prefix_caching",
    "--no-enable-prefix-caching": "features.prefix_caching",
    "--async-scheduling": "features.async_decode",
    "--no-async-scheduling": "features.async_decode",
    "--additional-config": "tt",
    "--api-key": "serving.api_key_env",
    "--shutdown-timeout": "supervisor.shutdown_timeout_s",
    "--scheduler-cls": "engine.scheduler",
}
# Flags the TT engine cannot honour (§2.1 #4-6, #25; §2.2).
_TT_UNSUPPORTED: Mapping[str, str] = {
    "--tensor-parallel-size": "tensor parallelism happens inside the model over the mesh",
    "-tp": "tensor parallelism happens inside the model over the mesh",
    "--pipeline-parallel-size": "pipeline parallelism happens inside the model over the mesh",
    "-pp": "pipeline parallelism happens inside the model over the mesh",
    "--enable-lora": "LoRA is not supported by the TT backend",
    "--lora-modules": "LoRA is not supported by the TT backend",
    "--speculative-config": "speculative decoding is not supported by the TT backend",
    "--nnodes": "multi-host launch needs the deprecated fork's MPI launcher",
    "--node-rank": "multi-host launch needs the deprecated fork's MPI launcher",
    "--enable-prompt-embeds": "prompt embeddings crash the TT engine loop",
    "--data-parallel-backend": "only the in-process (mp) backend exists for TT",
}


def check_tt_options(tt: Mapping[str, Any]) -> Iterator[Problem]:
    """Type and enum of every `tt` key, including those the plugin checks only in the worker."""
    for key, value in tt.items():
        where = f"tt.{key}"
        if key in _ENUMS and value not in _ENUMS[key]:
            yield Problem(
                "tt-config-value",
                where,
                f"{value!r} is not one of {', '.join(_ENUMS[key])}",
                f"Set {where} to one of {', '.join(_ENUMS[key])}",
            )
        elif key in _SIZES and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            yield Problem(
                "tt-config-value",
                where,
                f"{value!r} is not a positive byte count",
                f"Set {where} to a positive integer (bytes)",
            )
        elif key in _BOOLS and not isinstance(value, bool):
            yield Problem("tt-config-value", where, f"{value!r} is not a boolean", f"Set {where}=true or false")
        elif key == "always_compat_sampling" and value is not False:
            yield Problem(
                "tt-config-value", where, "the V1 TT backend rejects always_compat_sampling=true", f"Remove {where}"
            )
        elif key == "optimizations":
            yield Problem(
                "tt-config-key",
                where,
                "precision is chosen by the precision group",
                f"Remove {where} and use precision=performance|accuracy",
            )
        elif key in _MULTI_HOST:
            yield Problem(
                "unsupported-feature",
                where,
                "MPI multi-host launch is not available on upstream vLLM",
                f"Remove {where}; serve one host per appliance",
            )
        elif key.startswith("_tt_") or key == "tt_data_parallel_size":
            yield Problem(
                "tt-config-key",
                where,
                "reserved or legacy key the plugin writes or ignores",
                f"Remove {where}; use serving.data_parallel for data parallelism",
            )
        elif key not in (*_ENUMS, *_SIZES, *_BOOLS, "always_compat_sampling"):
            yield Problem(
                "tt-config-key",
                where,
                "not a key vllm-tt-plugin reads",
                f"Use one of: {', '.join(sorted((*_ENUMS, *_SIZES, *_BOOLS)))}",
            )


def check_tt_env(env: Mapping[str, str]) -> Iterator[Problem]:
    """TT_*_TEXT_VER values and MESH_DEVICE, which fail in every process when wrong."""
    for name, allowed in _TEXT_VERSIONS.items():
        if name in env and env[name] not in allowed:
            yield Problem(
                "tt-env-value",
                f"engine.env.{name}",
                f"{env[name]!r} is not one of {', '.join(allowed)}",
                f"Set {name} to one of {', '.join(allowed)}",
            )
    mesh = env.get("MESH_DEVICE")
    if mesh is not None and mesh not in MESH_PRESETS and not _is_grid(mesh):
        yield Problem(
            "tt-env-value",
            "engine.env.MESH_DEVICE",
            f"{mesh!r} is neither a preset nor a '(rows, cols)' grid",
            f"Use one of {', '.join(MESH_PRESETS)} or a grid such as '(4, 8)'",
        )


def check_extra_args(args: tuple[str, ...], engine: str) -> Iterator[Problem]:
    """Raw vLLM flags: no flag the plan owns, none the TT engine cannot honour."""
    if args and not args[0].startswith("-"):
        yield Problem(
            "extra-args",
            "engine.extra_args",
            f"{args[0]!r} is not a flag",
            "Pass flags such as ['--max-logprobs', '5'] or ['--max-logprobs=5']",
        )
    for flag, value in flag_names(args):
        if flag in PLAN_OWNED_FLAGS:
            yield Problem(
                "flag-owned-by-config",
                "engine.extra_args",
                f"{flag} is set from {PLAN_OWNED_FLAGS[flag]}",
                f"Remove {flag} and set {PLAN_OWNED_FLAGS[flag]} instead",
            )
        elif engine == "tt" and flag in _TT_UNSUPPORTED and not (flag in ("-tp", "-pp") and value == "1"):
            yield Problem(
                "unsupported-feature",
                "engine.extra_args",
                f"{flag}: {_TT_UNSUPPORTED[flag]}",
                f"Remove {flag} for engine=tt",
            )
        elif engine == "tt" and flag == "--max-logprobs" and value is not None and _int(value) > MAX_LOGPROBS:
            yield Problem(
                "unsupported-feature",
                "engine.extra_args",
                f"--max-logprobs {value} exceeds the TT limit of 20",
                "Use --max-logprobs 20 or less",
            )


def cpu_kv_cache_bytes(args: tuple[str, ...], env: Mapping[str, str]) -> int | None:
    """KV-cache memory the CPU engine will use, if set explicitly.

    vLLM's CPU platform lets VLLM_CPU_KVCACHE_SPACE (whole GiB) overwrite --kv-cache-memory-bytes.
    """
    space = env.get("VLLM_CPU_KVCACHE_SPACE", "")
    if space:
        return int(space) << 30 if space.isdigit() else None
    explicit = dict(flag_names(args)).get("--kv-cache-memory-bytes")
    return int(explicit) if explicit is not None and explicit.isdigit() else None


def kv_dtype_scale(args: tuple[str, ...]) -> int:
    """KV bytes per token relative to bfloat16 (the matrix's unit) under the engine's --dtype."""
    return 2 if dict(flag_names(args)).get("--dtype") in ("float32", "float") else 1


def flag_names(args: tuple[str, ...]) -> Iterator[tuple[str, str | None]]:
    """(normalized flag, its value or None) for each flag in a raw argv fragment."""
    for i, token in enumerate(args):
        if not token.startswith("-") or _is_number(token):
            continue
        name, eq, inline = token.partition("=")
        following = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else None
        yield name.replace("_", "-"), inline if eq else following


def _is_grid(text: str) -> bool:
    parts = text.strip("()[] ").split(",")
    return len(parts) == 2 and all(p.strip().isdigit() for p in parts)


def _is_number(token: str) -> bool:
    return token.lstrip("-").replace(".", "", 1).isdigit()


def _int(text: str) -> int:
    return int(text) if text.isdigit() else 0
