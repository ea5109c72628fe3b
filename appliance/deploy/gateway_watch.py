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

Per priority class there is no series: the exporter publishes a stick table's size and use, not its entries, and
HAProxy 2.6 cannot count a queue timeout in a table (`http-after-response` has no `sc-inc-gpc`).
"""

from __future__ import annotations

from typing import Any, Protocol
from urllib.parse import urlsplit

from appliance.deploy.board_rules import alert
from appliance.deploy.gateway_admission import MODEL_BACKEND
from appliance.errors import ConfigError, Problem

__all__ = ["GatewayAlertOptions", "admitted", "gateway_alerts", "gateway_scrape", "models_of", "queued", "shed"]


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


def gateway_scrape(site: str, addresses: tuple[str, ...]) -> dict[str, Any]:
    """The scrape config of the site's gateways (`host:port` each, their `--metrics-listen`); ConfigError naming
    `--gateway` for an address without a host or port."""
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
    return {
        "job_name": f"{site}-gateway",
        "static_configs": [{"targets": list(addresses)}],
        "metric_relabel_configs": [model],
    }


def models_of(site: str) -> str:
    """The selector of the site's model backends."""
    return f'job="{site}-gateway",model!=""'


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
    """A model shedding more than a share of its requests; a model whose queue never emptied."""
    on = models_of(site)
    offered = f"rate(haproxy_backend_http_requests_total{{{on}}}[{o.rate_window}])"
    return [
        alert(
            "ApplianceGatewayShedding",
            f"({shed(on, o.rate_window)}) / {offered} > {o.gateway_shed_share:g}",
            o.load_for,
            "warning",
            "gateway {{ $labels.instance }}: {{ $labels.model }} sheds {{ $value | humanizePercentage }} of its "
            "requests",
            "Clients of this model get 429 with Retry-After: its engines are full and requests wait past the bound. "
            "If the load is expected, add an appliance serving the model; otherwise find the client on the "
            "dashboard and hold it to a rate (gateway.clients).",
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
