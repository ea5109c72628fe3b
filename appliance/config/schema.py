"""Typed, immutable config: the shape every Hydra composition is parsed into.

The attribute docstrings are the config reference (the docs build generates its config reference page from them),
so they say what a key means to an operator, not how the code uses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal

from appliance.config.bounds import Bound

if TYPE_CHECKING:  # pydantic is imported where a schema is built: a cached composition is read back without it
    from pydantic import ConfigDict

__all__ = [
    "ApplianceConfig",
    "BoardsConfig",
    "ComposedConfig",
    "ControlConfig",
    "ControlTls",
    "EngineConfig",
    "EngineKind",
    "FeaturesConfig",
    "GatewayClient",
    "GatewayConfig",
    "GatewayModel",
    "HostShare",
    "ImageCount",
    "ImageSize",
    "ImagesConfig",
    "LengthDistribution",
    "MeshConfig",
    "ModelConfig",
    "PathsConfig",
    "PrecisionConfig",
    "ServingConfig",
    "SiteConfig",
    "Status",
    "SupervisorConfig",
    "WeightsConfig",
    "WorkloadConfig",
    "STATUS_ORDER",
]

Status = Literal["experimental", "functional", "complete", "top_perf"]
STATUS_ORDER: tuple[Status, ...] = ("experimental", "functional", "complete", "top_perf")
EngineKind = Literal["tt", "cpu"]

# No `use_attribute_docstrings`: pydantic would parse every class's source to collect docstrings that
# nothing reads from it: 0.15 s of each composition the cache has not seen (bench/verdict_time.py).
_STRICT: ConfigDict = {"extra": "forbid"}
_STRICT_TEXT: ConfigDict = {**_STRICT, "coerce_numbers_to_str": True}

# The range of every value, enforced when a composition is parsed (tests/config/test_schema_ranges.py walks them).
Port = Annotated[int, Bound(ge=1, le=65535)]
Seconds = Annotated[float, Bound(gt=0)]
Count = Annotated[int, Bound(ge=1)]
Share = Annotated[float, Bound(ge=0, le=1)]
Name = Annotated[str, Bound(min_length=1)]
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
EnvName = Annotated[str, Bound(pattern=_ENV_NAME)]
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
DnsLabel = Annotated[str, Bound(pattern=_DNS_LABEL)]
# A host as a URL names it (lower case, as vLLM compares it): DNS labels joined by dots, which an IPv4 address is too.
_HOST_NAME = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$"
HostName = Annotated[str, Bound(pattern=_HOST_NAME)]
_REVISION = r"^[0-9a-f]{40}$"
Revision = Annotated[str, Bound(pattern=_REVISION)]
_HEADER_NAME = r"^[A-Za-z0-9-]+$"
HeaderName = Annotated[str, Bound(pattern=_HEADER_NAME)]
PATTERNS: Mapping[str, tuple[str, str]] = {
    _REVISION: ("a commit id", "the 40 lower-case hex digits of the revision's commit (a branch or tag is no pin)"),
    _ENV_NAME: ("an environment variable name", "letters, digits and _ (not starting with a digit)"),
    _DNS_LABEL: ("a DNS label", "lower-case letters, digits and - (at most 63, not starting or ending with -)"),
    _HOST_NAME: ("a host name", "a lower-case host name or IPv4 address, with no scheme, port, path or wildcard"),
    _HEADER_NAME: ("an HTTP header name", "letters, digits and -"),
}
"""What each pattern's values are, and how to write one: a mismatch's one-line error says it."""


@dataclass(frozen=True, slots=True)
class ModelConfig:
    __pydantic_config__ = _STRICT_TEXT  # a commit id of digits only reaches the schema as a number

    family: Name
    """Model family: the name of a file in models/ (llama, qwen, mistral, gemma, ...)."""
    checkpoint: Name
    """Hugging Face repo id or local directory; must be a checkpoint the family's matrix lists."""
    served_name: Name | None = None
    """Name clients pass as `model`; defaults to the checkpoint."""
    revision: Revision | None = None
    """The hub repository's commit to serve (40 hex digits). With it the engine serves the copy `appliance fetch`
    put in the model store and verified against the revision's weights lock, never a download at boot. None: a
    local folder or an embedded model (a hub id without one is a warning: the hub decides what is served)."""


