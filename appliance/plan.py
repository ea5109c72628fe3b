"""Turn a validated config into the exact engine launch: interpreter, argv, environment, URLs.

Pure: no I/O, no host access. vLLM flag names appear only in this module.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic_core import to_jsonable_python

from appliance.compat.adjust import PlannedAdjustment, dropped_features, plugin_adjustments
from appliance.compat.contract import extra_args_without, flag_names
from appliance.compat.engine_flags import PlannedFlags, command_args, flag_row
from appliance.compat.images import ImageLimits
from appliance.compat.media import DOWNLOAD_CAP_VAR, MediaPolicy, media_policy
from appliance.compat.reads import check_plan_reads
from appliance.compat.validate import ValidatedConfig, is_local_path
from appliance.config.schema import (
    ApplianceConfig,
    BoardsConfig,
    ControlConfig,
    EngineKind,
    HostShare,
    SupervisorConfig,
)
from appliance.errors import ConfigError, Problem
from appliance.resources import default_engines_dir, engine_plugins_dir
from appliance.weights.layout import entry_dir, lock_path

__all__ = [
    "ENGINE_MODULE",
    "ENGINE_PLUGINS",
    "HUB",
    "PHASED_MODULE",
    "LaunchPlan",
    "WeightsPlan",
    "build_plan",
    "engine_python",
    "weights_dirs",
]

ENGINE_MODULE = "vllm.entrypoints.openai.api_server"
# Engine-side code (it imports vLLM), put on the engine's PYTHONPATH when a config needs it.
ENGINE_PLUGINS = engine_plugins_dir()
PHASED_MODULE = "appliance_phased.scheduler"
HUB = "https://huggingface.co"
"""The hub's own endpoint: the source of a pinned checkpoint where the site names no mirror."""


@dataclass(frozen=True, slots=True)
class WeightsPlan:
    """A pinned hub checkpoint: the verified folder the engine serves, its lock, and where `appliance fetch` gets
    it (docs: Weights a fleet can trust)."""

    checkpoint: str
    revision: str
    store: str
    """The host's model store (site.weights.store_dir)."""
    locks_dir: str
    """The site's weights locks (site.weights.locks_dir)."""
    entry: str
    """The revision's folder in the store: present only when every file matched its lock."""
    lock_file: str
    """The revision's weights lock in the site's locks folder (recorded at the first fetch, then checked)."""
    source: str
    """The mirror, mounted folder or hub endpoint a fetch reads."""
    token_env: str
    """The variable holding the hub's or mirror's token (by name; an unset one sends none)."""
    token_file: str | None
    jobs: int


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    """Everything needed to start the engine, and nothing secret."""

    engine: EngineKind
    python: str
    argv: tuple[str, ...]
    """Full command line, interpreter first."""
    env: Mapping[str, str]
    """Environment added to the appliance's own for the engine process."""
    secret_env: Mapping[str, str]
    """Engine variable -> name of the appliance variable that holds the secret (never its value)."""
    model_path: str
    generate: str | None
    """Recipe that must build model_path before boot (the embedded tiny model), else None."""
    served_name: str
    host: str
    port: int
    base_url: str
    health_url: str
    ready_timeout_s: float
    site: str
    family: str
    checkpoint: str
    mesh: str
    random_weights: bool
    """The checkpoint's weights are noise (the matrix's `random_weights`): gates check serving, not answers."""
    control: ControlConfig
    supervisor: SupervisorConfig
    state_dir: str
    log_dir: str
    config_hash: str
    choices: Mapping[str, str]
    provenance: Mapping[str, str]
    resolved: Mapping[str, Any]
    """Dotted key -> resolved value, the keys of `provenance` (secrets appear only as env var names)."""
    max_context: int
    max_concurrency: int
    """Concurrent sequences for the whole system, after row defaults (all data-parallel ranks)."""
    warnings: tuple[Problem, ...]
    plugin_state: str | None = None
    """The vllm-tt-plugin state the plan was judged under (`vllm-X@commit`), None on the CPU engine."""
    adjustments: tuple[PlannedAdjustment, ...] = ()
    """What the plugin changes at boot: set explicitly by the plan, or listed here as the plugin's doing."""
    expected: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """What the engine's config resolution should settle on (the probe's keys); a key is absent where the
    records cannot say and the engine's default decides."""
    probe_timeout_s: float = 300.0
    """engine.probe_timeout_s: how long the config-time probe may take before it is killed."""
    host_share: HostShare | None = None
    """engine.host_share: the engine's (and the probe's) bounded CPU share; None: the appliance's."""
    boards: BoardsConfig = field(default_factory=BoardsConfig)
    """How the boards the engine owns are read while it serves."""
    images: ImageLimits | None = None
    """The image limits of a vision model, and what the plugin does with images; None on a text model."""
    weights: WeightsPlan | None = None
    """Where a pinned hub checkpoint's verified copy is (model_path) and how it is fetched; None: an embedded model,
    a local folder, or an unpinned hub id."""
    tensor_cache: str | None = None
    """tt-metal's tensor cache folder (TT_CACHE_PATH), keyed by what invalidates it; None on the CPU engine."""
    media: MediaPolicy | None = None
    """Where a vision engine may fetch images from (every fetch goes through the media gate); None: text model."""

    def command_line(self) -> str:
        """The shell line an operator could run by hand (secrets stay as $NAME references)."""
        import shlex

        env = [f"{k}={shlex.quote(v)}" for k, v in self.env.items()]
        secrets = [f"{k}=${v}" for k, v in self.secret_env.items()]
        return " ".join([*env, *secrets, *(shlex.quote(a) for a in self.argv)])

    def to_json(self) -> dict[str, Any]:
        # Read-only mappings (mappingproxy) are not JSON types; the fallback copies them to dicts.
        return to_jsonable_python(self, fallback=dict)  # type: ignore[no-any-return]


