"""Check a composed config against the compatibility matrix and the plugin contract.

Offline by design: nothing here looks at the host, so a fleet can validate every site's
config anywhere. Every check runs and every finding is reported together.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from appliance.compat.contract import (
    LANE_DP_CLASSES,
    LANE_DP_ENV,
    check_extra_args,
    check_tt_env,
    check_tt_options,
    cpu_kv_cache_bytes,
    flag_names,
    kv_dtype_scale,
)
from appliance.compat.matrix import Architecture, Checkpoint, CompatibilityMatrix, DeviceRow, Family
from appliance.config.schema import STATUS_ORDER, ApplianceConfig, ComposedConfig, EngineKind
from appliance.errors import ConfigError, Problem, Severity

__all__ = ["ValidatedConfig", "is_local_path", "validate"]

TT_KV_BLOCK = 32  # KV block size in tokens; pools are counted in whole blocks
CPU_KV_BLOCK = 128


@dataclass(frozen=True, slots=True)
class ValidatedConfig:
    """A config that passed every check, with the matrix entry and the effective values."""

    composed: ComposedConfig
    family: Family
    checkpoint: Checkpoint
    architecture: Architecture
    row: DeviceRow
    engine: EngineKind
    max_context: int
    max_concurrency: int
    data_parallel: int
    lane_dp: bool
    tt_options: Mapping[str, Any]
    """The plugin's `tt` additional-config: the row's settings, then precision and overrides."""
    env: Mapping[str, str]
    warnings: tuple[Problem, ...]

    @property
    def config(self) -> ApplianceConfig:
        return self.composed.config


@dataclass(frozen=True, slots=True)
class _Entry:
    family: Family
    checkpoint: Checkpoint
    architecture: Architecture
    row: DeviceRow


def validate(composed: ComposedConfig, matrix: CompatibilityMatrix) -> ValidatedConfig:
    """Return the validated config, or raise ConfigError with every problem found."""
    cfg = composed.config
    found, entry = _resolve_entry(cfg, matrix)
    if entry is None:
        raise ConfigError(tuple(found))
    engine: EngineKind = "cpu" if cfg.mesh.arch == "cpu" else "tt"
    context = cfg.serving.max_context or entry.row.max_context
    concurrency = cfg.serving.max_concurrency or entry.row.max_concurrency
    dp = cfg.serving.data_parallel or entry.row.data_parallel
    env = {**entry.row.env, **cfg.engine.env}
    tt = _tt_options(cfg, entry)
    lane = dp > 1 and (
        entry.architecture.tt_class in LANE_DP_CLASSES or any(env.get(k) == v for k, v in LANE_DP_ENV.items())
    )
    found += _check_engine(cfg, engine)
    found += _check_scheduler(cfg, engine)
    found += _check_limits(cfg, entry, matrix, context, concurrency)
    found += _check_data_parallel(cfg, entry, dp, concurrency, lane)
    found += _check_capabilities(cfg, entry.architecture, tt, engine)
    found += _check_precision(cfg, entry)
    found += _check_kv_pool(_kv_pool(cfg, entry, engine, concurrency // max(dp, 1)), context)
    found += check_extra_args(cfg.engine.extra_args, engine)
    if engine == "tt":
        found += check_tt_options(cfg.tt)
        found += check_tt_env(env)
    elif cfg.tt:
        found.append(Problem("tt-options-on-cpu", "tt", "tt options apply only to engine=tt", "Remove the tt.* keys"))
    errors = [p for p in found if p.severity == "error"]
    if errors:
        raise ConfigError(tuple(errors + [p for p in found if p.severity != "error"]))
    return ValidatedConfig(
        composed=composed,
        family=entry.family,
        checkpoint=entry.checkpoint,
        architecture=entry.architecture,
        row=entry.row,
        engine=engine,
        max_context=context,
        max_concurrency=concurrency,
        data_parallel=dp,
        lane_dp=lane,
        tt_options=MappingProxyType(tt),
        env=MappingProxyType(env),
        warnings=tuple(found),
    )


def _resolve_entry(cfg: ApplianceConfig, matrix: CompatibilityMatrix) -> tuple[list[Problem], _Entry | None]:
    family = matrix.families.get(cfg.model.family)
    if family is None:
        names = tuple(matrix.families)
        near = matrix.nearest(cfg.model.family, names) or names
        return [
            Problem(
                "unknown-family",
                "model.family",
                f"no family {cfg.model.family!r} in models/",
                f"Use +model=<one of {', '.join(near)}>",
            )
        ], None
    name = cfg.model.checkpoint
    checkpoint = family.checkpoint(name) or _local_checkpoint(family, name)
    if checkpoint is None:
        return [_unknown_checkpoint(matrix, family, name)], None
    if cfg.mesh.option == "auto":
        return [
            Problem(
                "mesh-auto-unresolved",
                "mesh",
                "mesh=auto is resolved from the host only by serve and check",
                "Choose a mesh (e.g. mesh=t3k) to validate offline",
            )
        ], None
    row = checkpoint.row(cfg.mesh.option)
    if row is None:
        meshes = ", ".join(d.mesh for d in checkpoint.devices)
        return [
            Problem(
                "mesh-not-validated",
                "mesh",
                f"model={cfg.model.family} checkpoint={name} is not validated "
                f"on mesh={cfg.mesh.option}; the compatibility matrix lists it for {meshes}",
                f"Choose mesh={meshes.replace(', ', '|')} or another checkpoint",
            )
        ], None
    arch = family.architectures[checkpoint.architecture]
    if not arch.registered:
        return [
            Problem(
                "architecture-not-registered",
                "model.checkpoint",
                f"vllm-tt-plugin registers no class for {checkpoint.architecture} ({name})",
                "Choose another checkpoint",
            )
        ], None
    return [], _Entry(family, checkpoint, arch, row)


def is_local_path(name: str) -> bool:
    """A checkpoint written as a path (/, ., ~) rather than a hub id."""
    return name.startswith(("/", ".", "~"))


def _local_checkpoint(family: Family, name: str) -> Checkpoint | None:
    """A local directory counts as the listed checkpoint with the same final path component."""
    if not is_local_path(name):
        return None
    base = Path(name).name
    return next((c for c in family.checkpoints if c.checkpoint.rsplit("/", 1)[-1] == base), None)


def _unknown_checkpoint(matrix: CompatibilityMatrix, family: Family, name: str) -> Problem:
    elsewhere = matrix.find(name)
    if elsewhere is not None:
        return Problem(
            "checkpoint-family-mismatch",
            "model.checkpoint",
            f"{name} belongs to family {elsewhere[0].family}, not {family.family}",
            f"Use +model={elsewhere[0].family}",
        )
    listed = tuple(c.checkpoint for c in family.checkpoints)
    near = matrix.nearest(name, listed) or listed[:5]
    return Problem(
        "unknown-checkpoint",
        "model.checkpoint",
        f"{name!r} is not in models/{family.family}.yaml",
        f"Did you mean {' or '.join(near)}?",
    )


def _check_engine(cfg: ApplianceConfig, engine: EngineKind) -> Iterator[Problem]:
    if cfg.engine.kind not in ("auto", engine):
        yield Problem(
            "engine-mesh-mismatch",
            "engine",
            f"engine={cfg.engine.kind} cannot drive mesh={cfg.mesh.option}",
            f"Use engine={engine} or engine=auto",
        )


def _check_scheduler(cfg: ApplianceConfig, engine: EngineKind) -> Iterator[Problem]:
    """engine.scheduler=phased owns chunked prefill and the token budget; on TT it is the plugin's own."""
    if cfg.engine.scheduler != "phased":
        return
    if engine == "tt":
        yield Problem(
            "scheduler-native",
            "engine.scheduler",
            "the TT plugin's scheduler is phase-exclusive already; phased changes nothing on engine=tt",
            "Use engine.scheduler=default",
            "warning",
        )
        return
    for flag, _ in flag_names(cfg.engine.extra_args):
        if flag in ("--enable-chunked-prefill", "--no-enable-chunked-prefill", "--max-num-batched-tokens"):
            yield Problem(
                "flag-owned-by-config",
                "engine.extra_args",
                f"{flag} is set by engine.scheduler=phased (no chunked prefill, a budget of max_context)",
                f"Remove {flag} or use engine.scheduler=default",
            )


