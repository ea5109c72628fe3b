"""What the control API answers, as frozen types both ends share: one schema for /state, /load,
/host and /checks.

The API serializes these (`render`) and the client parses them (`parse`). Parsing ignores keys
it does not know, so a newer appliance still works with an older console. The documents mirror,
field by field, the appliance's own types (`SupervisorSnapshot` and `LaunchPlan`, the metrics
window's `LoadSummary`, `SchedulerView`, `HostFacts`, `HostUsage`, `CheckResult`) without
importing them: the console may import this module and nothing of the runtime or the metrics
maths. Infinite bucket bounds travel as the JSON string "Infinity".
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar, cast

from pydantic import ConfigDict, Field, TypeAdapter
from pydantic_core import to_jsonable_python

from appliance.control.board_documents import BoardsDocument
from appliance.control.upgrade_documents import GenerationDocument, UpgradeDocument

__all__ = [
    "E2E",
    "ITL",
    "TTFT",
    "AcceptedDocument",
    "BoardDocument",
    "BootDocument",
    "CapabilitiesDocument",
    "CheckDocument",
    "ChecksDocument",
    "DevicesDocument",
    "EventDocument",
    "FaultDocument",
    "HostDocument",
    "HugePagesDocument",
    "LatencyDocument",
    "LiveDocument",
    "LoadDocument",
    "PlanDocument",
    "SchedulerDocument",
    "SlotsDocument",
    "StateDocument",
    "StepsDocument",
    "TensorCacheDocument",
    "SummaryDocument",
    "UsageDocument",
    "WeightsDocument",
    "dump",
    "parse",
    "render",
    "validate",
]

D = TypeVar("D")
_WIRE = ConfigDict(extra="ignore", populate_by_name=True, ser_json_inf_nan="strings")

TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
E2E = "vllm:e2e_request_latency_seconds"
"""vLLM's latency families, as `SummaryDocument.missing` names them."""


@dataclass(frozen=True, slots=True)
class PlanDocument:
    __pydantic_config__ = _WIRE

    argv: tuple[str, ...]
    env: Mapping[str, str]
    secret_env: Mapping[str, str]
    """Engine variable -> the name of the appliance variable holding the secret (never its value)."""


@dataclass(frozen=True, slots=True)
class EventDocument:
    __pydantic_config__ = _WIRE

    at: float
    """Wall-clock time (epoch seconds)."""
    previous: Annotated[str, Field(alias="from")]
    to: str
    reason: str


@dataclass(frozen=True, slots=True)
class CapabilitiesDocument:
    """Requested versus effective: what the plan asked for and what the running engine enabled."""

    __pydantic_config__ = _WIRE

    requested: Mapping[str, Any]
    effective: Mapping[str, Any] | None
    """As the engine's log and /metrics say, once it has been ready; None before; a None value is unknown."""
    sources: Mapping[str, str] = field(default_factory=dict)
    """Capability -> where the engine said it (a log line, a metric)."""
    differences: tuple[str, ...] = ()

    def verdict(self) -> tuple[str, ...]:
        """Lines for status and the console: "as planned", each difference, or why nothing was compared.

        "As planned" needs a capability both sides state: an engine that said nothing is "not checked".
        """
        if self.effective is None:
            return ("capabilities: not checked yet (read from the engine once it has been ready)",)
        if self.differences:
            return tuple(f"differs from the plan: {d}" for d in self.differences)
        compared = sorted(k for k, v in self.requested.items() if v is not None and self.effective.get(k) is not None)
        if not compared:
            return ("capabilities: not checked (the engine stated none of the planned ones)",)
        return (f"capabilities: as planned ({len(compared)} compared: {', '.join(compared)})",)


@dataclass(frozen=True, slots=True)
class FaultDocument:
    __pydantic_config__ = _WIRE

    rule: str
    cause: str
    next_step: str
    device: bool
    line: str
    """The engine's log line that matched."""


@dataclass(frozen=True, slots=True)
class BootDocument:
    __pydantic_config__ = _WIRE

    phase: str
    elapsed_s: float
    expected_s: float | None
    """Median boot time of this config on this host; None before the first recorded boot."""
    eta_s: float | None
    slow: bool
    """Far slower than the record (the boot-slow alert)."""
    tensor_cache_built: bool | None = None
    """Whether tt-metal's tensor cache was built when this boot began (False: this boot builds it, no ETA);
    None: the CPU engine has none."""


@dataclass(frozen=True, slots=True)
class WeightsDocument:
    """The pinned checkpoint the engine serves: checked against its weights lock before the boot."""

    __pydantic_config__ = _WIRE

    checkpoint: str
    revision: str
    entry: str
    """The revision's folder in the host's model store."""
    lock_file: str


