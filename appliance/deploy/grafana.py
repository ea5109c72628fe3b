"""A site's Grafana dashboard: the series `appliance render prometheus` scrapes, one panel per question.

Built with Grafana's own foundation SDK (its types are generated from Grafana's dashboard schema),
so the JSON model is the schema's, not a hand-kept copy. Queries select the site's two jobs:
`<site>` (the appliance's series) and `<site>-engine` (vLLM's, relayed by the control API).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["render_grafana"]

_QUANTILES = (0.5, 0.95, 0.99)


def render_grafana(site: str) -> str:
    """The dashboard's JSON model for the site whose job is `site`."""
    from grafana_foundation_sdk.builders import dashboard as board
    from grafana_foundation_sdk.cog.encoder import JSONEncoder

    own, engine = f'job="{site}"', f'job="{site}-engine"'
    panels = [
        _timeline("State per appliance", f"appliance_engine_state{{{own}}} == 1",
                  "{{appliance}} {{appliance_engine_state}}"),
        _series("Load: requests running and waiting", "short", (f"appliance_requests_running{{{own}}}",
                "{{appliance}} running"), (f"appliance_requests_waiting{{{own}}}", "{{appliance}} waiting")),
        _series("KV-cache usage", "percentunit", (f"appliance_kv_cache_usage_ratio{{{own}}}", "{{appliance}}")),
        _latency("Time to first token", f"vllm:time_to_first_token_seconds_bucket{{{engine}}}"),
        _latency("Inter-token latency", f"vllm:inter_token_latency_seconds_bucket{{{engine}}}"),
        _series("Decode stalls: share of inter-token time", "percentunit",
                (f"rate(appliance_decode_stall_seconds_total{{{own}}}[$__rate_interval]) / "
                 f"rate(appliance_decode_seconds_total{{{own}}}[$__rate_interval])", "{{appliance}}")),
        _series("Goodput: share of requests within the SLO", "percentunit",
                (f"appliance_goodput_ratio{{{own}}}", "{{appliance}} {{slo}}")),
        _series("Restarts (per hour)", "short",
                (f"increase(appliance_engine_restarts_total{{{own}}}[1h])", "{{appliance}}")),
        _series("Capabilities the engine runs otherwise than planned", "short",
                (f"appliance_capability_differs{{{own}}}", "{{appliance}} {{capability}}")),
        _timeline("Generation per appliance",
                  f'appliance_generation_info{{{own},role=~"current|upgrading"}} == 1',
                  "{{appliance}} {{role}} {{generation}}"),
    ]  # fmt: skip
    built = (
        board.Dashboard(f"TT appliances: {site}")
        .uid(f"tt-appliance-{site}"[:40])
        .tags(["tt-appliance"])
        .refresh("30s")
        .time("now-3h", "now")
        .with_variable(board.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
    )
    for panel in panels:
        built = built.with_panel(panel)
    return json.dumps(built.build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def _datasource() -> Any:
    from grafana_foundation_sdk.models.dashboard import DataSourceRef

    return DataSourceRef(type_val="prometheus", uid="${datasource}")


def _query(expr: str, legend: str, ref: str) -> Any:
    from grafana_foundation_sdk.builders import prometheus

    return prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref)


def _series(title: str, unit: str, *queries: tuple[str, str]) -> Any:
    from grafana_foundation_sdk.builders import timeseries

    panel = timeseries.Panel().title(title).unit(unit).datasource(_datasource()).height(8).span(12)
    for i, (expr, legend) in enumerate(queries):
        panel = panel.with_target(_query(expr, legend, chr(ord("A") + i)))
    return panel


def _latency(title: str, buckets: str) -> Any:
    queries = [
        (f"histogram_quantile({q}, sum by (appliance, le) (rate({buckets}[$__rate_interval])))", f"{{{{appliance}}}} "
         f"p{q * 100:g}")
        for q in _QUANTILES
    ]  # fmt: skip
    return _series(f"{title} (p50, p95, p99)", "s", *queries)


def _timeline(title: str, expr: str, legend: str) -> Any:
    """A full-width state timeline: one row per appliance."""
    from grafana_foundation_sdk.builders import statetimeline

    return (
        statetimeline.Panel().title(title).datasource(_datasource()).height(6).span(24)
        .with_target(_query(expr, legend, "A"))
    )  # fmt: skip