def build_plan(validated: ValidatedConfig) -> LaunchPlan:
    """The launch plan for a validated config."""
    cfg = validated.config
    paths = cfg.paths
    python = engine_python(cfg, validated.engine)
    generate = validated.checkpoint.generated
    weights = _weights(cfg, validated.composed.site_dir)
    model_path = (
        str(Path(paths.cache_dir) / "models" / generate)
        if generate
        else weights.entry
        if weights
        else _local_or_hub(cfg.model.checkpoint)
    )
    served = cfg.model.served_name or cfg.model.checkpoint
    probe_host = "127.0.0.1" if cfg.serving.host in ("0.0.0.0", "::") else cfg.serving.host
    base_url = f"http://{probe_host}:{cfg.serving.port}"
    state_dir = str(Path(paths.state_dir).expanduser().resolve())
    media = _media(validated, state_dir)
    cache = _tensor_cache(validated) if validated.engine == "tt" else None
    own_args = _engine_args(validated, model_path, served, media)
    _refuse_repeats(own_args, validated.extra_args)
    env = _engine_env(validated, media, cache, offline=weights is not None)
    state = validated.state
    reads = () if state is None else tuple(check_plan_reads((a for a in own_args if a.startswith("-")), env, state))
    return LaunchPlan(
        engine=validated.engine,
        python=python,
        argv=(python, "-m", ENGINE_MODULE, *own_args, *validated.extra_args),
        env=MappingProxyType(env),
        secret_env=MappingProxyType(_secret_env(validated)),
        model_path=model_path,
        generate=generate,
        served_name=served,
        host=cfg.serving.host,
        port=cfg.serving.port,
        base_url=base_url,
        health_url=f"{base_url}/health",
        ready_timeout_s=cfg.engine.ready_timeout_s,
        site=cfg.site.name,
        family=validated.family.family,
        checkpoint=cfg.model.checkpoint,
        mesh=cfg.mesh.option,
        random_weights=validated.checkpoint.random_weights,
        control=cfg.control,
        supervisor=cfg.supervisor,
        state_dir=state_dir,
        log_dir=paths.log_dir,
        config_hash=validated.composed.config_hash,
        choices=validated.composed.choices,
        provenance=validated.composed.provenance,
        resolved=MappingProxyType(_flatten(to_jsonable_python(cfg), "")),
        max_context=validated.max_context,
        max_concurrency=validated.max_concurrency,
        warnings=validated.warnings + reads,
        plugin_state=state.name if state else None,
        adjustments=plugin_adjustments(validated),
        expected=MappingProxyType(_expected(validated, media)),
        probe_timeout_s=cfg.engine.probe_timeout_s,
        host_share=cfg.engine.host_share,
        boards=cfg.boards,
        images=validated.images,
        weights=weights,
        tensor_cache=cache,
        media=media,
    )


