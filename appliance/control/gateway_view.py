"""The site gateway as the console reads it: each model's queue now, its admitted and shed rates over the last polls.

`appliance gateway --metrics-listen` runs HAProxy's own Prometheus exporter, one backend per model named
`model:<served name>`; appliance.deploy.gateway_watch says what each series counts. The console has no server to
compute for it and may not import `appliance.deploy` or prometheus_client, so the page is read and the rates are
computed here, and the console only renders them. The prefix is spelled again (deploy is a sibling layer, not
importable from here); tests/control/test_gateway_view.py holds the two equal.

Rates come from counter deltas between readings, over the intervals of the readings kept: a counter lower than in
the reading before was reset (the gateway restarted), so that interval counts for nothing rather than negative.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from types import MappingProxyType

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["MODEL_BACKEND", "GatewayReading", "ModelCounters", "ModelTraffic", "gateway_traffic", "read_gateway"]

MODEL_BACKEND = "model:"
_SERIES = {
    "haproxy_backend_current_queue": "queued",
    "haproxy_backend_loadbalanced_total": "admitted",
    "haproxy_backend_requests_denied_total": "denied",
    "haproxy_backend_connection_errors_total": "failed",
}


@dataclass(frozen=True, slots=True)
class ModelCounters:
    """One model backend's series in one reading: the queue now, the rest counters since the gateway started."""

    queued: float = 0.0
    admitted: float = 0.0
    denied: float = 0.0
    """Shed at once: a sheddable class while the model had requests queued."""
    failed: float = 0.0
    """Shed after the wait bound (HAProxy counts a queue timeout as a failed connection)."""


@dataclass(frozen=True, slots=True)
class GatewayReading:
    at: float
    """When it was read, in monotonic seconds (only differences between readings mean anything)."""
    models: Mapping[str, ModelCounters]
    """By backend name without the prefix: the served name, with `/ @ +` as `_`."""


@dataclass(frozen=True, slots=True)
class ModelTraffic:
    """What the console shows of one model; a rate is None when no interval counted (one reading, or a reset)."""

    model: str
    queued: int
    admitted_per_s: float | None
    shed_per_s: float | None


def read_gateway(page: str, at: float) -> GatewayReading:
    """The model backends' series on an exporter page; other proxies and series are left out.

    ValueError when the page is not the Prometheus text format.
    """
    fields: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            proxy, field = sample.labels.get("proxy", ""), _SERIES.get(sample.name)
            if field is not None and proxy.startswith(MODEL_BACKEND):
                fields.setdefault(proxy.removeprefix(MODEL_BACKEND), {})[field] = sample.value
    return GatewayReading(at, MappingProxyType({model: ModelCounters(**f) for model, f in fields.items()}))


def gateway_traffic(readings: Sequence[GatewayReading]) -> tuple[ModelTraffic, ...]:
    """Each model of the newest reading, by name: its queue now, its admitted and shed rates over the readings."""
    if not readings:
        return ()
    return tuple(
        ModelTraffic(model, int(now.queued), _rate(readings, model, _admitted), _rate(readings, model, _shed))
        for model, now in sorted(readings[-1].models.items())
    )


def _rate(
    readings: Sequence[GatewayReading], model: str, moved: Callable[[ModelCounters, ModelCounters], float | None]
) -> float | None:
    """Per second over the intervals between consecutive readings that hold the model and saw no reset."""
    total = elapsed = 0.0
    for before, after in pairwise(readings):
        was, now = before.models.get(model), after.models.get(model)
        delta = None if was is None or now is None else moved(was, now)
        if delta is not None:
            total, elapsed = total + delta, elapsed + after.at - before.at
    return total / elapsed if elapsed > 0 else None


def _delta(was: float, now: float) -> float | None:
    return now - was if now >= was else None


def _admitted(was: ModelCounters, now: ModelCounters) -> float | None:
    return _delta(was.admitted, now.admitted)


def _shed(was: ModelCounters, now: ModelCounters) -> float | None:
    denied, failed = _delta(was.denied, now.denied), _delta(was.failed, now.failed)
    return None if denied is None or failed is None else denied + failed