def _check_limits(
    cfg: ApplianceConfig, e: _Entry, matrix: CompatibilityMatrix, context: int, concurrency: int
) -> Iterator[Problem]:
    where = f"{e.checkpoint.checkpoint} on {cfg.mesh.option}"
    if context > e.row.max_context:
        bigger = [d for d in e.checkpoint.devices if d.max_context >= context]
        alt = f", or mesh={'|'.join(d.mesh for d in bigger)} ({bigger[0].max_context})" if bigger else ""
        yield Problem(
            "context-too-long",
            "serving.max_context",
            f"serving.max_context={context} exceeds {e.row.max_context}, the most validated for {where}",
            f"Use ≤ {e.row.max_context}{alt}",
        )
    if context < 1 or concurrency < 1:
        yield Problem("bad-limit", "serving", "max_context and max_concurrency must be positive", "Use values ≥ 1")
    if concurrency > e.row.max_concurrency:
        yield Problem(
            "concurrency-too-high",
            "serving.max_concurrency",
            f"serving.max_concurrency={concurrency} exceeds {e.row.max_concurrency}, the most validated for {where}",
            f"Use ≤ {e.row.max_concurrency}",
        )
    if e.row.status_rank() < STATUS_ORDER.index(cfg.site.min_status):
        yield Problem(
            "status-below-minimum",
            "site.min_status",
            f"{where} is {e.row.status}; site {cfg.site.name} requires at least {cfg.site.min_status}",
            "Choose a checkpoint/mesh with a higher status or lower site.min_status",
        )