def engine_python(cfg: ApplianceConfig, engine: EngineKind) -> str:
    """The engine's interpreter: engine.python, else the environment `appliance build` made under the engines dir."""
    paths = cfg.paths
    engines_dir = Path(paths.engines_dir) if paths.engines_dir else default_engines_dir(paths.cache_dir)
    return cfg.engine.python or str(engines_dir / engine / "bin" / "python")


def _local_or_hub(checkpoint: str) -> str:
    """A local checkpoint as an absolute path (the engine runs in the state directory, not the
    operator's); a hub id as written."""
    return str(Path(checkpoint).expanduser().resolve()) if is_local_path(checkpoint) else checkpoint


def _flatten(tree: dict[str, Any], prefix: str) -> dict[str, Any]:
    """Nested config -> dotted keys; empty maps and lists stay leaves, as provenance records them."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat |= _flatten(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _refuse_repeats(own: list[str], extra: tuple[str, ...]) -> None:
    """engine.extra_args may not repeat a flag the plan wrote, in any spelling: vLLM takes the last one, so the engine
    would run otherwise than the plan says (validation names the key of a flag a key always owns; this catches the
    flags the plan writes only in some configs)."""
    written = {row.flag for token in own if (row := flag_row(token)) is not None}
    repeated = {flag: row for flag, _ in flag_names(extra) if (row := flag_row(flag)) and row.flag in written}
    if repeated:
        raise ConfigError(
            tuple(
                Problem(
                    code="flag-owned-by-config",
                    key="engine.extra_args",
                    message=f"{flag} is set by the plan from {row.key}",
                    fix=f"Remove {flag}: the plan shows the value it sets (`appliance plan`)",
                    change=extra_args_without(extra, flag),
                )
                for flag, row in repeated.items()
            )
        )


def _media(v: ValidatedConfig, state_dir: str) -> MediaPolicy | None:
    serving = v.config.serving
    if v.images is None:
        return None
    # vLLM 0.26.0 has no download cap (its state records the variable as not read): the media gate's is the only one.
    caps = v.state is None or v.state.reads_env(DOWNLOAD_CAP_VAR) is not None
    return media_policy(
        serving.allowed_media_domains,
        serving.media_redirects,
        serving.local_media_dir,
        v.images.largest_pixels,
        state_dir,
        caps,
    )


def _engine_args(v: ValidatedConfig, model_path: str, served: str, media: MediaPolicy | None) -> list[str]:
    """The appliance's own flags, written by the flag table (engine.extra_args follow them in argv)."""
    cfg, images = v.config, v.images
    chunked = _chunked_prefill_flag(v)
    planned = PlannedFlags(
        model=model_path,
        served_model_name=served,
        host=cfg.serving.host,
        port=cfg.serving.port,
        max_model_len=v.max_context,
        # vLLM counts sequences per data-parallel rank or lane; the config counts the whole system.
        max_num_seqs=v.max_concurrency // v.data_parallel,
        enable_prefix_caching=cfg.features.prefix_caching,
        async_scheduling=cfg.features.async_decode,
        # A drain lets in-flight requests finish; the supervisor kills the group after stop_grace_s more.
        shutdown_timeout=int(cfg.supervisor.shutdown_timeout_s),
        data_parallel_size=v.data_parallel if v.data_parallel > 1 else None,
        additional_config={"tt": dict(v.tt_options)} if v.engine == "tt" and v.tt_options else None,
        speculative_config=_speculative(v),
        scheduler_cls=f"{PHASED_MODULE}.{_phased_class(v)}" if _phased(v) else None,
        enable_chunked_prefill=chunked,
        max_num_batched_tokens=_whole_prompt_budget(v) if chunked is False else None,
        # A vision model: video 0, since vLLM defaults an unset modality to 999 and the TT plugin fails on one inside
        # the engine loop; the pixel cap where the family's processor takes one.
        limit_mm_per_prompt=images.engine_limits() if images else None,
        mm_processor_kwargs=dict(images.processor_kwargs) if images and images.processor_kwargs else None,
        mm_processor_cache_gb=images.processor_cache_gb if images else None,
        # An empty --allowed-media-domains would mean any host to vLLM: the gate refuses every remote URL then.
        allowed_media_domains=media.allowed_hosts if media else (),
        allowed_local_media_path=media.local_dir if media else None,
    )
    return command_args(planned)


