"""The schema of one vllm-tt-plugin state: a file per (vLLM version, plugin commit) in build/tt/plugin-states/.

Each file holds what validation and planning need to know about that plugin state (the `tt` keys
it accepts, the environment it reads, what it refuses and what it changes silently), with the
source of every rule. Adding a state is adding a file; state_set.py loads and selects them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # pydantic is imported where a schema is built: cached data is read back without it
    from pydantic import ConfigDict

__all__ = [
    "Adjustment",
    "BlockOutput",
    "CapabilityKey",
    "ChunkedPrefill",
    "EnvRule",
    "Feature",
    "PluginState",
    "Read",
    "Speculative",
    "TtKey",
    "TtMetalLayout",
    "VisionRules",
]

_FORBID: ConfigDict = {"extra": "forbid"}
Status = Literal["verified", "unverified"]
Checked = Literal["config", "worker", "never"]
"""Where the plugin checks a key: at config time (before boot), only in the worker, or never."""
TtKind = Literal["enum", "bool", "positive_int", "bytes", "false_only", "owned", "multi_host", "legacy"]


@dataclass(frozen=True, slots=True)
class TtKey:
    """One `--additional-config '{"tt": {...}}'` key the plugin reads."""

    __pydantic_config__ = _FORBID

    kind: TtKind
    checked: Checked
    refusal: str
    """The plugin's own error for a bad value, `{value}` standing for it (or what happens instead)."""
    source: str
    values: tuple[str, ...] = ()
    default: str | int | bool | None = None
    owner: str | None = None
    """The appliance config key that sets this plugin key (kind `owned`)."""
    status: Status = "verified"


@dataclass(frozen=True, slots=True)
class EnvRule:
    """An environment variable the plugin reads whose value it checks."""

    __pydantic_config__ = _FORBID

    refusal: str
    source: str
    values: tuple[str, ...] = ()
    grid: bool = False
    """Also accepts a two-integer grid such as '(4, 8)'."""
    format: Literal["values", "class_overrides"] = "values"
    lane_dp_value: str | None = None
    """The value that turns data parallelism into in-process lanes for any model."""
    status: Status = "verified"


@dataclass(frozen=True, slots=True)
class Read:
    """A name (environment variable or CLI flag) the pinned vLLM or plugin reads, and who says so."""

    __pydantic_config__ = _FORBID

    names: tuple[str, ...]
    source: str
    status: Status = "verified"


@dataclass(frozen=True, slots=True)
class Feature:
    """A vLLM feature the state refuses, requested by raw flags or `tt` keys."""

    __pydantic_config__ = _FORBID

    flags: tuple[str, ...]
    reason: str
    refusal: str
    source: str
    allowed: tuple[str, ...] = ()
    """Flag values that are harmless (e.g. `-tp 1`)."""
    status: Status = "verified"


@dataclass(frozen=True, slots=True)
class Adjustment:
    """Something the plugin changes in vLLM's config without being asked."""

    __pydantic_config__ = _FORBID

    when: Literal[
        "always",
        "chunked_prefill_off",
        "chunked_prefill_on",
        "lane_dp",
        "capability_dropped",
        "decode_interleave_default",
        "block_output",
    ]
    effect: str
    log: str
    source: str
    status: Status = "verified"


@dataclass(frozen=True, slots=True)
class CapabilityKey:
    """A `model_capabilities` key the plugin reads from the tt-metal class, and what a missing one does."""

    __pydantic_config__ = _FORBID

    missing: Literal["drop", "reject", "info"]
    refusal: str
    source: str
    feature: str | None = None
    """The appliance feature (features.<name>) that needs it."""
    status: Status = "verified"


@dataclass(frozen=True, slots=True)
class ChunkedPrefill:
    __pydantic_config__ = _FORBID

    gate: Literal["model_type", "capability"]
    source: str
    model_types: tuple[str, ...] = ()
    status: Status = "verified"


@dataclass(frozen=True, slots=True)
class Speculative:
    """Speculative decoding where the state supports it, with its constraints."""

    __pydantic_config__ = _FORBID

    methods: tuple[str, ...]
    refused_requests: tuple[str, ...]
    """Request controls the plugin refuses on a speculative launch (workload shares that send them fail)."""
    request_refusal: str
    lane_dp_refusal: str
    async_refusal: str
    greedy: str
    source: str
    status: Status = "verified"


@dataclass(frozen=True, slots=True)
class BlockOutput:
    """Constraints on block-output models (model_capabilities output_tokens_per_step > 1)."""

    __pydantic_config__ = _FORBID

    max_num_seqs: str
    data_parallel: str
    synchronous: str
    sample_on_device: str
    prefix_caching: str
    speculative: str
    source: str
    status: Status = "verified"
    required_classes: tuple[str, ...] = ()
    """Classes the plugin refuses unless they declare output_tokens_per_step > 1 (`required`)."""
    required: str = ""


