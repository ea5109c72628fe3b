"""Check a composed config against the compatibility matrix and a recorded plugin state.

Offline by design: nothing here looks at the host, so a fleet can validate every site's config
anywhere, under the pinned plugin state or any other recorded one (`against`). Every check runs
and every finding is reported together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from appliance.compat.checkpoint_config import is_local_path
from appliance.compat.contract import (
    check_extra_args,
    check_tt_env,
    check_tt_options,
    split_additional_config,
    unsupported_at,
)
from appliance.compat.exposure import check_exposure
from appliance.compat.features import (
    Capabilities,
    Request,
    check_features,
    class_capabilities,
    loaded_class,
    plugin_chunked_prefill,
    record_disagreements,
)
from appliance.compat.images import ImageLimits, check_images, image_limits
from appliance.compat.limits import check_data_parallel, check_kv_pool, check_limits, kv_pool
from appliance.compat.long_context import check_checkpoint_context
from appliance.compat.matrix import Architecture, Checkpoint, CompatibilityMatrix, DeviceRow, Family, same_commit
from appliance.compat.media import check_media_env
from appliance.compat.reads import check_env_reads
from appliance.compat.state_set import PluginStates, cpu_vllm, load_states
from appliance.compat.states import PluginState
from appliance.config.schema import ApplianceConfig, ComposedConfig, EngineKind
from appliance.errors import ConfigError, Problem
from appliance.weights.errors import WeightsError
from appliance.weights.names import check_checkpoint

__all__ = [
    "InstalledClass",
    "InstalledClasses",
    "ValidatedConfig",
    "is_local_path",
    "loaded_target",
    "selected_class",
    "validate",
]


@dataclass(frozen=True, slots=True)
class InstalledClass:
    """One model class as the probe read it in the tt-metal environment (import only)."""

    capabilities: Mapping[str, Any] | None
    """Its `model_capabilities` ({} when it declares none); None when it did not import."""
    error: str | None = None


InstalledClasses = Mapping[str, InstalledClass]


@dataclass(frozen=True, slots=True)
class ValidatedConfig:
    """A config that passed every check, with the matrix entry, the plugin state and the effective values."""

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
    """The plugin's `tt` additional-config: the row's settings, then precision, overrides and extra args."""
    env: Mapping[str, str]
    warnings: tuple[Problem, ...]
    state: PluginState | None = None
    """The plugin state the config was judged under (None for the CPU engine)."""
    capabilities: Capabilities | None = None
    chunked_prefill: bool | None = None
    """What the engine will run: chunked prefill on, off, or None when the records cannot say."""
    extra_args: tuple[str, ...] = ()
    """engine.extra_args with any --additional-config folded into tt_options."""
    images: ImageLimits | None = None
    """The image limits of a vision row (None on a text one)."""

    @property
    def config(self) -> ApplianceConfig:
        return self.composed.config


@dataclass(frozen=True, slots=True)
class _Entry:
    family: Family
    checkpoint: Checkpoint
    architecture: Architecture
    row: DeviceRow


def validate(
    composed: ComposedConfig,
    matrix: CompatibilityMatrix,
    states: PluginStates | None = None,
    against: str | None = None,
    installed: InstalledClasses | None = None,
) -> ValidatedConfig:
    """Return the validated config, or raise ConfigError with every problem found.

    `against` (`vllm=X`) judges the config under another recorded plugin state than the pinned one.
    `installed`: what the probe read from the tt-metal environment's classes (`selected_class`'s target ->
    its `model_capabilities`, or why it did not import); they decide instead of the records.
    """
    cfg = composed.config
    states = states or load_states()
    engine: EngineKind = "cpu" if cfg.mesh.arch == "cpu" else "tt"
    state = states.select(against) if engine == "tt" else None
    found, entry = _resolve_entry(cfg, matrix, state, states)
    if entry is None:
        raise ConfigError(tuple(found))
    context = cfg.serving.max_context or entry.row.max_context
    concurrency = cfg.serving.max_concurrency or entry.row.max_concurrency
    dp = cfg.serving.data_parallel or entry.row.data_parallel
    env = {**entry.row.env, **cfg.engine.env}
    extra = split_additional_config(cfg.engine.extra_args, state)
    tt = {**_tt_options(cfg, entry), **extra.tt}
    target = selected_class(entry.architecture, env, state)
    read = installed.get(target) if installed is not None and target is not None else None
    caps = class_capabilities(entry.architecture, entry.row, env, state, read.capabilities if read else None)
    lane = dp > 1 and state is not None and _lane(state, entry.architecture, env)
    found += [*extra.problems, *_check_extra_tt(cfg, extra.tt)]
    found += _check_engine(cfg, engine)
    found += _check_scheduler(cfg, engine)
    found += check_limits(cfg, entry.checkpoint, entry.row, context, concurrency)
    found += check_images(cfg, entry.architecture, entry.row, entry.checkpoint.checkpoint, context, concurrency, state)
    found += check_checkpoint_context(
        cfg.model.checkpoint, entry.checkpoint, context, env, extra.args, state.vllm if state else cpu_vllm()
    )
    found += check_data_parallel(cfg, entry.architecture, entry.checkpoint, entry.row, dp, concurrency, lane)
    found += check_features(cfg, entry.architecture, caps, state, states, Request(tt, concurrency, dp, lane))
    found += _check_precision(cfg, entry)
    found += _check_pinned(cfg, entry, engine)
    per_rank = concurrency // max(dp, 1)
    found += check_kv_pool(
        kv_pool(cfg, entry.checkpoint, entry.row, engine, state, per_rank),
        context,
        per_rank,
        max(dp, 1),
        cfg.mesh.option,
    )
    found += check_extra_args(extra.args, engine, state)
    found += check_media_env(cfg.engine.env)
    found += check_exposure(cfg)
    found += _plugin_checks(cfg, {**entry.row.tt, **cfg.tt, **extra.tt}, env, state, states)
    found += _installed_checks(entry, caps, read) if read is not None else _layout_check(entry, caps, state)
    errors = [p for p in found if p.severity == "error"]
    if errors:
        raise ConfigError(tuple(errors + [p for p in found if p.severity != "error"]))
    chunked = _chunked_prefill(cfg, entry.architecture, caps, state)
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
        state=state,
        capabilities=caps,
        chunked_prefill=chunked,
        extra_args=extra.args,
        images=image_limits(cfg, entry.architecture, engine, state),
    )


def selected_class(arch: Architecture, env: Mapping[str, str], state: PluginState | None) -> str | None:
    """The `module:Class` the plugin will load for `arch` under `env` and `state` (None: no TT class)."""
    return loaded_class(arch, env, state) if state is not None else None


def loaded_target(
    composed: ComposedConfig,
    matrix: CompatibilityMatrix,
    states: PluginStates | None = None,
    against: str | None = None,
) -> str | None:
    """The class the plugin would load for a composed config, before it is judged (None: no TT class, or none found),
    so the probe can read that class's capabilities from the tt-metal environment first."""
    cfg = composed.config
    if cfg.mesh.arch == "cpu":
        return None
    states = states or load_states()
    state = states.select(against)
    _, entry = _resolve_entry(cfg, matrix, state, states)
    return None if entry is None else selected_class(entry.architecture, {**entry.row.env, **cfg.engine.env}, state)