def _speculative(v: ValidatedConfig) -> dict[str, Any] | None:
    features = v.config.features
    if features.speculative == "off":
        return None
    return {"method": features.speculative, "num_speculative_tokens": features.speculative_tokens}


def _phased_class(v: ValidatedConfig) -> str:
    return "AsyncPhasedScheduler" if v.config.features.async_decode else "PhasedScheduler"


def _chunked_prefill_flag(v: ValidatedConfig) -> bool | None:
    """Chunked prefill as it will run: off (with a whole-prompt budget) wherever it will be off anyway.

    The TT plugin switches it off (and raises the budget) for a class that cannot resume a split
    prefill; saying so in the plan keeps the plan the configuration that runs.
    """
    if v.chunked_prefill is False:
        return False
    return True if v.config.features.chunked_prefill and v.engine == "cpu" else None


def _whole_prompt_budget(v: ValidatedConfig) -> int:
    """Without chunked prefill one step prefills a whole prompt, so the token budget must hold the longest one."""
    return max(v.max_context, v.max_concurrency // v.data_parallel)


def _expected(v: ValidatedConfig, media: MediaPolicy | None) -> dict[str, Any]:
    """The effective values the plan predicts, after the plugin's adjustments (adjust.py) and raw flags."""
    cfg, lanes = v.config, v.lane_dp
    dropped = set(dropped_features(v))
    expected: dict[str, Any] = {
        "max_model_len": v.max_context,
        # Lane DP folds the ranks into one engine that holds every lane's sequences (plugin _convert_dp_to_lanes).
        "max_num_seqs": v.max_concurrency if lanes else v.max_concurrency // v.data_parallel,
        "data_parallel_size": 1 if lanes else v.data_parallel,
        "enable_prefix_caching": cfg.features.prefix_caching and "prefix_caching" not in dropped,
        "async_scheduling": cfg.features.async_decode and "async_decode" not in dropped,
        "speculative": _speculative(v),
        "generation_config": "vllm" if v.engine == "tt" and _block_output(v) else "auto",
        "disable_any_whitespace": v.engine == "tt",  # the plugin forces compact JSON (adjustment compact_json)
    }
    if v.images is not None:
        expected["limit_mm_per_prompt"] = v.images.engine_limits()
        expected["mm_processor_kwargs"] = dict(v.images.processor_kwargs) or None
        if v.images.processor_cache_gb is not None:
            expected["mm_processor_cache_gb"] = v.images.processor_cache_gb
    if media is not None:
        expected |= media.expected()
    if v.chunked_prefill is not None:
        expected["enable_chunked_prefill"] = v.chunked_prefill
    if v.chunked_prefill is False:
        expected["max_num_batched_tokens"] = _whole_prompt_budget(v)
    if _phased(v):
        expected["scheduler_cls"] = _phased_class(v)
    elif v.engine == "tt":
        expected["scheduler_cls"] = "TTLaneCoordinator" if lanes else "TTScheduler"
    for flag, value in flag_names(v.extra_args):  # raw flags the engine keeps as given, shown by the probe
        row = flag_row(flag)
        if row is not None and row.probe is not None and value is not None:
            expected[row.probe] = _number(value)
    return expected


def _number(text: str) -> int | str:
    return int(text) if text.isdigit() else text


def _block_output(v: ValidatedConfig) -> bool:
    return v.capabilities is not None and v.capabilities.block_output


def _phased(v: ValidatedConfig) -> bool:
    """Emulated phase-exclusive scheduling; the TT plugin's own scheduler is phase-exclusive already."""
    return v.config.engine.scheduler == "phased" and v.engine != "tt"


def _weights(cfg: ApplianceConfig, site_dir: str | None) -> WeightsPlan | None:
    """The pinned checkpoint's place in the store and its lock; None where nothing is pinned."""
    revision, checkpoint, site = cfg.model.revision, cfg.model.checkpoint, cfg.site.weights
    if revision is None or is_local_path(checkpoint):
        return None
    store, locks = weights_dirs(cfg, site_dir)
    return WeightsPlan(
        checkpoint=checkpoint,
        revision=revision,
        store=str(store),
        locks_dir=str(locks),
        entry=str(entry_dir(store, checkpoint, revision)),
        lock_file=str(lock_path(locks, checkpoint, revision)),
        source=site.mirror or HUB,
        token_env=cfg.site.hf_token_env,
        token_file=site.token_file,
        jobs=site.jobs,
    )


def weights_dirs(cfg: ApplianceConfig, site_dir: str | None) -> tuple[Path, Path]:
    """The host's model store and the site's locks folder (site.weights, else their defaults)."""
    site = cfg.site.weights
    store = Path(site.store_dir or Path(cfg.paths.cache_dir) / "weights")
    locks = Path(site.locks_dir or Path(site_dir or cfg.paths.state_dir) / "weights-locks")
    return store.expanduser().resolve(), locks.expanduser().resolve()


def _tensor_cache(v: ValidatedConfig) -> str:
    """tt-metal's tensor cache folder, keyed by everything that invalidates it. tt-metal names its cache files by
    tensor and dtype only and reuses what it finds (models/tt_transformers/tt/model_config.py: TT_CACHE_PATH plus
    the device name; ttnn.as_tensor's cache_file_name), so changed weights under one name would load stale
    tensors: the checkpoint's revision, the tt-metal commit the row runs, the mesh and the precision are the key."""
    cfg = v.config
    parts = [
        re.sub(r"[^A-Za-z0-9._-]+", "_", cfg.model.checkpoint),
        cfg.model.revision or "unpinned",
        f"tt-metal-{v.row.tt_metal or 'unrecorded'}",
        cfg.mesh.option,
        cfg.precision.optimizations or cfg.precision.name,
    ]
    return str(Path(cfg.paths.cache_dir, "tt", *parts))


def _engine_env(v: ValidatedConfig, media: MediaPolicy | None, cache: str | None, *, offline: bool) -> dict[str, str]:
    cfg = v.config
    env = {"PYTHONUNBUFFERED": "1", "HF_HOME": str(Path(cfg.paths.cache_dir) / "hf")}
    if offline or v.engine == "tt":
        # A pinned checkpoint is served from its verified folder; a TT site never downloads at boot.
        env["HF_HUB_OFFLINE"] = "1"
    if cache is not None:
        env |= {
            "MESH_DEVICE": cfg.mesh.mesh_device or "",
            # Model load, warmup and trace capture come before the engine core's ready handshake.
            "VLLM_ENGINE_READY_TIMEOUT_S": str(int(cfg.engine.ready_timeout_s)),
            "VLLM_USE_V2_MODEL_RUNNER": "0",
            "TT_CACHE_PATH": cache,
        }
    env |= v.env
    if media is not None:
        env |= media.engine_env()
    if _phased(v):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ENGINE_PLUGINS), v.env.get("PYTHONPATH")) if p)
    return env


def _secret_env(v: ValidatedConfig) -> dict[str, str]:
    cfg = v.config
    secrets = {"HF_TOKEN": cfg.site.hf_token_env}
    if cfg.serving.api_key_env:
        secrets["VLLM_API_KEY"] = cfg.serving.api_key_env
    return secrets | dict(cfg.engine.secret_env)
