"""Requested features against the plugin state and the tt-metal class's declared capabilities.

The plugin reads capabilities only from the tt-metal class's `model_capabilities`. Where the tt-metal
environment is installed, the probe reads them from the installed class (`installed`), and those decide;
elsewhere the matrix records what each source says the class declares at which tt-metal commit. A
capability the plugin needs counts as declared only when the installed class or a verified record says so:
an unverified "yes" follows the state's rule for a missing key (refuse, or drop), naming the record that
would change that.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from appliance.compat.contract import unsupported_at
from appliance.compat.matrix import Architecture, CapabilityFact, DeviceRow
from appliance.compat.state_set import PluginStates
from appliance.compat.states import BlockOutput, PluginState, Speculative
from appliance.config.schema import ApplianceConfig, WorkloadConfig
from appliance.errors import Problem, Severity

__all__ = [
    "Capabilities",
    "Request",
    "capability_proof",
    "check_features",
    "class_capabilities",
    "loaded_class",
    "plugin_chunked_prefill",
    "record_disagreements",
]

_FEATURE_KEYS = {
    "prefix_caching": "supports_prefix_caching",
    "async_decode": "supports_async_decode",
    "sample_on_device": "supports_sample_on_device",
    "chunked_prefill": "supports_chunked_prefill",
    "speculative": "supports_spec_decode",
}


@dataclass(frozen=True, slots=True)
class Capabilities:
    """The class a config runs and what the records say it declares."""

    target: str | None
    facts: Mapping[str, CapabilityFact]
    tt_metal: str | None = None
    """The tt-metal commit the row was validated with."""

    def value(self, key: str) -> bool | int | None:
        fact = self.facts.get(key)
        return fact.value if fact else None

    def declared(self, key: str) -> bool:
        """What the plugin will see: declared only where the installed class or a verified record says so."""
        fact = self.facts.get(key)
        return fact is not None and fact.verified and bool(fact.value)

    @property
    def block_output(self) -> bool:
        width = self.value("output_tokens_per_step")
        return isinstance(width, int) and not isinstance(width, bool) and width > 1


def class_capabilities(
    arch: Architecture,
    row: DeviceRow,
    env: Mapping[str, str],
    state: PluginState | None = None,
    installed: Mapping[str, Any] | None = None,
) -> Capabilities:
    """Every key the records mention, for the class the plugin loads under `env` and `state`.

    A TT_MODEL_CLASS_OVERRIDES entry for the architecture replaces the class (and so every record).
    `installed`: the class's `model_capabilities` as the probe read it from the tt-metal environment, which
    replace the records.
    """
    target = loaded_class(arch, env, state)
    keys = {k for r in arch.capabilities for k in r.declares} | set(_FEATURE_KEYS.values())
    if installed is not None:
        keys |= set(installed)
        # A capability flag the class omits is False to the plugin; an omitted limit (max_device_top_k) is absent.
        facts = {
            k: CapabilityFact(
                k,
                installed.get(k, False if k.startswith("supports_") else None),
                True,
                f"the installed class {target}",
                target,
            )
            for k in sorted(keys)
        }
        return Capabilities(target, facts, row.tt_metal)
    return Capabilities(target, {k: arch.capability(k, row.tt_metal, target) for k in sorted(keys)}, row.tt_metal)


def loaded_class(arch: Architecture, env: Mapping[str, str], state: PluginState | None) -> str | None:
    """The `module:Class` the plugin loads for `arch`: an override, else the one `env` selects, in `state`'s modules."""
    target = _override_target(arch, env)
    if target is not None:
        return target
    target = arch.resolved_target(env)
    return state.registered_target(target) if state is not None and target is not None else target


def record_disagreements(arch: Architecture, row: DeviceRow, caps: Capabilities) -> Iterator[Problem]:
    """Records that say otherwise than the installed class (`caps` read from it), with both values."""
    for key, fact in caps.facts.items():
        recorded = arch.capability(key, row.tt_metal, caps.target)
        if None not in (recorded.value, fact.value) and recorded.value != fact.value:
            yield Problem(
                code="capability-record-disagrees",
                key="model.checkpoint",
                message=f"{caps.target} declares {key}={fact.value!r} as installed, but models/ records "
                f"{recorded.value!r} ({recorded.source})",
                fix="Correct the record in models/",
                severity="warning",
                rule=f"capability.{key}",
            )