def _installed_checks(entry: _Entry, caps: Capabilities, read: InstalledClass) -> list[Problem]:
    """The installed class must import (the plugin loads it at model load), and the records should agree with it."""
    if read.error is not None:
        message = f"the plugin loads {caps.target}, which does not import in the tt-metal environment: {read.error}"
        fix = "Install the tt-metal this plugin state needs, or judge under another state (--against)"
        return [Problem(code="class-not-importable", key="model.checkpoint", message=message, fix=fix)]
    return list(record_disagreements(entry.architecture, entry.row, caps))


def _layout_check(entry: _Entry, caps: Capabilities, state: PluginState | None) -> list[Problem]:
    """Offline: a row validated at a tt-metal commit not known to have the package the plugin imports from."""
    layout = state.tt_metal_layout if state is not None else None
    if layout is None or caps.target is None or not caps.target.startswith(layout.module + "."):
        return []
    commit = entry.row.tt_metal
    if commit and any(same_commit(known, commit) for known in layout.known_at):
        return []
    known = ", ".join(k[:7] for k in layout.known_at)
    message = (
        f"the plugin loads {caps.target}; the row was validated at tt-metal {commit or '(no commit named)'}, "
        f"not known to have {layout.module} (which replaced {layout.replaces}; known at {known}): a tt-metal "
        "without it fails at model load with ModuleNotFoundError"
    )
    fix = f"Serve with a tt-metal that has {layout.module}, or judge under another state (--against)"
    return [Problem(code="tt-metal-layout", key="model.checkpoint", message=message, fix=fix, severity="warning")]