@dataclass(frozen=True, slots=True)
class TensorCacheDocument:
    """tt-metal's tensor cache for the plan, keyed by revision, tt-metal commit, mesh and precision."""

    __pydantic_config__ = _WIRE

    path: str
    built: bool
    built_at: float | None = None
    boot_s: float | None = None
    """How long the boot that built it took."""


@dataclass(frozen=True, slots=True)
class StateDocument:
    """GET /state: the lifecycle, the identity of the config, and the plan without secrets."""

    __pydantic_config__ = _WIRE

    state: str
    pid: int | None
    uptime_s: float | None
    restarts: int
    last_error: str | None
    engine_url: str
    health_url: str
    site: str
    family: str
    checkpoint: str
    served_name: str
    mesh: str
    engine: str
    config_hash: str
    max_context: int | None = None
    max_concurrency: int | None = None
    choices: Mapping[str, str] = field(default_factory=dict)
    provenance: Mapping[str, str] = field(default_factory=dict)
    config: Mapping[str, Any] = field(default_factory=dict)
    """Dotted key -> resolved value."""
    plan: PlanDocument = field(default_factory=lambda: PlanDocument((), {}, {}))
    events: tuple[EventDocument, ...] = ()
    """The latest lifecycle changes, oldest first."""
    fault: FaultDocument | None = None
    """The fault-ladder match that ended the last boot, with the operator's next step."""
    quarantined: bool = False
    """Failed again after the one board reset `on_device_fault: reset_once` allows: the host needs hands."""
    boot: BootDocument | None = None
    """The boot under way, against this config's record on this host."""
    capabilities: CapabilitiesDocument | None = None
    generation: GenerationDocument | None = None
    """The generation serving (None: an appliance that keeps no journal, e.g. a slot)."""
    previous_generation: GenerationDocument | None = None
    """What a rollback of the last passed upgrade returns to."""
    upgrade: UpgradeDocument | None = None
    """The upgrade under way, or the last one with how it ended."""
    site_dir: str | None = None
    """The site directory (`serve --site-dir`, absolute) every generation's overrides are composed with; None: none
    given, or an appliance that keeps no generations."""
    drain_cancelled: int | None = None
    """Requests the last drain's deadline cancelled (0: it finished them all); None before a drain, or unread."""
    host_share: str | None = None
    """Where the engine runs on the host: its cgroup and weight (or nice) and cores; None: unbounded."""
    boards: BoardsDocument | None = None
    """The boards the engine owns, read while it serves; None: none watched (the CPU engine)."""
    weights: WeightsDocument | None = None
    """The pinned checkpoint served; None: an embedded model, a local folder or an unpinned hub id."""
    tensor_cache: TensorCacheDocument | None = None
    """tt-metal's tensor cache for this plan; None on the CPU engine."""


@dataclass(frozen=True, slots=True)
class BoardDocument:
    __pydantic_config__ = _WIRE

    index: int
    card_type: str | None = None
    firmware: str | None = None
    serial: str | None = None


@dataclass(frozen=True, slots=True)
class HugePagesDocument:
    __pydantic_config__ = _WIRE

    total: int
    free: int
    mount: str | None = None


@dataclass(frozen=True, slots=True)
class DevicesDocument:
    """The boards and driver as host discovery reports them."""

    __pydantic_config__ = _WIRE

    boards: tuple[BoardDocument, ...] = ()
    kmd_version: str | None = None
    hugepages_1g: HugePagesDocument | None = None
    mem_total_bytes: int | None = None
    mem_available_bytes: int | None = None
    tt_smi: Mapping[str, Any] | None = None
    tt_smi_error: str | None = None


@dataclass(frozen=True, slots=True)
class UsageDocument:
    __pydantic_config__ = _WIRE

    cpu_busy: float | None
    """Fraction of all cores busy since the previous read; None on the first read."""
    cores: int
    load_1m: float
    memory_total_bytes: int
    memory_available_bytes: int
    engine_rss_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class HostDocument:
    """GET /host."""

    __pydantic_config__ = _WIRE

    devices: DevicesDocument
    usage: UsageDocument


@dataclass(frozen=True, slots=True)
class CheckDocument:
    __pydantic_config__ = _WIRE

    id: str
    title: str
    status: str
    """pass, warn, unknown or fail."""
    summary: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    fix: str = ""
    blocking: bool = False


@dataclass(frozen=True, slots=True)
class ChecksDocument:
    """GET /checks: the preflight results `serve` ran."""

    __pydantic_config__ = _WIRE

    checks: tuple[CheckDocument, ...]


@dataclass(frozen=True, slots=True)
class LatencyDocument:
    """Percentiles from histogram bucket deltas (linear inside a bucket, as Prometheus estimates)."""

    __pydantic_config__ = _WIRE

    p50: float
    p95: float
    p99: float
    observations: float


