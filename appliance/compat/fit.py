"""Fit before boot, in three buckets: runnable, runnable with a change (the nearest settings named), not runnable.

A config's bucket comes from its findings: some mean no serving setting can help (the model has no row
on the mesh, the plugin state has no class for it, or no finding names a change: `Problem.change` is empty),
the rest name the change that fixes them, as overrides an operator can apply (tests/compat/test_fix_convergence.py
applies them over the whole matrix and fails on any chain that does not end, or ends where it began). A matrix
row's bucket comes from its own defaults under a plugin state, without composing a config.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from appliance.compat.features import capability_proof, class_capabilities
from appliance.compat.limits import KvPool, check_kv_pool
from appliance.compat.matrix import Architecture, DeviceRow
from appliance.compat.states import PluginState
from appliance.errors import Problem

__all__ = ["Bucket", "Fit", "fit_of", "fit_row"]

Bucket = Literal["runnable", "runnable with a change", "not runnable"]
NOT_RUNNABLE = frozenset(
    {
        "unknown-family",
        "unknown-checkpoint",
        "checkpoint-family-mismatch",
        "mesh-not-validated",
        "architecture-not-registered",
        "engine-mesh-mismatch",
        "mesh-auto-unresolved",
        "mesh-auto-unmatched",
        "no-tt-device",
        "status-below-minimum",
    }
)
FIT_WARNINGS = frozenset({"kv-oversubscribed", "context-near-pool"})
"""Warnings whose config boots but does not deliver what it asks for (from a sourced KV capacity)."""


@dataclass(frozen=True, slots=True)
class Fit:
    bucket: Bucket
    reasons: tuple[str, ...]
    """Why not runnable, or the change that makes it run as asked (one line each)."""
    unverified: tuple[str, ...] = ()
    """What the verdict rests on that no source verifies (codes of the unverified warnings)."""

    def line(self) -> str:
        text = self.bucket + (f": {'; '.join(self.reasons)}" if self.reasons else "")
        return text + (f" (unverified: {', '.join(self.unverified)})" if self.unverified else "")


def fit_of(problems: Sequence[Problem]) -> Fit:
    """The bucket a set of validation findings puts a config in."""
    errors = [p for p in problems if p.severity == "error"]
    unverified = tuple(dict.fromkeys(p.code for p in problems if p.code.endswith("-unverified")))
    fatal = [p for p in errors if p.code in NOT_RUNNABLE or not p.change]
    if fatal:
        return Fit(
            "not runnable", tuple(f"{p.key}: {p.message}" + (f"; {p.fix}" if p.fix else "") for p in fatal), unverified
        )
    changes = errors + [p for p in problems if p.code in FIT_WARNINGS]
    if changes:
        return Fit("runnable with a change", tuple(f"{p.key}: {p.fix or p.message}" for p in changes), unverified)
    return Fit("runnable", (), unverified)


def fit_row(state: PluginState | None, arch: Architecture, row: DeviceRow) -> Fit:
    """The bucket of a matrix row at its own defaults (max context, max concurrency), under `state`."""
    if state is not None and arch.tt_class not in state.architectures:
        return Fit("not runnable", (f"vllm-tt-plugin at {state.label} registers no {arch.tt_class}",))
    if state is None:
        return Fit("runnable", ())
    dp = max(row.data_parallel, 1)
    per_rank = row.max_concurrency // dp
    base = row.kv_pool_tokens if row.kv_pool_tokens is not None else state.kv_default_tokens
    pool = KvPool(
        base + state.kv_block_tokens * per_rank,
        state.kv_block_tokens,
        row.kv_pool_tokens is not None,
        "the row's kv_pool_tokens" if row.kv_pool_tokens is not None else "the plugin's default pool",
    )
    return fit_of([*check_kv_pool(pool, row.max_context, per_rank, dp, row.mesh), *_row_sampling(state, arch, row)])


def _row_sampling(state: PluginState, arch: Architecture, row: DeviceRow) -> list[Problem]:
    """The row's on-device sampling against what the class declares, as validate judges it (features.py)."""
    caps = class_capabilities(arch, row, row.env, state)
    rule = state.capability_keys.get("supports_sample_on_device")
    if "sample_on_device_mode" not in row.tt or rule is None or rule.missing != "reject":
        return []
    if caps.declared("supports_sample_on_device"):
        return []
    fact = caps.facts["supports_sample_on_device"]
    doubt = "only an unverified record says it declares it" if fact.value else "it does not declare it"
    where, off = "features.sample_on_device", "features.sample_on_device=off"
    if caps.block_output:  # it must sample on device: switching it off is no way out
        return [
            Problem(
                code="capability-not-declared",
                key=where,
                message=f"{caps.target}: {doubt} ({fact.source}), and a block-output model must sample on device",
                fix=capability_proof(fact.value, caps.tt_metal),
            )
        ]
    return [
        Problem(
            code="capability-not-declared",
            key=where,
            message=f"{caps.target}: {doubt} ({fact.source})",
            fix=f"Set {off}, or verify the record",
            change=(off,),
        )
    ]