@dataclass(frozen=True, slots=True)
class MeshConfig:
    __pydantic_config__ = _STRICT

    name: str
    """Hardware name as the Tenstorrent stack spells it (N150, T3K, P150x4, CPU, auto)."""
    option: str
    """The conf/mesh option this came from; the matrix is keyed by it."""
    arch: Literal["wormhole", "blackhole", "cpu", "auto"]
    """Chip architecture."""
    chips: Annotated[int, Bound(ge=0)]
    """Number of chips the mesh spans."""
    boards: Annotated[int, Bound(ge=0)]
    """Number of boards (PCIe cards or Galaxy trays) the mesh spans."""
    board_name: str | None
    """Board type as tt-smi and the Kubernetes DRA driver report it (n150, n300, p150, ...)."""
    shape: tuple[Count, Count]
    """Logical mesh grid (rows, columns)."""
    mesh_device: str | None
    """MESH_DEVICE value the plugin expects; None for the CPU mesh."""
    devices: Count | None = None
    """Devices the driver enumerates for the mesh (Kubernetes DRA count): one per MMIO-anchored board,
    so an n300 is one but a Galaxy is 32; None means one per board."""


@dataclass(frozen=True, slots=True)
class PrecisionConfig:
    __pydantic_config__ = _STRICT

    name: Literal["default", "performance", "accuracy"]
    """Precision profile; must be validated for the checkpoint on this mesh."""
    optimizations: Literal["performance", "accuracy"] | None
    """The plugin's `tt.optimizations` value; None keeps the model's own default."""


@dataclass(frozen=True, slots=True)
class HostShare:
    """The engine's bounded share of the host's CPU, so the control plane answers first (docs: The host stays
    operable)."""

    __pydantic_config__ = _STRICT

    weight: Annotated[int, Bound(ge=1, le=10000)] = 10
    """The engine's CPU weight against the host's other work, on cgroup v2's scale (an ordinary process is 100):
    its own cgroup's `cpu.weight` (v1: `cpu.shares`, times 10.24), or the nice value it stands for where no cgroup
    can be written. It matters only when the CPU is contended: an idle host's cores are the engine's."""
    reserve_cores: Annotated[int, Bound(ge=0)] = 0
    """Cores kept from the engine for the control plane (the lowest-numbered ones); its threads run on the rest.
    Must leave it one. A slot's `cores` replace it."""


@dataclass(frozen=True, slots=True)
class EngineConfig:
    # `engine.env.X=5` arrives as an int from the override parser; environment values are strings.
    __pydantic_config__ = _STRICT_TEXT

    kind: Literal["tt", "cpu", "auto"]
    """Engine: tt (vLLM + vllm-tt-plugin), cpu (vLLM on the CPU), auto (from the mesh)."""
    python: Name | None = None
    """Engine interpreter; None uses the environment `appliance build` made under .engines/."""
    extra_args: tuple[str, ...] = ()
    """Raw vLLM flags appended to the command; validated like everything else."""
    env: Mapping[EnvName, str] = field(default_factory=dict)
    """Extra environment for the engine process (non-secret values only)."""
    secret_env: Mapping[EnvName, EnvName] = field(default_factory=dict)
    """Secret environment by name: engine variable -> the appliance's variable holding the value."""
    ready_timeout_s: Seconds = 600.0
    """Readiness budget: how long boot may take before the engine counts as failed."""
    probe_timeout_s: Seconds = 300.0
    """Bound on the config-time probe (the engine's own config code, run before boot): killed past it."""
    scheduler: Literal["default", "phased"] = "default"
    """default: the platform's own scheduler; phased: every step prefill-only or decode-only, prefill first,
    no chunked prefill (the Tenstorrent scheduling contract, emulated on the CPU engine)."""
    host_share: HostShare | None = None
    """The engine's bounded CPU share (on for engine=cpu); None leaves its processes as the appliance's."""