def _override_target(arch: Architecture, env: Mapping[str, str]) -> str | None:
    for entry in env.get("TT_MODEL_CLASS_OVERRIDES", "").split(","):
        name, _, target = entry.strip().partition("=")
        if name.strip() in (arch.tt_class, arch.tt_class.removeprefix("TT")) and ":" in target:
            return target.strip()
    return None


def plugin_chunked_prefill(state: PluginState, arch: Architecture, caps: Capabilities) -> bool | None:
    """Whether the plugin keeps chunked prefill on for this class: True, False, or None when the record cannot say."""
    if state.chunked_prefill.gate == "model_type":
        return arch.model_type in state.chunked_prefill.model_types
    if caps.block_output:
        return False
    return caps.declared("supports_chunked_prefill")


@dataclass(frozen=True, slots=True)
class Request:
    """The effective serving shape a config asks for (after row defaults)."""

    tt: Mapping[str, Any]
    concurrency: int
    data_parallel: int
    lane: bool


def check_features(
    cfg: ApplianceConfig,
    arch: Architecture,
    caps: Capabilities,
    state: PluginState | None,
    states: PluginStates,
    req: Request,
) -> Iterator[Problem]:
    """Every requested feature against the state's rules (None: the CPU engine) and the class's capabilities."""
    wanted = {
        "prefix_caching": cfg.features.prefix_caching,
        "async_decode": cfg.features.async_decode,
        "sample_on_device": "sample_on_device_mode" in req.tt and state is not None,
        "chunked_prefill": cfg.features.chunked_prefill is True and state is not None,
        "speculative": cfg.features.speculative != "off",
    }
    if state is None:
        if wanted["speculative"]:
            yield Problem(
                code="unsupported-feature",
                key="features.speculative",
                message="speculative decoding is validated for engine=tt only",
                fix="Set features.speculative=off",
            )
        yield from (p for f in ("prefix_caching", "async_decode") if wanted[f] for p in _cpu_capability(cfg, caps, f))
        return
    for feature, on in wanted.items():
        if on:
            yield from _capability(cfg, arch, caps, state, states, feature)
    if cfg.features.async_decode and "sample_on_device_mode" not in req.tt:
        yield Problem(
            code="async-without-device-sampling",
            key="features.async_decode",
            message="async decode overlaps steps only with on-device sampling",
            fix="Set features.sample_on_device=all|decode_only",
            severity="warning",
        )
    if wanted["speculative"] and state.speculative is not None:
        yield from _speculative(cfg, caps, state.speculative, state, req.lane)
    if state.block_output is not None and (caps.block_output or arch.tt_class in state.block_output.required_classes):
        yield from _block_output(cfg, arch.tt_class, caps, state.block_output, req)
    width = caps.facts.get("output_tokens_per_step")
    if caps.block_output and width is not None and not width.verified:  # a shape the plan follows, not a feature
        yield Problem(
            code="capability-unverified",
            key="model.checkpoint",
            message=f"{caps.target} commits {width.value} tokens per "
            f"step per {width.source}, not verified at tt-metal {caps.tt_metal}",
            fix="Verify the class's output_tokens_per_step and record it in models/",
            severity="warning",
            rule="capability.output_tokens_per_step",
        )


def _cpu_capability(cfg: ApplianceConfig, caps: Capabilities, feature: str) -> Iterator[Problem]:
    fact = caps.facts[_FEATURE_KEYS[feature]]
    if not fact.value:
        severity: Severity = "error" if cfg.features.strict else "warning"
        yield Problem(
            code="capability-not-declared",
            key=f"features.{feature}",
            message=f"the CPU engine's model does not declare {feature} ({fact.source})",
            fix=f"Set features.{feature}=false (or features.strict=false)",
            severity=severity,
            change=(f"features.{feature}=false",),
        )


