"""Limits of a matrix row: context, concurrency, data parallelism, and the KV pool they share.

The KV pool is per data-parallel rank or lane and shared by every sequence on it, so context x
concurrency is checked against it (tt-inference-server#314 has no such check). A pool the row does not
record falls back to the plugin state's default and only warns: the tt-metal class may declare more.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from appliance.compat.contract import cpu_kv_cache_bytes, kv_dtype_scale
from appliance.compat.matrix import Architecture, Checkpoint, DeviceRow
from appliance.compat.states import PluginState
from appliance.config.schema import STATUS_ORDER, ApplianceConfig, EngineKind
from appliance.errors import Problem

__all__ = ["CPU_KV_BLOCK", "KvPool", "check_data_parallel", "check_kv_pool", "check_limits", "kv_pool"]

CPU_KV_BLOCK = 128


@dataclass(frozen=True, slots=True)
class KvPool:
    """Tokens one rank's (or lane's) KV pool holds, its block size, and whether a source states it."""

    tokens: int
    block: int
    sourced: bool
    source: str


def check_limits(
    cfg: ApplianceConfig, checkpoint: Checkpoint, row: DeviceRow, context: int, concurrency: int
) -> Iterator[Problem]:
    where = f"{checkpoint.checkpoint} on {cfg.mesh.option}"
    if context > row.max_context:
        bigger = [d for d in checkpoint.devices if d.max_context >= context]
        alt = f", or mesh={'|'.join(d.mesh for d in bigger)} ({bigger[0].max_context})" if bigger else ""
        yield Problem(
            code="context-too-long",
            key="serving.max_context",
            message=f"serving.max_context={context} exceeds {row.max_context}, the most validated for {where}",
            fix=f"Set serving.max_context={row.max_context}{alt}",
            change=(f"serving.max_context={row.max_context}",),
        )
    if context < 1 or concurrency < 1:
        yield Problem(
            code="bad-limit",
            key="serving",
            message="max_context and max_concurrency must be positive",
            fix="Use values ≥ 1",
        )
    if concurrency > row.max_concurrency:
        yield Problem(
            code="concurrency-too-high",
            key="serving.max_concurrency",
            message=f"serving.max_concurrency={concurrency} exceeds {row.max_concurrency}, the most validated "
            f"for {where}",
            fix=f"Set serving.max_concurrency={row.max_concurrency}",
            change=(f"serving.max_concurrency={row.max_concurrency}",),
        )
    if row.status_rank() < STATUS_ORDER.index(cfg.site.min_status):
        yield Problem(
            code="status-below-minimum",
            key="site.min_status",
            message=f"{where} is {row.status}; site {cfg.site.name} requires at least {cfg.site.min_status}",
            fix="Choose a checkpoint/mesh with a higher status or lower site.min_status",
        )


def check_data_parallel(
    cfg: ApplianceConfig,
    arch: Architecture,
    checkpoint: Checkpoint,
    row: DeviceRow,
    dp: int,
    concurrency: int,
    lane: bool,
) -> Iterator[Problem]:
    key, one = "serving.data_parallel", ("serving.data_parallel=1",)
    if dp < 1:
        yield Problem(
            code="data-parallel",
            key=key,
            message=f"{dp} is not a valid data-parallel size",
            fix="Set serving.data_parallel=1",
            change=one,
        )
        return
    if dp > 1 and arch.moe and not lane:
        yield Problem(
            code="data-parallel",
            key=key,
            message=f"standard data parallelism rejects MoE models ({checkpoint.checkpoint})",
            fix="Set serving.data_parallel=1",
            change=one,
        )
    if dp > 1 and lane and arch.mrope:
        yield Problem(
            code="data-parallel",
            key=key,
            message="lane data parallelism does not support mrope/vision models",
            fix="Set serving.data_parallel=1 or unset the Galaxy text version",
            change=one,
        )
    if dp > 1 and cfg.mesh.chips % dp:
        fits = row.data_parallel if cfg.mesh.chips % row.data_parallel == 0 else 1
        yield Problem(
            code="data-parallel",
            key=key,
            message=f"mesh={cfg.mesh.option} ({cfg.mesh.chips} chips) cannot split into {dp}",
            fix=f"Set serving.data_parallel={fits}, a size that divides the chip count",
            change=(f"serving.data_parallel={fits}",),
        )
    if concurrency % dp:
        even = max(concurrency - concurrency % dp, dp)
        # Past the row's concurrency a multiple of dp is no fix (concurrency-too-high would undo it): fewer ranks are.
        fewer = even > row.max_concurrency
        change = f"serving.data_parallel={row.data_parallel}" if fewer else f"serving.max_concurrency={even}"
        why = "the row's data parallelism" if fewer else f"a multiple of {dp}"
        yield Problem(
            code="data-parallel",
            key="serving.max_concurrency",
            message=f"{concurrency} sequences do not split evenly over {dp} data-parallel "
            f"{'lanes' if lane else 'ranks'}",
            fix=f"Set {change}, {why}",
            change=(change,),
        )
    if dp != row.data_parallel:
        yield Problem(
            code="data-parallel-not-validated",
            key=key,
            message=f"data_parallel={dp} differs from the validated {row.data_parallel}",
            fix=f"Use serving.data_parallel={row.data_parallel}",
            severity="warning",
        )


def kv_pool(
    cfg: ApplianceConfig,
    checkpoint: Checkpoint,
    row: DeviceRow,
    engine: EngineKind,
    state: PluginState | None,
    per_rank_seqs: int,
) -> KvPool | None:
    """The KV pool one rank or lane gets, where the row, the state or the engine settings say."""
    if engine == "tt" and state is not None:
        # The plugin adds one block per sequence of headroom to max_tokens_all_users.
        base = row.kv_pool_tokens if row.kv_pool_tokens is not None else state.kv_default_tokens
        source = (
            "the row's kv_pool_tokens"
            if row.kv_pool_tokens is not None
            else f"vllm-tt-plugin's default max_tokens_all_users ({state.kv_default_tokens}) at {state.label}"
        )
        return KvPool(
            base + state.kv_block_tokens * per_rank_seqs, state.kv_block_tokens, row.kv_pool_tokens is not None, source
        )
    pool_bytes = cpu_kv_cache_bytes(cfg.engine.extra_args, {**row.env, **cfg.engine.env})
    if engine == "cpu" and pool_bytes is not None and checkpoint.kv_bytes_per_token:
        # vLLM keeps one block back as its null block.
        per_token = checkpoint.kv_bytes_per_token * kv_dtype_scale(cfg.engine.extra_args)
        blocks = pool_bytes // (per_token * CPU_KV_BLOCK) - 1
        return KvPool(max(blocks, 0) * CPU_KV_BLOCK, CPU_KV_BLOCK, True, "the engine's KV cache memory")
    return None


def check_kv_pool(pool: KvPool | None, context: int, per_rank_seqs: int, dp: int, mesh: str) -> Iterator[Problem]:
    """One request must fit the pool; all of them at full context should, or the nearest settings are named."""
    if pool is None:
        return
    found = _pool_findings(pool, context, per_rank_seqs, dp, mesh)
    if pool.sourced:
        yield from found
    elif found:
        yield Problem(
            code="kv-capacity-unverified",
            key="serving.max_context",
            message=f"the row records no KV capacity; with {pool.source}: {found[0].message}",
            fix=f"{found[0].fix}, or record the class's max_tokens_all_users as kv_pool_tokens in models/",
            severity="warning",
        )


def _pool_findings(pool: KvPool, context: int, per_rank_seqs: int, dp: int, mesh: str) -> list[Problem]:
    need = -(-context // pool.block) * pool.block
    fits_each = pool.tokens // max(per_rank_seqs, 1) // pool.block * pool.block
    users = max(pool.tokens // max(need, 1) * dp, 1)
    # The fix a user would type first: the context that fits every user, else the users that fit this context.
    change = f"serving.max_context={fits_each}" if fits_each >= pool.block else f"serving.max_concurrency={users}"
    fix = (
        f"Use max_context ≤ {fits_each} fits {per_rank_seqs * dp} users on {mesh}, or max_concurrency ≤ {users} "
        f"at max_context {context}: set {change}"
    )
    if need > pool.tokens:
        return [
            Problem(
                code="kv-pool-too-small",
                key="serving.max_context",
                message=f"{context} tokens need more KV blocks than the pool of {pool.tokens} tokens holds; the engine "
                "would fail only after loading the model",
                fix=f"Set serving.max_context={pool.tokens // pool.block * pool.block} "
                "or give the engine more KV cache memory",
                change=(f"serving.max_context={pool.tokens // pool.block * pool.block}",),
            )
        ]
    if pool.tokens < 2 * context:
        return [
            Problem(
                code="context-near-pool",
                key="serving.max_context",
                message=f"the KV pool ({pool.tokens} tokens) holds about one request of this length; concurrency ≈ 1",
                fix=fix,
                severity="warning",
                change=(change,),
            )
        ]
    if need * per_rank_seqs > pool.tokens:
        return [
            Problem(
                code="kv-oversubscribed",
                key="serving.max_concurrency",
                message=f"{per_rank_seqs} sequences x {context} tokens per rank exceed the KV pool of {pool.tokens} "
                "tokens; requests queue or are preempted at full context",
                fix=fix,
                severity="warning",
                change=(change,),
            )
        ]
    return []