@dataclass(frozen=True, slots=True)
class ServingConfig:
    __pydantic_config__ = _STRICT

    host: Name = "127.0.0.1"
    """Address the engine's OpenAI API binds to."""
    port: Port = 8000
    """Port of the engine's OpenAI API (clients talk to it directly)."""
    max_context: Count | None = None
    """Longest request in tokens (vLLM --max-model-len); None uses the matrix row's maximum."""
    max_concurrency: Count | None = None
    """Concurrent sequences (vLLM --max-num-seqs, whole system); None uses the row's maximum."""
    data_parallel: Count | None = None
    """Data-parallel size; None uses the row's value."""
    max_images_per_prompt: Count | None = None
    """Images one request may carry (vLLM --limit-mm-per-prompt's image count; video is always 0). None: the
    matrix row's maximum on a vision model, no images on a text one (leave it None there)."""
    max_image_pixels: Count | None = None
    """The largest image in pixels (width x height) the processor keeps: larger ones are resized down to it, where
    the model's processor takes a pixel cap (Qwen-VL's max_pixels). None: the row's largest. It sets the tokens
    one image costs, which serving.max_context must hold."""
    api_key_env: EnvName | None = None
    """Name of the environment variable holding the OpenAI API key clients must send."""
    allowed_media_domains: tuple[HostName, ...] = ()
    """Hosts a vision model may fetch image URLs from (host names or IPv4 addresses, lower case, no scheme or port).
    Empty: images come inline only (`data:` URLs) and every remote URL is refused with a 4xx. A listed host is
    reached only at a public address, or at an address listed here too (a store on a private network: list its name
    and its address)."""
    media_redirects: bool = False
    """Follow an HTTP redirect while fetching an image; each hop is checked against allowed_media_domains again."""
    local_media_dir: Name | None = None
    """A folder whose files clients may name with `file://` URLs; None: no local file is ever read."""


@dataclass(frozen=True, slots=True)
class FeaturesConfig:
    __pydantic_config__ = _STRICT

    prefix_caching: bool = False
    """Automatic prefix caching; the model must declare it."""
    async_decode: bool = False
    """Async scheduling (decode overlap); the model must declare it."""
    sample_on_device: Literal["all", "decode_only", "off"] | None = None
    """On-device sampling mode; None takes the matrix row's value."""
    chunked_prefill: bool | None = None
    """Chunked prefill; None keeps the platform's default (TT: on only where the plugin state and model allow it)."""
    speculative: Literal["off", "ngram"] = "off"
    """Speculative decoding method (TT: only where the plugin state supports it, greedy verification)."""
    speculative_tokens: Count = 4
    """Draft tokens per step (vLLM num_speculative_tokens) when speculative is on."""
    strict: bool = True
    """A requested capability the model does not declare is an error (false: a warning)."""


@dataclass(frozen=True, slots=True)
class ControlTls:
    __pydantic_config__ = _STRICT

    cert_file: Name
    """PEM certificate (chain) the control API presents."""
    key_file: Name
    """PEM private key of that certificate; readable by its owner only (mode 0600 or 0400)."""
    ca_file: Name | None = None
    """PEM CA bundle that signed the certificate: what the appliance's own clients (probes, hooks, the gateway's
    health checks) verify it with; checked against the certificate at start."""


@dataclass(frozen=True, slots=True)
class ControlConfig:
    __pydantic_config__ = _STRICT

    host: Name = "127.0.0.1"
    """Address of the appliance's control API (loopback unless you mean it)."""
    port: Port = 8100
    """Port of the control API."""
    token_env: EnvName = "APPLIANCE_TOKEN"
    """Environment variable holding the control API token; if unset a 0600 token file is made."""
    tls: ControlTls | None = None
    """Serve the control API over TLS (off by default: loopback and plain HTTP on a single host)."""

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"


@dataclass(frozen=True, slots=True)
class SupervisorConfig:
    __pydantic_config__ = _STRICT

    health_interval_s: Seconds = 2.0
    """Seconds between /health probes once ready."""
    hang_timeout_s: Seconds = 30.0
    """A ready engine whose /health fails this long is restarted."""
    stop_grace_s: Seconds = 10.0
    """Seconds the engine gets to exit once its drain is over (its log says every request finished, or
    shutdown_timeout_s passed) before its process group is SIGKILLed."""
    shutdown_timeout_s: Seconds = 60.0
    """How long a drain waits for in-flight requests before stopping anyway."""
    max_restarts: Annotated[int, Bound(ge=0)] = 5
    """Crash restarts allowed before the appliance stays failed."""
    backoff_initial_s: Seconds = 1.0
    """First restart delay; doubles per consecutive crash."""
    backoff_max_s: Seconds = 30.0
    """Cap on the restart delay."""
    deregister_s: Annotated[float, Bound(ge=0)] = 0.0
    """Seconds between readiness turning 503 (a drain, restart or stop begins) and the engine being told to
    stop accepting: time for load balancers to take the appliance out of rotation."""
    on_device_fault: Literal["fail", "reset_once"] = "fail"
    """A device fault during boot fails at once; reset_once runs `reset_command` once and retries, then
    stays failed (quarantined) if the fault comes back."""
    reset_command: tuple[Name, ...] = ("tt-smi", "-r")
    """The board reset `reset_once` runs (argv, no shell)."""