@dataclass(frozen=True, slots=True)
class StepsDocument:
    """Engine steps from the tokens-per-step histogram."""

    __pydantic_config__ = _WIRE

    steps: float
    tokens_per_step: float
    p50_tokens: float
    p95_tokens: float
    distribution: tuple[tuple[float, float], ...]
    """(bucket upper bound, steps in that bucket), empty buckets left out."""
    prompt_share: float | None
    """Share of step tokens that were prompt (prefill) rather than generated (decode)."""


@dataclass(frozen=True, slots=True)
class SummaryDocument:
    """The engine's load over the appliance's window of /metrics samples (the last 60 s)."""

    __pydantic_config__ = _WIRE

    window_s: float | None
    """Span the rates and percentiles cover; None: one sample, so lifetime totals since engine start."""
    engines: int
    running: float | None
    waiting: float | None
    kv_usage: float | None
    """Fraction 0-1, weighted by each engine's capacity."""
    kv_capacity_tokens: float | None
    prompt_tps: float | None
    generation_tps: float | None
    prompt_tps_history: tuple[float, ...]
    """Rate between each pair of samples in the window, oldest first: a sparkline's points."""
    generation_tps_history: tuple[float, ...]
    prefix_hit_rate: float | None
    preemptions: float | None
    failed_requests: float | None
    ttft: LatencyDocument | None
    itl: LatencyDocument | None
    e2e: LatencyDocument | None
    steps: StepsDocument | None
    restarted: bool
    """The engine restarted inside the window (its counters went back)."""
    missing: tuple[str, ...]
    """Watched families the latest page lacks: shown as n/a, never as 0."""


@dataclass(frozen=True, slots=True)
class SchedulerDocument:
    """Prefill against decode per step, from the engine's log."""

    __pydantic_config__ = _WIRE

    stats_line: str | None
    """The latest periodic stats line, from `Engine NNN:` on."""
    steps: int
    """Logged steps summarised (the most recent ones; 0 without --enable-logging-iteration-details)."""
    prefill_steps: int
    context_tokens_per_step: float
    generation_tokens_per_step: float
    prefill_step_ms: float | None
    decode_step_ms: float | None


@dataclass(frozen=True, slots=True)
class LoadDocument:
    """GET /load: what the appliance computes of its engine's load, and the alerts it raises."""

    __pydantic_config__ = _WIRE

    summary: SummaryDocument | None
    """None when the engine's /metrics could not be read just now (`metrics_error` says why)."""
    metrics_error: str | None
    scheduler: SchedulerDocument
    alerts: tuple[str, ...]
    """Short alerts, most urgent first."""


@dataclass(frozen=True, slots=True)
class LiveDocument:
    """GET /live: what a live view shows of one appliance, in one request instead of one per document.

    The same documents as /state and /load, and with `?detail=1` /host and /checks; the console
    polls it each second.
    """

    __pydantic_config__ = _WIRE

    state: StateDocument
    load: LoadDocument
    host: HostDocument | None = None
    """Only with ?detail=1."""
    checks: ChecksDocument | None = None
    """Only with ?detail=1, and None when the appliance ran no preflight."""


@dataclass(frozen=True, slots=True)
class AcceptedDocument:
    """POST /drain or /restart: the command taken, and the state the engine was in when it was."""

    __pydantic_config__ = _WIRE

    accepted: str
    state: str


@dataclass(frozen=True, slots=True)
class SlotsDocument:
    """GET /slots: an appliance serving several slots, each slot's state as its /slots/<name>/state has it."""

    __pydantic_config__ = _WIRE

    name: str
    """The slots file it serves (conf/slots/<name>.yaml)."""
    slots: Mapping[str, StateDocument]
    """Slot name -> its state document, in the file's order."""


def _adapter(kind: type[D]) -> TypeAdapter[D]:
    return _cached_adapter(cast(Hashable, kind))


@functools.cache
def _cached_adapter(kind: Hashable) -> TypeAdapter[Any]:
    return TypeAdapter(cast(Any, kind))


def render(document: object) -> bytes:
    """The JSON body of a document."""
    return _adapter(type(document)).dump_json(document, by_alias=True)


def dump(document: object) -> Any:
    """A document as JSON values (dicts and lists), keys as on the wire."""
    return _adapter(type(document)).dump_python(document, mode="json", by_alias=True)


def parse(kind: type[D], body: str | bytes) -> D:
    """The document a JSON body holds; pydantic's ValidationError (a ValueError) when it is not one."""
    return _adapter(kind).validate_json(body)


def validate(kind: type[D], value: object) -> D:
    """`kind` read field by field from `value`: JSON values, or one of the appliance's own types."""
    return _adapter(kind).validate_python(to_jsonable_python(value, fallback=dict))
