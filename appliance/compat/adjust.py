"""What the plugin will change in vLLM's config anyway, for a validated config under its state.

The plan either sets these explicitly (chunked prefill off and its token budget) or lists them, so
the plan an operator reads is the configuration that runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from appliance.compat.states import Adjustment, PluginState
from appliance.compat.validate import ValidatedConfig

__all__ = ["PlannedAdjustment", "dropped_features", "plugin_adjustments"]


@dataclass(frozen=True, slots=True)
class PlannedAdjustment:
    """One change the plugin makes at boot, as the plan reports it."""

    id: str
    effect: str
    log: str
    source: str
    explicit: bool
    """True when the plan already sets the outcome itself (so the plugin's change is a no-op)."""
    verified: bool


def plugin_adjustments(v: ValidatedConfig) -> tuple[PlannedAdjustment, ...]:
    """Every adjustment of the state that applies to this config (none on the CPU engine)."""
    state = v.state
    if state is None:
        return ()
    return tuple(_applying(v, state))


def _applying(v: ValidatedConfig, state: PluginState) -> Iterator[PlannedAdjustment]:
    chunked = v.chunked_prefill
    unknown = chunked is None
    for key, rule in state.adjustments.items():
        applies, explicit, verified = _when(v, rule, chunked)
        if not applies:
            continue
        effect = rule.effect
        if unknown and rule.when in ("chunked_prefill_off", "chunked_prefill_on"):
            which = "does not declare" if rule.when.endswith("off") else "declares"
            effect = f"{effect} (if the class {which} supports_chunked_prefill: no record says so at the row's commit)"
        if key == "capability_drop":
            effect = f"{effect}: {', '.join(dropped_features(v))}"
        yield PlannedAdjustment(key, effect, rule.log, rule.source, explicit, verified and rule.status == "verified")


def _when(v: ValidatedConfig, rule: Adjustment, chunked: bool | None) -> tuple[bool, bool, bool]:
    """(applies, the plan sets it explicitly, certain) for one adjustment."""
    if rule.when == "always":
        return True, False, True
    if rule.when == "chunked_prefill_off":
        explicit = chunked is False and rule.effect.startswith(("chunked prefill", "max_num_batched_tokens"))
        return chunked is not True, explicit, chunked is not None
    if rule.when == "chunked_prefill_on":
        return chunked is not False, False, chunked is not None
    if rule.when == "lane_dp":
        return v.lane_dp, True, True
    if rule.when == "block_output":
        caps = v.capabilities
        return caps is not None and caps.block_output and "--generation-config" not in v.extra_args, False, True
    if rule.when == "decode_interleave_default":
        keys = ("decode_interleave_enabled", "decode_interleave_prefill_steps", "decode_interleave_decode_steps")
        return not any(k in v.tt_options for k in keys), False, True
    return bool(dropped_features(v)), False, True


def dropped_features(v: ValidatedConfig) -> list[str]:
    """Features requested with features.strict=false that the class does not declare."""
    caps = v.capabilities
    if caps is None:
        return []
    cfg = v.config
    wanted = {
        "prefix_caching": ("supports_prefix_caching", cfg.features.prefix_caching),
        "async_decode": ("supports_async_decode", cfg.features.async_decode),
    }
    return [name for name, (key, on) in wanted.items() if on and not caps.declared(key)]