@dataclass(frozen=True, slots=True)
class BoardsConfig:
    __pydantic_config__ = _STRICT

    interval_s: Annotated[float, Bound(ge=0.05, le=3600)] = 5.0
    """Seconds between reads of the boards the engine owns while serving: plain reads of tt-kmd's sysfs and hwmon
    files, never a device open, so the running workload is not disturbed."""
    history: Annotated[int, Bound(ge=2, le=100000)] = 720
    """Samples kept per board for the trends (720 at 5 s: the last hour); the oldest go first."""
    heartbeat_stall_s: Annotated[float, Bound(gt=0, le=3600)] = 15.0
    """A board whose ARC heartbeat (tt_heartbeat) has not advanced for this long is a device fault: the fault
    ladder stops the engine before it hangs on the board."""
    hot_margin_c: Annotated[float, Bound(ge=0, le=100)] = 10.0
    """A board within this many degrees of its trip point is hot: a warning in status, the console and the
    alerts, never a restart."""
    trip_c: Annotated[float, Bound(gt=0, le=200)] = 100.0
    """The thermal trip point where the board does not say its own (hwmon temp1_crit, tt-smi's
    therm_trip_l1_limit); set it from `tt-smi -s` limits for the site's boards."""
    tt_telemetry_url: str | None = None
    """The /metrics URL of the tt-telemetry exporter that covers this host (tt-operator deploys it); set in the
    site's file, the appliance reads the boards from it instead of sampling sysfs, and says so."""


@dataclass(frozen=True, slots=True)
class WeightsConfig:
    """Where a site's weights come from and where a host keeps them (docs: Weights a fleet can trust)."""

    __pydantic_config__ = _STRICT

    mirror: Name | None = None
    """Where `appliance fetch` gets a revision's files: a site mirror's base URL, whose files sit at
    `{mirror}/{checkpoint}/resolve/{revision}/{path}` with the revision's listing at
    `{mirror}/api/models/{checkpoint}/tree/{revision}` (the hub's own layout: a static copy behind any HTTP server
    is a mirror), or a mounted folder laid out the same way. None: the hub (https://huggingface.co)."""
    store_dir: Name | None = None
    """The host's model store, one folder per checkpoint revision; None: `weights` under paths.cache_dir."""
    locks_dir: Name | None = None
    """Where the weights locks are kept; None: `weights-locks` in the site directory (--site-dir), else under
    paths.state_dir."""
    token_file: Name | None = None
    """A file holding the hub's or the mirror's token, read when a request is made and never printed; None: the
    variable site.hf_token_env names."""
    jobs: Annotated[int, Bound(ge=1, le=32)] = 4
    """Files fetched (and hashed) at once."""


@dataclass(frozen=True, slots=True)
class SiteConfig:
    __pydantic_config__ = _STRICT

    name: Name = "default"
    """Site name shown in plans, the console and the fleet inventory."""
    min_status: Status = "experimental"
    """Lowest matrix status tier this site accepts."""
    hf_token_env: EnvName = "HF_TOKEN"
    """Environment variable holding the Hugging Face token (passed by name, never by value)."""
    namespace: DnsLabel = "tt-appliance"
    """Kubernetes namespace `render k8s` puts every manifest in (a DNS label, created by the cluster admin)."""
    description: str = ""
    """Free text for operators."""
    weights: WeightsConfig = field(default_factory=WeightsConfig)
    """Where weights come from and where they are kept (`appliance fetch`)."""


@dataclass(frozen=True, slots=True)
class PathsConfig:
    __pydantic_config__ = _STRICT

    cache_dir: Name
    """Model, tensor and generated-checkpoint caches."""
    state_dir: Name
    """Locks, tokens and boot records."""
    log_dir: Name
    """Rotating engine logs."""
    engines_dir: Name | None = None
    """Where `appliance build` puts engine environments; None: .engines beside conf/."""


@dataclass(frozen=True, slots=True)
class LengthDistribution:
    __pydantic_config__ = _STRICT

    kind: Literal["fixed", "uniform", "normal", "lognormal"] = "fixed"
    """Shape of the distribution of token counts."""
    mean: Count = 128
    """Mean token count (the value itself for `fixed`)."""
    std: Annotated[float, Bound(ge=0)] = 0.0
    """Standard deviation for `normal`/`lognormal` (in tokens)."""
    min: Count = 1
    """Lower clamp (and lower bound for `uniform`)."""
    max: Count = 4096
    """Upper clamp (and upper bound for `uniform`)."""