def _capability(
    cfg: ApplianceConfig,
    arch: Architecture,
    caps: Capabilities,
    state: PluginState,
    states: PluginStates,
    feature: str,
) -> Iterator[Problem]:
    gated = _state_gate(cfg, arch, caps, state, states, feature)
    if gated is not None:
        yield from gated
        return
    key, where, cls = _FEATURE_KEYS[feature], f"features.{feature}", caps.target or arch.tt_class
    rule, fact, rule_id = state.capability_keys.get(key), caps.facts[key], f"capability.{key}"
    if rule is None or caps.declared(key):
        return
    at = f"at tt-metal {caps.tt_metal}" if caps.tt_metal else "at the row's tt-metal (the row names no commit)"
    if fact.verified:
        why = f"{cls} does not declare {key} ({fact.source})"
    elif fact.value:
        why = f"only an unverified record says {cls} declares {key} {at} ({fact.source})"
    else:
        why = f"no record says {cls} declares {key} {at}, and the plugin takes a missing key for no"
    off = f"{where}={_OFF.get(feature, 'false')}"
    if rule.missing == "reject":  # the plugin refuses the launch whatever features.strict says
        severity: Severity = "error" if rule.status == "verified" else "warning"
        refusal = rule.refusal.rstrip(".")
        if feature == "sample_on_device" and caps.block_output:
            # Switching it off is no way out: a block-output model must sample on device (_block_output).
            yield Problem(
                code="capability-not-declared",
                key=where,
                message=f"not runnable here: {why}, and a block-output model "
                f"must sample on device; the plugin refuses it: {refusal}",
                fix=capability_proof(fact.value, caps.tt_metal),
                severity=severity,
                rule=rule_id,
            )
            return
        yield Problem(
            code="capability-not-declared",
            key=where,
            message=f"{why}: the plugin refuses it: {refusal}",
            fix=f"Set {off}",
            severity=severity,
            rule=rule_id,
            change=(off,),
        )
        return
    severity = "error" if cfg.features.strict else "warning"
    fix = f"Set {off} (or features.strict=false to keep going without it)"
    yield Problem(
        code="capability-not-declared",
        key=where,
        message=f"{why}: the plugin drops it: {rule.refusal}",
        fix=fix,
        severity=severity,
        rule=rule_id,
        change=(off,),
    )


# A feature's "off" where it is not `false`.
_OFF = {"sample_on_device": "off"}


def capability_proof(recorded: object, tt_metal: str | None) -> str:
    """What would make runnable a capability the records cannot prove: no setting of the config can."""
    at = f"at tt-metal {tt_metal}" if tt_metal else "at the row's tt-metal, which it names no commit of"
    record = "verify the record in models/" if recorded else "record the capability in models/"
    return (
        f"No setting changes that: {record} (status: verified, {at}), or judge it where the tt-metal environment "
        "is installed (`appliance plan --probe` reads the class itself)"
    )


def _state_gate(
    cfg: ApplianceConfig,
    arch: Architecture,
    caps: Capabilities,
    state: PluginState,
    states: PluginStates,
    feature: str,
) -> list[Problem] | None:
    """Features the state decides itself, before any capability: None when the capability decides."""
    where = f"features.{feature}"
    if feature == "chunked_prefill" and state.chunked_prefill.gate == "model_type":
        if arch.model_type in state.chunked_prefill.model_types:
            return []
        return [
            Problem(
                code="capability-not-declared",
                key=where,
                message=f"chunked prefill for model_type {arch.model_type} is "
                f"{unsupported_at(states, state, 'chunked_prefill:')}",
                fix="Set features.chunked_prefill=null",
                rule="chunked_prefill.model_type",
                change=("features.chunked_prefill=null",),
            )
        ]
    if feature == "speculative" and state.speculative is None:
        refusal = state.features["speculative"].refusal if "speculative" in state.features else "refused"
        support = unsupported_at(states, state, f"speculative:{cfg.features.speculative}")
        return [
            Problem(
                code="unsupported-feature",
                key=where,
                message=f"speculative decoding is {support} ({refusal})",
                fix="Set features.speculative=off",
                rule="feature.speculative",
                change=(_NO_SPECULATION,),
            )
        ]
    if feature == "chunked_prefill" and caps.block_output:
        return [
            Problem(
                code="capability-not-declared",
                key=where,
                message=f"{caps.target} is a block-output model, which cannot "
                "resume a split prompt: the plugin switches chunked prefill off",
                fix="Set features.chunked_prefill=null",
                rule="chunked_prefill.capability",
                change=("features.chunked_prefill=null",),
            )
        ]
    return None


