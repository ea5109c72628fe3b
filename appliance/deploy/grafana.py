"""A site's Grafana dashboard: the series `appliance render prometheus` scrapes, one panel per question.

Built with Grafana's own foundation SDK (its types are generated from Grafana's dashboard schema),
so the JSON model is the schema's, not a hand-kept copy. Queries select the site's two jobs:
`<site>` (the appliance's series) and `<site>-engine` (vLLM's, relayed by the control API), and with a gateway
`<site>-gateway` (HAProxy's exporter, per model: gateway_watch).
"""

from __future__ import annotations

import json
from typing import Any

from appliance.deploy.gateway_watch import admitted, by_class, classes_of, models_of, queued, shed

__all__ = ["render_grafana"]

_QUANTILES = (0.5, 0.95, 0.99)


def render_grafana(site: str, tt_telemetry: bool = False, *, gateway: bool = False) -> str:
    """The dashboard's JSON model for the site whose job is `site`, with a row of its boards (from the exporter's
    series when the site file names tt-telemetry exporters, `<site>-tt-telemetry`, else the appliances' own) and,
    with a `gateway`, a row of what it admits, queues and sheds per model."""
    from grafana_foundation_sdk.builders import dashboard as board
    from grafana_foundation_sdk.cog.encoder import JSONEncoder

    own, engine = f'job="{site}"', f'job="{site}-engine"'
    panels = [
        _timeline(
            "State per appliance", f"appliance_engine_state{{{own}}} == 1", "{{appliance}} {{appliance_engine_state}}"
        ),
        _series(
            "Load: requests running and waiting",
            "short",
            (f"appliance_requests_running{{{own}}}", "{{appliance}} running"),
            (f"appliance_requests_waiting{{{own}}}", "{{appliance}} waiting"),
        ),
        _series("KV-cache usage", "percentunit", (f"appliance_kv_cache_usage_ratio{{{own}}}", "{{appliance}}")),
        _latency("Time to first token", f"vllm:time_to_first_token_seconds_bucket{{{engine}}}"),
        _latency("Inter-token latency", f"vllm:inter_token_latency_seconds_bucket{{{engine}}}"),
        _series(
            "Decode stalls: share of inter-token time",
            "percentunit",
            (
                f"rate(appliance_decode_stall_seconds_total{{{own}}}[$__rate_interval]) / "
                f"rate(appliance_decode_seconds_total{{{own}}}[$__rate_interval])",
                "{{appliance}}",
            ),
        ),
        _series(
            "Goodput: share of requests within the SLO",
            "percentunit",
            (f"appliance_goodput_ratio{{{own}}}", "{{appliance}} {{slo}}"),
        ),
        _series(
            "Restarts (per hour)", "short", (f"increase(appliance_engine_restarts_total{{{own}}}[1h])", "{{appliance}}")
        ),
        _series(
            "Capabilities the engine runs otherwise than planned",
            "short",
            (f"appliance_capability_differs{{{own}}}", "{{appliance}} {{capability}}"),
        ),
        _timeline(
            "Generation per appliance",
            f'appliance_generation_info{{{own},role=~"current|upgrading"}} == 1',
            "{{appliance}} {{role}} {{generation}}",
        ),
    ]
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
    built = built.with_row(board.Row("Boards"))
    for panel in _boards(site, tt_telemetry):
        built = built.with_panel(panel)
    if gateway:
        built = built.with_row(board.Row("Gateway"))
        for panel in _gateway(site):
            built = built.with_panel(panel)
    return json.dumps(built.build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def _boards(site: str, tt_telemetry: bool) -> list[Any]:
    """Per board: temperature against its trip point, power, AI clock, heartbeat age; firmware per board."""
    own = f'job="{site}"'
    if tt_telemetry:
        tt, chip = f'job="{site}-tt-telemetry"', "{{appliance}} chip {{chip}}"
        return [
            _series("Board temperature", "celsius", (f"tt_asic_temperature_celsius{{{tt}}}", chip)),
            _series("Board power", "watt", (f"tt_tdp_w{{{tt}}}", chip)),
            _series("AI clock", "hertz", (f"tt_ai_clock_mhz{{{tt}}} * 1e6", chip)),
            _series(
                "ARC heartbeat (flat: stalled)", "short", (f"rate(tt_arc_heartbeat{{{tt}}}[$__rate_interval])", chip)
            ),
            _timeline(
                "Board state per appliance",
                f"appliance_board_state{{{own}}} == 1",
                "{{appliance}} board {{board}} {{state}}",
            ),
            _timeline(
                "Firmware per chip", f"tt_fw_bundle_firmware_info{{{tt}}}", "{{appliance}} chip {{chip}} {{version}}"
            ),
        ]
    board = "{{appliance}} {{slot}} board {{board}}"
    return [
        _series(
            "Board temperature and trip point",
            "celsius",
            (f"appliance_board_temperature_celsius{{{own}}}", board),
            (f"appliance_board_trip_temperature_celsius{{{own}}}", f"{board} trip"),
        ),
        _series("Board power", "watt", (f"appliance_board_power_watts{{{own}}}", board)),
        _series("AI clock", "hertz", (f"appliance_board_aiclk_hertz{{{own}}}", board)),
        _series("ARC heartbeat age", "s", (f"appliance_board_heartbeat_age_seconds{{{own}}}", board)),
        _timeline("Board state per appliance", f"appliance_board_state{{{own}}} == 1", f"{board} {{{{state}}}}"),
        _timeline("Firmware per board", f"appliance_board_info{{{own}}}", f"{board} {{{{firmware}}}}"),
    ]


def _gateway(site: str) -> list[Any]:
    """Per model: requests admitted to an engine and shed (429) per second, requests waiting for an engine; the same
    rates per model and class, and the time each class waited."""
    on, counted, window = models_of(site), classes_of(site), "$__rate_interval"
    waited = f"sum by (model, class, le) (rate(appliance_gateway_queue_seconds_bucket{{{counted}}}[{window}]))"
    return [
        _series(
            "Gateway: admitted and shed per model",
            "reqps",
            (admitted(on, window), "{{model}} admitted"),
            (shed(on, window), "{{model}} shed"),
        ),
        _series("Gateway: queued per model", "short", (queued(on), "{{model}}")),
        _series(
            "Gateway: admitted, shed and abandoned per model and class",
            "reqps",
            (by_class(counted, window, 'outcome="admitted"'), "{{model}} {{class}} admitted"),
            (by_class(counted, window, 'outcome="shed"'), "{{model}} {{class}} shed"),
            # Clients that gave up while queued: their timeouts are shorter than the wait bound.
            (by_class(counted, window, 'outcome="abandoned"'), "{{model}} {{class}} abandoned"),
        ),
        _series(
            "Gateway: queue time p95 per model and class",
            "s",
            (f"histogram_quantile(0.95, {waited})", "{{model}} {{class}}"),
        ),
    ]


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
        (
            f"histogram_quantile({q}, sum by (appliance, le) (rate({buckets}[$__rate_interval])))",
            f"{{{{appliance}}}} p{q * 100:g}",
        )
        for q in _QUANTILES
    ]
    return _series(f"{title} (p50, p95, p99)", "s", *queries)


def _timeline(title: str, expr: str, legend: str) -> Any:
    """A full-width state timeline: one row per appliance."""
    from grafana_foundation_sdk.builders import statetimeline

    return (
        statetimeline.Panel()
        .title(title)
        .datasource(_datasource())
        .height(6)
        .span(24)
        .with_target(_query(expr, legend, "A"))
    )