@dataclass(frozen=True, slots=True)
class ImageSize:
    """One size bucket of a workload's images (as `vllm bench serve`'s random-mm bucket config)."""

    __pydantic_config__ = _STRICT

    # At most 4096 a side: the images are random RGB made before the run, and a 4096² one is 50 MB in memory.
    width: Annotated[int, Bound(ge=1, le=4096)]
    """Width in pixels."""
    height: Annotated[int, Bound(ge=1, le=4096)]
    """Height in pixels."""
    weight: Annotated[float, Bound(gt=0)] = 1.0
    """Relative frequency of this size among the images."""


@dataclass(frozen=True, slots=True)
class ImageCount:
    """How many images an image request carries, with its relative weight."""

    __pydantic_config__ = _STRICT

    count: Count = 1
    """Images in the request."""
    weight: Annotated[float, Bound(gt=0)] = 1.0
    """Relative frequency of this count among the image requests."""


@dataclass(frozen=True, slots=True)
class ImagesConfig:
    """Image requests of a workload: random RGB images sent as base64 `data:` URLs in chat content parts."""

    __pydantic_config__ = _STRICT

    share: Share = 0.0
    """Share of requests that carry images. An image needs the chat API, so an image request is always sent to
    /v1/chat/completions whatever `chat_share` drew for it: completions are (1 - share) × (1 - chat_share)."""
    # Emptiness is refused by config.constraints: pydantic's own length check would add a second, confusing
    # problem (`at least 1 item`) beside any bad entry.
    per_request: tuple[ImageCount, ...] = (ImageCount(),)
    """Images per image request: a list of `{count, weight}` (one entry for a fixed count)."""
    sizes: tuple[ImageSize, ...] = (ImageSize(224, 224),)
    """Image sizes: a list of `{width, height, weight}` in pixels, each drawn with its relative weight."""
    reuse_share: Share = 0.0
    """Share of images that repeat, byte for byte, an image of an earlier request (the engine's processor and
    encoder caches see the same image again)."""
    format: Literal["png", "jpeg"] = "png"
    """Encoding of the images: PNG (random pixels do not compress, so as large as raw RGB) or JPEG (quality 90)."""


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    """A request mix: what the fleet expects in production, replayed by the load tester."""

    __pydantic_config__ = _STRICT

    name: str
    """Workload name (the conf/workload option)."""
    arrival: Literal["poisson", "concurrency"] = "concurrency"
    """Open loop with Poisson arrivals at `rate_per_s`, or a closed loop of `concurrency` streams."""
    rate_per_s: Annotated[float, Bound(gt=0)] = 1.0
    """Mean arrival rate for `poisson`."""
    concurrency: Count = 4
    """Concurrent streams for `concurrency`."""
    prompt_tokens: LengthDistribution = field(default_factory=LengthDistribution)
    """Prompt length in tokens (exact: prompts are built with the server's tokenizer)."""
    output_tokens: LengthDistribution = field(default_factory=LengthDistribution)
    """Generated tokens per request (max_tokens, with EOS ignored)."""
    chat_share: Share = 1.0
    """Share of requests sent to /v1/chat/completions (the rest to /v1/completions)."""
    stream: bool = True
    """Stream responses (needed for TTFT and inter-token latency)."""
    structured_output_share: Share = 0.0
    """Share of requests with a JSON-schema response format."""
    logprobs_share: Share = 0.0
    """Share of requests asking for top logprobs."""
    penalties_share: Share = 0.0
    """Share of requests with presence/frequency/repetition penalties."""
    shared_prefix_share: Share = 0.0
    """Share of requests starting with a common prefix (prefix-cache friendly)."""
    shared_prefix_tokens: Annotated[int, Bound(ge=0)] = 0
    """Length of that common prefix."""
    images: ImagesConfig = field(default_factory=ImagesConfig)
    """Image requests (none by default)."""
    slo_ttft_ms: Annotated[float, Bound(gt=0)] = 2000.0
    """Goodput SLO: time to first token."""
    slo_itl_ms: Annotated[float, Bound(gt=0)] = 200.0
    """Goodput SLO: mean inter-token latency of a request."""
    seed: Annotated[int, Bound(ge=0)] = 0
    """Seed for arrivals, lengths and feature draws (a workload replays identically)."""
    max_requests: Count = 200
    """Upper bound on requests sent in one run (`loadtest --max-requests` overrides it)."""
    duration_s: Annotated[float, Bound(gt=0)] = 60.0
    """Window in which requests are sent (`loadtest --duration` overrides it); in-flight ones may finish."""


