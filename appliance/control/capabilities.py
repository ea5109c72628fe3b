"""Requested versus effective, as /state and /load carry it: read from the engine once per ready boot.

The effective side comes from the engine's own log (its config line and warnings), read once per ready boot, and
its `vllm:cache_config_info` gauge, added when GET /load first hands over a /metrics page.
"""

from __future__ import annotations

from appliance.control.documents import CapabilitiesDocument
from appliance.control.sources import Supervised
from appliance.observe.effective import Capabilities, differences, effective, requested, with_metrics
from appliance.runtime.lifecycle import EngineState

__all__ = ["CapabilityView"]

_LOG_SCAN = 5000  # engine lines searched for the boot's config line and warnings


class CapabilityView:
    """The plan's capabilities, and the engine's as of its latest ready boot.

    It never scrapes: GET /load hands it the /metrics page it just read (the cache-config gauge),
    so watching capabilities costs the engine nothing more.
    """

    def __init__(self, sup: Supervised) -> None:
        self._sup = sup
        self._plan = sup.plan
        self._requested = requested(sup.plan)
        self._ready_at: float | None = None
        self._with_page = False
        self._effective: Capabilities | None = None

    def document(self, metrics_page: str | None = None) -> CapabilitiesDocument:
        if self._sup.plan is not self._plan:  # an upgrade switched the plan: judge against the new one
            self._plan, self._requested = self._sup.plan, requested(self._sup.plan)
        ready_at = next((e.at for e in reversed(self._sup.snapshot().events) if e.state is EngineState.READY), None)
        if ready_at is not None and ready_at != self._ready_at:
            self._effective = effective(self._sup.log.tail(_LOG_SCAN), metrics_page)
            self._ready_at, self._with_page = ready_at, metrics_page is not None
        elif self._effective is not None and metrics_page is not None and not self._with_page:
            # The boot's log lines may have left the kept tail by now: add the page to what they said.
            self._effective, self._with_page = with_metrics(self._effective, metrics_page), True
        found = () if self._effective is None else differences(self._requested, self._effective)
        return CapabilitiesDocument(
            requested=_values(self._requested),
            effective=None if self._effective is None else _values(self._effective),
            sources={} if self._effective is None else dict(self._effective.sources),
            differences=tuple(p.message for p in found),
        )

    def differing(self) -> tuple[str, ...]:
        """The capabilities (and engine.env variables) the engine runs otherwise than the plan, as of the latest
        `document()`."""
        return () if self._effective is None else tuple(p.key for p in differences(self._requested, self._effective))


def _values(caps: Capabilities) -> dict[str, object]:
    return {
        "prefix_caching": caps.prefix_caching,
        "chunked_prefill": caps.chunked_prefill,
        "async_scheduling": caps.async_scheduling,
        "speculative": caps.speculative,
        "max_model_len": caps.max_model_len,
        "max_num_seqs": caps.max_num_seqs,
        "max_num_batched_tokens": caps.max_num_batched_tokens,
        "compact_json": caps.compact_json,
        "data_parallel": caps.data_parallel,
        "kv_cache_memory_bytes": caps.kv_cache_memory_bytes,
    }