@dataclass(frozen=True, slots=True)
class TtMetalLayout:
    """The tt-metal package the state's plugin imports its classes from, and the tt-metal commits known to have it."""

    __pydantic_config__ = _FORBID

    module: str
    replaces: str
    known_at: tuple[str, ...]
    source: str


@dataclass(frozen=True, slots=True)
class VisionRules:
    """What the state does with vision models: the modalities it serves, how it prefills images, batch limits."""

    __pydantic_config__ = _FORBID

    modalities: tuple[str, ...]
    refusal: str
    """The plugin's error for an item of another modality."""
    source: str
    prefill: str
    """How an image's tokens are prefilled (never split across chunks)."""
    prefill_source: str
    lane_dp: str
    """The refusal of lane data parallelism for a vision (mrope) model."""
    lane_dp_source: str
    batch_limits: Mapping[str, int] = field(default_factory=dict)
    """TT class -> the most sequences its vision path batches (max_num_seqs)."""
    batch_source: str = ""
    status: Status = "verified"


@dataclass(frozen=True, slots=True)
class PluginState:
    """Everything the appliance knows about one plugin commit and the vLLM it targets."""

    __pydantic_config__ = _FORBID

    vllm: str
    plugin_commit: str
    compat_tag: str | None
    date: str
    found: str
    """Where the commit was found to target this vLLM."""
    architectures: tuple[str, ...]
    architectures_source: str
    tt_keys: Mapping[str, TtKey]
    env: Mapping[str, EnvRule]
    vllm_env: tuple[Read, ...]
    not_read_env: tuple[Read, ...]
    flags: tuple[Read, ...]
    features: Mapping[str, Feature]
    capability_keys: Mapping[str, CapabilityKey]
    adjustments: Mapping[str, Adjustment]
    chunked_prefill: ChunkedPrefill
    lane_dp_classes: tuple[str, ...]
    max_logprobs: int
    kv_block_tokens: int
    kv_default_tokens: int
    kv_source: str
    additional_config_forms: tuple[Literal["json", "dotted"], ...]
    forms_source: str
    speculative: Speculative | None = None
    block_output: BlockOutput | None = None
    class_modules: Mapping[str, str] = field(default_factory=dict)
    """Module the models/ records name -> the module this state's plugin registers that class from."""
    tt_metal_layout: TtMetalLayout | None = None
    vision: VisionRules | None = None
    """None where nothing is recorded of how the state serves images."""
    notes: tuple[str, ...] = field(default_factory=tuple)

    def registered_target(self, target: str) -> str:
        """`module:Class` as this state's plugin loads it (models/ records the pinned state's modules)."""
        module, _, name = target.partition(":")
        return f"{self.class_modules.get(module, module)}:{name}"

    @property
    def name(self) -> str:
        return f"vllm-{self.vllm}@{self.plugin_commit[:7]}"

    @property
    def label(self) -> str:
        """How messages name the state: `<commit> (vLLM <version>)`."""
        return f"{self.plugin_commit[:7]} (vLLM {self.vllm})"

    def rules(self) -> Iterator[tuple[str, str, Status]]:
        """(rule id, source, status) for every rule in the state, for coverage and provenance."""
        groups: tuple[tuple[str, Mapping[str, TtKey | EnvRule | Feature | CapabilityKey | Adjustment]], ...] = (
            ("tt", self.tt_keys),
            ("env", self.env),
            ("feature", self.features),
            ("capability", self.capability_keys),
            ("adjustment", self.adjustments),
        )
        for prefix, rules in groups:
            for key, rule in rules.items():
                if not (isinstance(rule, CapabilityKey) and rule.missing == "info"):
                    yield f"{prefix}.{key}", rule.source, rule.status
        yield "reads.env", self.vllm_env[0].source if self.vllm_env else "", "verified"
        yield "reads.flags", self.flags[0].source if self.flags else "", "verified"
        yield f"chunked_prefill.{self.chunked_prefill.gate}", self.chunked_prefill.source, self.chunked_prefill.status
        yield "additional_config.forms", self.forms_source, "verified"
        if self.speculative is not None:
            for part in ("lane_dp", "async", "requests", "greedy"):
                yield f"speculative.{part}", self.speculative.source, self.speculative.status
        if self.block_output is not None:
            parts = ["max_num_seqs", "data_parallel", "synchronous", "sample_on_device", "prefix_caching"]
            for part in [*parts, "speculative", *(["required"] if self.block_output.required_classes else [])]:
                yield f"block_output.{part}", self.block_output.source, self.block_output.status

    def reads_env(self, name: str) -> Read | None:
        return next((r for r in self.vllm_env if name in r.names), None)

    def not_read(self, name: str) -> Read | None:
        return next((r for r in self.not_read_env if name in r.names), None)

    def reads_flag(self, flag: str) -> Read | None:
        return next((r for r in self.flags if flag in r.names), None)