def _check_data_parallel(cfg: ApplianceConfig, e: _Entry, dp: int, concurrency: int, lane: bool) -> Iterator[Problem]:
    key = "serving.data_parallel"
    if dp < 1:
        yield Problem("data-parallel", key, f"{dp} is not a valid data-parallel size", "Use 1 or more")
        return
    if dp > 1 and e.architecture.moe and not lane:
        yield Problem(
            "data-parallel",
            key,
            f"standard data parallelism rejects MoE models ({e.checkpoint.checkpoint})",
            "Use serving.data_parallel=1",
        )
    if dp > 1 and lane and e.architecture.mrope:
        yield Problem(
            "data-parallel",
            key,
            "lane data parallelism does not support mrope/vision models",
            "Use serving.data_parallel=1 or unset the Galaxy text version",
        )
    if dp > 1 and cfg.mesh.chips % dp:
        yield Problem(
            "data-parallel",
            key,
            f"mesh={cfg.mesh.option} ({cfg.mesh.chips} chips) cannot split into {dp}",
            "Use a data-parallel size that divides the chip count",
        )
    if concurrency % dp:
        yield Problem(
            "data-parallel",
            "serving.max_concurrency",
            f"{concurrency} sequences do not split evenly over {dp} data-parallel {'lanes' if lane else 'ranks'}",
            f"Use a multiple of {dp}",
        )
    if dp != e.row.data_parallel:
        yield Problem(
            "data-parallel-not-validated",
            key,
            f"data_parallel={dp} differs from the validated {e.row.data_parallel}",
            f"Use serving.data_parallel={e.row.data_parallel}",
            "warning",
        )


