"""GET /metrics: the appliance's own Prometheus series, the ones a fleet alerts on.

vLLM's /metrics is per engine and knows nothing of the lifecycle, the plugin's adjustments or the
workload's SLO; these series do. Lifecycle series follow the supervisor's events; the rest are
read at scrape time from what GET /load keeps (the 60 s window, the scheduler log, the
capabilities), so a scrape is also what brings them up to date. Names follow Prometheus's
conventions (base units, `_seconds`, `_ratio`, `_total`), checked by `promtool check metrics` in
the tests. `appliance render prometheus` alerts on them and `appliance render grafana` plots them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client import Enum as EnumMetric
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.exposition import generate_latest

from appliance.control.capabilities import CapabilityView
from appliance.control.documents import LoadDocument, SummaryDocument
from appliance.control.load import LoadTracker
from appliance.control.sources import Supervised, Upgrades
from appliance.control.upgrade_documents import GenerationDocument, UpgradeDocument
from appliance.plan import LaunchPlan
from appliance.preflight.weights_check import verified
from appliance.runtime.lifecycle import EngineEvent, EngineState
from appliance.runtime.tensor_cache import cache_state
from appliance.weights.errors import WeightsError

__all__ = ["ApplianceMetrics"]

_BOOT = (EngineState.STARTING, EngineState.LOADING, EngineState.WARMING)


class ApplianceMetrics:
    """The appliance's series, in a registry of its own (no global state)."""

    def __init__(
        self,
        sup: Supervised,
        load: LoadTracker,
        capabilities: CapabilityView,
        clock: Callable[[], float] = time.time,
        upgrades: Upgrades | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        self._sup, self._load, self._capabilities, self._clock = sup, load, capabilities, clock
        self._upgrades = upgrades
        self._latest: LoadDocument | None = None
        self._state = EnumMetric(
            "appliance_engine_state",
            "Engine lifecycle state",
            states=[s.value for s in EngineState],
            registry=self.registry,
        )
        self._ready = Gauge("appliance_engine_ready", "1 when the engine is ready", registry=self.registry)
        self._restarts = Counter("appliance_engine_restarts", "Crash restarts", registry=self.registry)
        self._phase = Gauge(
            "appliance_boot_phase_seconds", "Duration of the last boot's phases", ["phase"], registry=self.registry
        )
        self._faults = Counter(
            "appliance_faults",
            "Boots the fault ladder ended, by rule and whether the device was at fault",
            ["rule", "device"],
            registry=self.registry,
        )
        snap = sup.snapshot()
        self._state.state(snap.state.value)
        self._ready.set(1 if snap.state is EngineState.READY else 0)
        self._restarts.inc(snap.restarts)
        self._entered: float | None = None
        for event in snap.events:  # what happened before this API was made (a slot's, a recorded appliance's)
            self._time_phase(event)
        self._started = clock()
        self.registry.register(self)
        sup.subscribe(self.on_event)

    async def page(self) -> bytes:
        """The exposition text, after bringing the window, the scheduler view and the capabilities up to date."""
        self._latest = await self._load.document()
        return generate_latest(self.registry)

    def on_event(self, event: EngineEvent) -> None:
        self._time_phase(event)
        self._state.state(event.state.value)
        self._ready.set(1 if event.state is EngineState.READY else 0)
        if event.state is EngineState.RESTARTING and event.previous is not EngineState.FAILED:
            self._restarts.inc()
        fault = self._sup.snapshot().fault
        if fault is not None and event.state in (EngineState.RESTARTING, EngineState.FAILED):
            self._faults.labels(fault.rule, str(fault.device).lower()).inc()

    def _time_phase(self, event: EngineEvent) -> None:
        if event.previous in _BOOT and self._entered is not None:
            self._phase.labels(event.previous.value).set(event.at - self._entered)
        self._entered = event.at

    def collect(self) -> Iterator[Metric]:
        """The series read at scrape time (the registry calls this; it is a prometheus_client Collector)."""
        plan = self._sup.plan  # read at each scrape: an upgrade switches it
        config = InfoMetricFamily("appliance_config", "The running config")
        config.add_metric(
            [],
            {
                "config_hash": plan.config_hash,
                "site": plan.site,
                "checkpoint": plan.checkpoint,
                "mesh": plan.mesh,
                "engine": plan.engine,
            },
        )
        yield config
        if self._upgrades is not None:
            yield from _generations(*self._upgrades.generations())
        yield from self._lifecycle()
        yield from self._stalls()
        if self._latest is not None and self._latest.summary is not None:
            yield from self._load_now(self._latest.summary)
        yield from self._goodput()
        differs = GaugeMetricFamily(
            "appliance_capability_differs",
            "1 for each capability the engine runs otherwise than the plan requested",
            labels=["capability"],
        )
        for name in self._capabilities.differing():
            differs.add_metric([name], 1.0)
        yield differs
        yield from _stored(plan)

    def _lifecycle(self) -> Iterator[Metric]:
        snap = self._sup.snapshot()
        entered = snap.events[-1].at if snap.events else self._started
        yield _gauge("appliance_engine_state_seconds", "Time in the current lifecycle state", self._clock() - entered)
        draining = float(snap.state is EngineState.DRAINING)
        yield _gauge("appliance_engine_draining", "1 while a drain is in progress", draining)
        yield _gauge(
            "appliance_quarantined",
            "1 when a device fault came back after the reset: hands needed",
            float(snap.quarantined),
        )
        boot = snap.boot
        if boot is not None:
            yield _gauge("appliance_boot_elapsed_seconds", "Time since the boot under way started", boot.elapsed_s)
        if boot is not None and boot.expected_s is not None:
            yield _gauge(
                "appliance_boot_expected_seconds", "Median boot time of this config on this host", boot.expected_s
            )
        if boot is not None and boot.eta_s is not None:
            yield _gauge("appliance_boot_eta_seconds", "Boot time left by the record (0 once over it)", boot.eta_s)

    def _stalls(self) -> Iterator[Metric]:
        stalls = self._load.stalls()
        yield CounterMetricFamily(
            "appliance_decode_stalls",
            "Prefill-only steps that held running decodes back (from the engine's per-step log)",
            value=stalls.stalls,
        )
        yield CounterMetricFamily(
            "appliance_decode_stall_seconds", "Time of the steps that held decodes back", value=stalls.stall_s
        )
        yield CounterMetricFamily(
            "appliance_decode_seconds",
            "Time of the steps while streams decoded, stalls included (the inter-token time)",
            value=stalls.decode_s,
        )

    def _load_now(self, summary: SummaryDocument) -> Iterator[Metric]:
        for name, text, value in (
            ("appliance_requests_running", "Requests the engine is decoding", summary.running),
            ("appliance_requests_waiting", "Requests queued for the engine", summary.waiting),
            ("appliance_kv_cache_usage_ratio", "KV-cache blocks in use, 0-1", summary.kv_usage),
        ):
            if value is not None:
                yield _gauge(name, text, value)

    def _goodput(self) -> Iterator[Metric]:
        slo = self._sup.plan.resolved
        ttft, itl = slo.get("workload.slo_ttft_ms"), slo.get("workload.slo_itl_ms")
        if ttft is None or itl is None:
            return
        targets = GaugeMetricFamily("appliance_slo_seconds", "The workload's goodput SLO", labels=["slo"])
        targets.add_metric(["ttft"], float(ttft) / 1000)
        targets.add_metric(["tpot"], float(itl) / 1000)
        yield targets
        shares = GaugeMetricFamily(
            "appliance_goodput_ratio", "Share of the last minute's requests within the SLO", labels=["slo"]
        )
        for name, share in self._load.goodput(float(ttft) / 1000, float(itl) / 1000).items():
            shares.add_metric([name], share)
        yield shares


def _stored(plan: LaunchPlan) -> Iterator[Metric]:
    """The pinned checkpoint against its lock (a boot's quick check: sizes and the last verification's stamp, no
    hashing) and the tensor cache's build, read at each scrape: files changed under a serving engine show here."""
    if plan.weights is not None:
        weights = plan.weights
        try:
            verified(weights, full=False)
            ok = 1.0
        except WeightsError:
            ok = 0.0
        family = GaugeMetricFamily(
            "appliance_weights_verified",
            "1 while the pinned checkpoint's files match its weights lock",
            labels=["checkpoint", "revision"],
        )
        family.add_metric([weights.checkpoint, weights.revision], ok)
        yield family
    if plan.tensor_cache is not None:
        yield _gauge(
            "appliance_tensor_cache_built",
            "1 once a boot built this plan's tensor cache and reached ready",
            float(cache_state(plan.tensor_cache).built),
        )


def _generations(
    current: GenerationDocument, previous: GenerationDocument | None, last: UpgradeDocument | None
) -> Iterator[Metric]:
    """The generation serving, the one a rollback returns to and the one an upgrade is trying; whether an upgrade
    runs, and whether the last one ended otherwise than passed (rolled back, interrupted, its rollback failed)."""
    roles = {"current": current, "previous": previous}
    running = last is not None and last.outcome == "running"
    if last is not None and running:
        roles["upgrading"] = last.new
    info = InfoMetricFamily(
        "appliance_generation", "The appliance's generations by role (config hashes)", labels=["role"]
    )
    for role, generation in roles.items():
        if generation is not None:
            info.add_metric([role], {"generation": generation.id})
    yield info
    yield _gauge("appliance_upgrade_running", "1 while an upgrade is under way (out of rotation)", float(running))
    failed = last is not None and last.outcome not in ("running", "passed")
    yield _gauge(
        "appliance_upgrade_failed",
        "1 when the last upgrade did not pass (rolled back, interrupted, or its rollback failed)",
        float(failed),
    )


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)