def _speculative(
    cfg: ApplianceConfig, caps: Capabilities, spec: Speculative, state: PluginState, lane: bool
) -> Iterator[Problem]:
    where = "features.speculative"
    if cfg.features.speculative not in spec.methods:
        yield Problem(
            code="unsupported-feature",
            key=where,
            message=f"method {cfg.features.speculative} is not one of {', '.join(spec.methods)} at {state.label}",
            fix="Set features.speculative=ngram",
            change=("features.speculative=ngram",),
        )
    if lane:
        yield Problem(
            code="unsupported-feature",
            key=where,
            message=f"speculative decoding with lane data parallelism: {spec.lane_dp_refusal}",
            fix="Set features.speculative=off or serving.data_parallel=1",
            rule="speculative.lane_dp",
            change=(_NO_SPECULATION,),
        )
    if cfg.features.async_decode and not caps.value("supports_async_spec_decode"):
        yield Problem(
            code="unsupported-feature",
            key=where,
            message=f"async decode with speculation: {spec.async_refusal}",
            fix="Set features.async_decode=false",
            rule="speculative.async",
            change=("features.async_decode=false",),
        )
    yield from _workload_shares(cfg.workload, spec)
    yield Problem(
        code="speculative-greedy",
        key=where,
        message=spec.greedy,
        fix="Serve sampled traffic without speculation",
        severity="warning",
        rule="speculative.greedy",
    )


_NO_SPECULATION = "features.speculative=off"


def _workload_shares(work: WorkloadConfig, spec: Speculative) -> Iterator[Problem]:
    shares = {"structured_outputs": work.structured_output_share, "logprobs": work.logprobs_share}
    for control, share in shares.items():
        if share > 0 and control in spec.refused_requests:
            yield Problem(
                code="unsupported-feature",
                key="workload",
                message=f"workload={work.name} sends {control} on {share:.0%} of "
                f"requests, which a speculative launch refuses: {spec.request_refusal}",
                fix="Set features.speculative=off or use a workload without them",
                rule="speculative.requests",
                change=(_NO_SPECULATION,),
            )


def _block_output(
    cfg: ApplianceConfig, arch_class: str, caps: Capabilities, rules: BlockOutput, req: Request
) -> Iterator[Problem]:
    width = caps.value("output_tokens_per_step")
    on_device = req.tt.get("sample_on_device_mode") == "all"
    checks = (  # (rule, key, broken, the plugin's refusal, the row's setting)
        ("max_num_seqs", "serving.max_concurrency", req.concurrency // req.data_parallel != 1, rules.max_num_seqs, "1"),
        ("data_parallel", "serving.data_parallel", req.data_parallel != 1, rules.data_parallel, "1"),
        ("synchronous", "features.async_decode", cfg.features.async_decode, rules.synchronous, "false"),
        ("sample_on_device", "features.sample_on_device", not on_device, rules.sample_on_device, "all"),
        ("prefix_caching", "features.prefix_caching", cfg.features.prefix_caching, rules.prefix_caching, "false"),
        ("speculative", "features.speculative", cfg.features.speculative != "off", rules.speculative, "off"),
    )
    if arch_class in rules.required_classes and not caps.block_output:
        yield Problem(
            code="block-output",
            key="model.checkpoint",
            message=f"{caps.target} does not declare output_tokens_per_step > 1: {rules.required}",
            fix="Record the class's output_tokens_per_step in models/ or use another checkpoint",
            rule="block_output.required",
        )
        return
    for part, where, broken, refusal, setting in checks:
        if broken:
            yield Problem(
                code="block-output",
                key=where,
                message=f"{caps.target} commits {width} tokens per step: {refusal}",
                fix=f"Set {where}={setting} (the row's settings: one sequence, DP 1, synchronous, on-device sampling)",
                rule=f"block_output.{part}",
                change=(f"{where}={setting}",),
            )