def _plugin_checks(
    cfg: ApplianceConfig,
    tt: Mapping[str, Any],
    env: Mapping[str, str],
    state: PluginState | None,
    states: PluginStates,
) -> list[Problem]:
    """The `tt` keys, the plugin's environment and the VLLM_* variables under the state (or: none on CPU)."""
    if state is None:
        problem = Problem(
            code="tt-options-on-cpu",
            key="tt",
            message="tt options apply only to engine=tt",
            fix="Remove the tt.* keys",
            change=tuple(f"~tt.{key}" for key in tt),
        )
        return [problem] if tt else []
    return [
        *check_tt_options(tt, state, states),
        *check_tt_env(env, state, states),
        *check_env_reads(cfg.engine.env, state),
    ]


def _lane(state: PluginState, arch: Architecture, env: Mapping[str, str]) -> bool:
    """Data parallelism runs as in-process lanes for the state's lane classes or a Galaxy text version."""
    if arch.tt_class in state.lane_dp_classes:
        return True
    return any(rule.lane_dp_value and env.get(name) == rule.lane_dp_value for name, rule in state.env.items())


def _chunked_prefill(
    cfg: ApplianceConfig, arch: Architecture, caps: Capabilities, state: PluginState | None
) -> bool | None:
    """What runs: the operator's choice where it holds, else the platform's default."""
    if cfg.features.chunked_prefill is False or (cfg.engine.scheduler == "phased" and state is None):
        return False
    if state is None:
        return True
    return plugin_chunked_prefill(state, arch, caps)


def _check_extra_tt(cfg: ApplianceConfig, folded: Mapping[str, Any]) -> list[Problem]:
    """A key set both as tt.X and in --additional-config must agree, or the plan could not say which runs."""
    return [
        Problem(
            code="flag-owned-by-config",
            key="engine.extra_args",
            message=f"--additional-config sets tt.{k}={v!r}, but tt.{k}={cfg.tt[k]!r}",
            fix=f"Set tt.{k} in one place: remove tt.{k}",
            change=(f"~tt.{k}",),
        )
        for k, v in folded.items()
        if k in cfg.tt and cfg.tt[k] != v
    ]


def _resolve_entry(
    cfg: ApplianceConfig, matrix: CompatibilityMatrix, state: PluginState | None, states: PluginStates
) -> tuple[list[Problem], _Entry | None]:
    family = matrix.families.get(cfg.model.family)
    if family is None:
        names = tuple(matrix.families)
        near = matrix.nearest(cfg.model.family, names) or names
        return [
            Problem(
                code="unknown-family",
                key="model.family",
                message=f"no family {cfg.model.family!r} in models/",
                fix=f"Use +model=<one of {', '.join(near)}>",
            )
        ], None
    name = cfg.model.checkpoint
    checkpoint = family.checkpoint(name) or _local_checkpoint(family, name)
    if checkpoint is None:
        return [_unknown_checkpoint(matrix, family, name)], None
    if cfg.mesh.option == "auto":
        return [
            Problem(
                code="mesh-auto-unresolved",
                key="mesh",
                message="mesh=auto is resolved from the host only by serve and check",
                fix="Choose a mesh (e.g. mesh=t3k) to validate offline",
            )
        ], None
    row = checkpoint.row(cfg.mesh.option)
    if row is None:
        meshes = ", ".join(d.mesh for d in checkpoint.devices)
        return [
            Problem(
                code="mesh-not-validated",
                key="mesh",
                message=f"model={cfg.model.family} checkpoint={name} is not validated "
                f"on mesh={cfg.mesh.option}; the compatibility matrix lists it for {meshes}",
                fix=f"Choose mesh={meshes.replace(', ', '|')} or another checkpoint",
            )
        ], None
    arch = family.architectures[checkpoint.architecture]
    if state is not None and arch.tt_class not in state.architectures:
        support = unsupported_at(states, state, f"arch:{arch.tt_class}")
        return [
            Problem(
                code="architecture-not-registered",
                key="model.checkpoint",
                message=f"vllm-tt-plugin registers no class {arch.tt_class} for {name}: {support}",
                fix="Choose another checkpoint or another plugin state",
            )
        ], None
    return [], _Entry(family, checkpoint, arch, row)


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
            code="checkpoint-family-mismatch",
            key="model.checkpoint",
            message=f"{name} belongs to family {elsewhere[0].family}, not {family.family}",
            fix=f"Use +model={elsewhere[0].family}",
        )
    listed = tuple(c.checkpoint for c in family.checkpoints)
    near = matrix.nearest(name, listed) or listed[:5]
    return Problem(
        code="unknown-checkpoint",
        key="model.checkpoint",
        message=f"{name!r} is not in models/{family.family}.yaml",
        fix=f"Did you mean {' or '.join(near)}?",
    )