def _check_capabilities(
    cfg: ApplianceConfig, arch: Architecture, tt: Mapping[str, Any], engine: EngineKind
) -> Iterator[Problem]:
    severity: Severity = "error" if cfg.features.strict else "warning"
    wanted = {
        "prefix_caching": cfg.features.prefix_caching,
        "async_decode": cfg.features.async_decode,
        "sample_on_device": "sample_on_device_mode" in tt and engine == "tt",
    }
    for capability, on in wanted.items():
        if on and capability not in arch.capabilities:
            yield Problem(
                "capability-not-declared",
                f"features.{capability}",
                f"{arch.tt_class} does not declare {capability}; the plugin would "
                f"{'reject it' if capability == 'sample_on_device' else 'silently drop it'}",
                f"Set features.{capability}={'off' if capability == 'sample_on_device' else 'false'}"
                " (or features.strict=false to keep going)",
                severity,
            )
    if engine == "tt" and cfg.features.async_decode and "sample_on_device_mode" not in tt:
        yield Problem(
            "async-without-device-sampling",
            "features.async_decode",
            "async decode overlaps steps only with on-device sampling",
            "Set features.sample_on_device=all|decode_only",
            "warning",
        )


def _check_precision(cfg: ApplianceConfig, e: _Entry) -> Iterator[Problem]:
    name = cfg.precision.name
    if name != "default" and not e.architecture.accepts_optimizations:
        yield Problem(
            "precision-not-validated",
            "precision",
            f"{e.architecture.tt_class} asserts that no precision profile is passed",
            "Use precision=default",
        )
    elif name not in e.row.precisions:
        yield Problem(
            "precision-not-validated",
            "precision",
            f"precision={name} is not validated for {e.checkpoint.checkpoint} on {cfg.mesh.option}",
            f"Use precision={'|'.join(e.row.precisions)}",
        )


def _kv_pool(cfg: ApplianceConfig, e: _Entry, engine: EngineKind, per_rank_seqs: int) -> tuple[int, int] | None:
    """(tokens the KV pool holds, block size), where the row or the engine settings say."""
    if engine == "tt" and e.row.kv_pool_tokens is not None:
        # The plugin adds one block per sequence of headroom to max_tokens_all_users (contract §2.4).
        return e.row.kv_pool_tokens + TT_KV_BLOCK * per_rank_seqs, TT_KV_BLOCK
    pool_bytes = cpu_kv_cache_bytes(cfg.engine.extra_args, {**e.row.env, **cfg.engine.env})
    if engine == "cpu" and pool_bytes is not None and e.checkpoint.kv_bytes_per_token:
        # vLLM keeps one block back as its null block.
        per_token = e.checkpoint.kv_bytes_per_token * kv_dtype_scale(cfg.engine.extra_args)
        blocks = pool_bytes // (per_token * CPU_KV_BLOCK) - 1
        return max(blocks, 0) * CPU_KV_BLOCK, CPU_KV_BLOCK
    return None


def _check_kv_pool(pool: tuple[int, int] | None, context: int) -> Iterator[Problem]:
    if pool is None:
        return
    tokens, block = pool
    if -(-context // block) * block > tokens:
        yield Problem(
            "kv-pool-too-small",
            "serving.max_context",
            f"{context} tokens need more KV blocks than the pool of {tokens} tokens holds; the engine would "
            "fail only after loading the model",
            f"Use serving.max_context ≤ {tokens} or give the engine more KV cache memory",
        )
    elif tokens < 2 * context:
        yield Problem(
            "context-near-pool",
            "serving.max_context",
            f"the KV pool ({tokens} tokens) holds about one request of this length; concurrency ≈ 1",
            "Lower serving.max_context",
            "warning",
        )


def _tt_options(cfg: ApplianceConfig, e: _Entry) -> dict[str, Any]:
    tt = dict(e.row.tt)
    if cfg.precision.optimizations is not None:
        tt["optimizations"] = cfg.precision.optimizations
    mode = cfg.features.sample_on_device
    if mode == "off":
        tt.pop("sample_on_device_mode", None)
    elif mode is not None:
        tt["sample_on_device_mode"] = mode
    return {**tt, **cfg.tt}
