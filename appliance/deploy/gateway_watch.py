"""The site's gateway as Prometheus and Grafana see it: HAProxy's own exporter, scraped as `<site>-gateway`.

The exporter (HAProxy 2.6's promex, on `appliance gateway --metrics-listen`) publishes per backend, labelled
`proxy`; each model's backend is `model:<served name>` (gateway_admission), which the scrape copies into a `model`
label. Per model:

- admitted: `haproxy_backend_loadbalanced_total`, each time an engine was chosen for a request (on arrival, or when
  it left the queue);
- queued: `haproxy_backend_current_queue`, requests waiting for an engine slot now;
- shed (answered 429): `haproxy_backend_requests_denied_total`, a sheddable class refused at once, plus
  `haproxy_backend_connection_errors_total`, a request that waited the whole bound (HAProxy counts a queue timeout as
  a failed connection, as it does a connection an engine refused after every retry: both answered 429);
- offered: `haproxy_backend_http_requests_total`, every request routed to the model.

Per priority class the exporter has no series (it publishes a stick table's size and use, not its entries): the
gateway counts its request log instead (gateway_classes), served on the same listener at `/metrics/classes` and
scraped as `<site>-gateway-classes`, `appliance_gateway_requests_total{model, class, outcome}` and
`appliance_gateway_queue_seconds{model, class}`. The shedding alert reads those, so it names the class.
"""

from __future__ import annotations

from typing import Any, Protocol
from urllib.parse import urlsplit

from appliance.deploy.board_rules import alert
from appliance.deploy.gateway_admission import MODEL_BACKEND
from appliance.deploy.gateway_classes import CLASSES_PATH
from appliance.errors import ConfigError, Problem

__all__ = [
    "GatewayAlertOptions",
    "admitted",
    "by_class",
    "classes_of",
    "gateway_alerts",
    "gateway_scrapes",
    "models_of",
    "queued",
    "shed",
]


class GatewayAlertOptions(Protocol):
    """What the gateway rules read of `render prometheus`'s options (`AlertOptions` is one)."""

    @property
    def load_for(self) -> str: ...
    @property
    def rate_window(self) -> str: ...
    @property
    def gateway_shed_share(self) -> float: ...
    @property
    def gateway_queue_for(self) -> str: ...


def gateway_scrapes(site: str, addresses: tuple[str, ...]) -> list[dict[str, Any]]:
    """The scrape configs of the site's gateways (`host:port` each, their `--metrics-listen`): the exporter and the
    per-class counters; ConfigError naming `--gateway` for an address without a host or port."""
    for address in addresses:
        parts = urlsplit(f"//{address}")
        try:
            port = parts.port
        except ValueError:
            port = None
        if not parts.hostname or port is None:
            fix = "Pass the gateway's --metrics-listen address, e.g. --gateway 10.0.4.20:8405"
            raise ConfigError(
                (Problem(code="alert-option", key="--gateway", message=f"{address!r} is not host:port", fix=fix),)
            )
    model = {"source_labels": ["proxy"], "regex": f"{MODEL_BACKEND}(.+)", "target_label": "model"}
    targets = [{"targets": list(addresses)}]
    return [
        {"job_name": f"{site}-gateway", "static_configs": targets, "metric_relabel_configs": [model]},
        {"job_name": f"{site}-gateway-classes", "metrics_path": CLASSES_PATH, "static_configs": targets},
    ]


def models_of(site: str) -> str:
    """The selector of the site's model backends."""
    return f'job="{site}-gateway",model!=""'


def classes_of(site: str) -> str:
    """The selector of the site's per-class counters."""
    return f'job="{site}-gateway-classes"'


def by_class(on: str, window: str, outcome: str) -> str:
    """Requests per second per job, gateway, model and class, of the outcomes `outcome` matches (`outcome="shed"`)."""
    return f"sum by (job, instance, model, class) (rate(appliance_gateway_requests_total{{{on},{outcome}}}[{window}]))"


def admitted(on: str, window: str) -> str:
    return f"rate(haproxy_backend_loadbalanced_total{{{on}}}[{window}])"


def queued(on: str) -> str:
    return f"haproxy_backend_current_queue{{{on}}}"


def shed(on: str, window: str) -> str:
    return (
        f"rate(haproxy_backend_requests_denied_total{{{on}}}[{window}]) + "
        f"rate(haproxy_backend_connection_errors_total{{{on}}}[{window}])"
    )


def gateway_alerts(site: str, o: GatewayAlertOptions) -> list[dict[str, Any]]:
    """A model shedding more than a share of one class's requests; a model whose queue never emptied."""
    on, counted = models_of(site), classes_of(site)
    # Of the requests offered to the model: one refused before (a bad key, class or body) is not.
    shed_share = (
        by_class(counted, o.rate_window, 'outcome="shed"')
        + " / "
        + by_class(counted, o.rate_window, 'outcome!="refused"')
    )
    return [
        alert(
            "ApplianceGatewayShedding",
            f"{shed_share} > {o.gateway_shed_share:g}",
            o.load_for,
            "warning",
            "gateway {{ $labels.instance }}: {{ $labels.model }} sheds {{ $value | humanizePercentage }} of its "
            "{{ $labels.class }} requests",
            "Clients of this model get 429 with Retry-After in this class: its engines are full and requests wait "
            "past the bound (or, a sheddable class, are refused while others queue). A sheddable class shedding "
            "alone is the site keeping its promise to the others; a higher class shedding is not. If the load is "
            "expected, add an appliance serving the model; otherwise find the client on the dashboard and hold it "
            "to a rate (gateway.clients).",
        ),
        alert(
            "ApplianceGatewayQueueSaturated",
            f"{queued(on)} > 0",
            o.gateway_queue_for,  # one evaluation with an empty queue starts the hold afresh
            "warning",
            "gateway {{ $labels.instance }}: {{ $labels.model }} has had requests queued for " + o.gateway_queue_for,
            "Every engine of this model has been full the whole time: admitted requests spend part of their TTFT "
            "waiting and the next burst is shed. Add capacity for the model, or lower its load.",
        ),
    ]