@dataclass(frozen=True, slots=True)
class GatewayModel:
    """One model's admission at the gateway, where it differs from the site's."""

    __pydantic_config__ = _STRICT

    ttft_slo_s: Seconds | None = None
    """This model's time-to-first-token promise; None: gateway.ttft_slo_s."""
    max_concurrency: Count | None = None
    """Requests each server of this model is given at once; None: the concurrency its appliance's plan says it
    runs (max_concurrency, per slot). Never above it: the gateway refuses to start."""


@dataclass(frozen=True, slots=True)
class GatewayClient:
    """One client of the site's OpenAI endpoint: its API key (by file) and its limits."""

    __pydantic_config__ = _STRICT

    key_file: Name
    """A file holding the client's API key (one line, owner-only: mode 0600 or 0400); read at start, never printed."""
    rate_per_s: Count = 10
    """Requests per second the client may send; past it: 429 with Retry-After."""
    max_concurrency: Count = 8
    """Requests the client may have in flight at once; past it: 429 with Retry-After."""
    priority: Name | None = None
    """The client's priority class (one of gateway.classes); None: the class its header asks for, else the
    default."""


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """`appliance gateway`: admission in front of a site (docs: Traffic a site absorbs)."""

    __pydantic_config__ = _STRICT

    ttft_slo_s: Seconds = 2.0
    """The time to first token the site promises. A request waits for a free engine slot at most
    ttft_slo_s × queue_share; past it, it gets 429 with Retry-After rather than a late answer."""
    queue_share: Annotated[float, Bound(gt=0, le=1)] = 0.5
    """The share of ttft_slo_s a request may spend queued at the gateway; the rest is the engine's prefill."""
    models: Mapping[Name, GatewayModel] = field(default_factory=dict)
    """Per served model name: its own SLO or per-server concurrency."""
    max_body_kib: Annotated[int, Bound(ge=16, le=65536)] = 1024
    """The largest request body accepted (KiB); a larger one gets 413. The gateway reads the whole body to route
    by its `model`, so this is also each request's buffer."""
    request_timeout_s: Seconds = 10.0
    """Time a client has to send a whole request (headers and body); past it: 408 (a slowloris client)."""
    priority_header: HeaderName = "X-Priority"
    """The request header that names a priority class."""
    classes: tuple[Name, ...] = ("high", "normal", "low")
    """Priority classes, admitted in this order when requests queue; a class not listed gets 400."""
    default_class: Name = "normal"
    """The class of a request that names none."""
    sheddable: tuple[Name, ...] = ("low",)
    """Classes refused at once (429) while their model has requests queued: shed first under saturation."""
    clients: Mapping[Name, GatewayClient] = field(default_factory=dict)
    """API keys of the site's endpoint, by client name. Empty: the endpoint is open; otherwise a request without
    a listed key gets 401."""


@dataclass(frozen=True, slots=True)
class ApplianceConfig:
    __pydantic_config__ = _STRICT

    model: ModelConfig
    mesh: MeshConfig
    precision: PrecisionConfig
    engine: EngineConfig
    serving: ServingConfig
    features: FeaturesConfig
    control: ControlConfig
    supervisor: SupervisorConfig
    site: SiteConfig
    paths: PathsConfig
    workload: WorkloadConfig
    boards: BoardsConfig = field(default_factory=BoardsConfig)
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    """Admission at the site's gateway (`appliance gateway`)."""
    tt: Mapping[str, Any] = field(default_factory=dict)
    """Extra keys for the plugin's --additional-config '{"tt": ...}'; each key is validated."""


@dataclass(frozen=True, slots=True)
class ComposedConfig:
    """A parsed config plus where each value came from."""

    config: ApplianceConfig
    choices: Mapping[str, str]
    """Selected option per config group, e.g. {"model": "llama", "mesh": "t3k"}."""
    provenance: Mapping[str, str]
    """Dotted key -> the file (or "command line") that set its value last."""
    overrides: tuple[str, ...]
    config_hash: str
    """Short sha256 of the resolved config; equal configs hash equally on every host."""
    site_dir: str | None = None
    """The site directory composed (--site-dir or APPLIANCE_SITE_DIR), None for the shipped sites."""