def _check_engine(cfg: ApplianceConfig, engine: EngineKind) -> list[Problem]:
    if cfg.engine.kind in ("auto", engine):
        return []
    return [
        Problem(
            code="engine-mesh-mismatch",
            key="engine",
            message=f"engine={cfg.engine.kind} cannot drive mesh={cfg.mesh.option}",
            fix=f"Use engine={engine} or engine=auto",
        )
    ]


def _check_scheduler(cfg: ApplianceConfig, engine: EngineKind) -> list[Problem]:
    """engine.scheduler=phased owns chunked prefill and the token budget (the flag table refuses their flags in
    engine.extra_args); on TT it is the plugin's own."""
    if cfg.engine.scheduler != "phased":
        return []
    if engine == "tt":
        return [
            Problem(
                code="scheduler-native",
                key="engine.scheduler",
                message="the TT plugin's scheduler is phase-exclusive already; phased changes nothing on engine=tt",
                fix="Use engine.scheduler=default",
                severity="warning",
            )
        ]
    found: list[Problem] = []
    if cfg.features.chunked_prefill:
        found.append(
            Problem(
                code="flag-owned-by-config",
                key="features.chunked_prefill",
                message="engine.scheduler=phased prefills whole prompts",
                fix="Set features.chunked_prefill=null",
                change=("features.chunked_prefill=null",),
            )
        )
    return found


def _check_pinned(cfg: ApplianceConfig, e: _Entry, engine: EngineKind) -> list[Problem]:
    """A hub checkpoint is served at a pinned revision, fetched and verified ahead (docs: Weights a fleet can
    trust); an embedded model or a local folder needs none, and a revision of one is a mistake."""
    checkpoint, revision = cfg.model.checkpoint, cfg.model.revision
    if e.checkpoint.generated or is_local_path(checkpoint):
        what = (
            "an embedded model, built and checked against its recorded hash"
            if e.checkpoint.generated
            else ("a local folder")
        )
        return (
            [
                Problem(
                    code="revision-not-applicable",
                    key="model.revision",
                    message=f"{checkpoint} is {what}: it has no hub revision",
                    fix="Remove model.revision",
                    change=("~model.revision",),
                )
            ]
            if revision
            else []
        )
    try:
        check_checkpoint(checkpoint)
    except WeightsError as bad:
        return [
            Problem(
                code="checkpoint-name",
                key="model.checkpoint",
                message=str(bad),
                fix="Name a hub repository as org/name",
            )
        ]
    if revision is not None:
        return []
    boot = (
        "engine=tt never downloads at boot: serve finds it only in the hub cache"
        if engine == "tt"
        else "the engine downloads whatever the hub serves at boot, unchecked"
    )
    return [
        Problem(
            code="revision-unpinned",
            key="model.revision",
            message=f"{checkpoint} names no revision: {boot}",
            fix="Set model.revision to the hub commit to serve and run `appliance fetch` ahead",
            severity="warning",
        )
    ]


def _check_precision(cfg: ApplianceConfig, e: _Entry) -> list[Problem]:
    name = cfg.precision.name
    if name != "default" and not e.architecture.accepts_optimizations:
        return [
            Problem(
                code="precision-not-validated",
                key="precision",
                message=f"{e.architecture.tt_class} asserts that no precision profile is passed",
                fix="Set precision=default",
                change=("precision=default",),
            )
        ]
    if name not in e.row.precisions:
        return [
            Problem(
                code="precision-not-validated",
                key="precision",
                message=f"precision={name} is not validated for {e.checkpoint.checkpoint} on {cfg.mesh.option}",
                fix=f"Set precision={e.row.precisions[0]} (validated: {', '.join(e.row.precisions)})",
                change=(f"precision={e.row.precisions[0]}",),
            )
        ]
    return []


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
