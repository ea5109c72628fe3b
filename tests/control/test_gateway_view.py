"""The site gateway's exporter as the console reads it: the model backends' series of a page, and rates from counter
deltas between readings, with a reset counting for nothing. The real exporter under a real burst is in
tests/tui/test_console_gateway.py."""

from __future__ import annotations

from appliance.control.gateway_view import (
    MODEL_BACKEND,
    GatewayReading,
    ModelCounters,
    ModelTraffic,
    gateway_traffic,
    read_gateway,
)
from appliance.deploy.gateway_admission import MODEL_BACKEND as GATEWAY_MODEL_BACKEND

PAGE = """\
# TYPE haproxy_backend_current_queue gauge
haproxy_backend_current_queue{proxy="model:tiny-a"} 3
haproxy_backend_current_queue{proxy="openai"} 9
# TYPE haproxy_backend_loadbalanced_total counter
haproxy_backend_loadbalanced_total{proxy="model:tiny-a"} 12
# TYPE haproxy_backend_requests_denied_total counter
haproxy_backend_requests_denied_total{proxy="model:tiny-a"} 1
# TYPE haproxy_backend_connection_errors_total counter
haproxy_backend_connection_errors_total{proxy="model:tiny-a"} 2
# TYPE haproxy_frontend_current_sessions gauge
haproxy_frontend_current_sessions{proxy="openai"} 4
"""


def test_the_console_reads_backends_under_the_prefix_the_gateway_names_them_with() -> None:
    assert MODEL_BACKEND == GATEWAY_MODEL_BACKEND


def test_a_page_is_read_as_each_model_backends_queue_and_counters() -> None:
    reading = read_gateway(PAGE, at=5.0)
    assert reading.at == 5.0
    assert dict(reading.models) == {"tiny-a": ModelCounters(queued=3, admitted=12, denied=1, failed=2)}


def at(t: float, queued: float, admitted: float, denied: float, failed: float) -> GatewayReading:
    return GatewayReading(t, {"m": ModelCounters(queued, admitted, denied, failed)})


def test_rates_are_counter_deltas_over_the_readings_and_a_reset_interval_counts_for_nothing() -> None:
    assert gateway_traffic([at(0, 2, 10, 0, 0)]) == (ModelTraffic("m", 2, None, None),)  # one reading: no rate yet
    readings = [at(0, 0, 10, 0, 0), at(1, 1, 14, 1, 1), at(2, 0, 2, 0, 0), at(4, 0, 6, 2, 4)]
    # 0→1: +4 admitted, +2 shed; 1→2: a reset (the gateway restarted), no interval; 2→4: +4 admitted, +6 shed.
    assert gateway_traffic(readings) == (ModelTraffic("m", 0, 8 / 3, 8 / 3),)
    assert gateway_traffic(readings[1:3]) == (ModelTraffic("m", 0, None, None),)


def test_a_model_new_in_the_latest_reading_has_no_rate_until_it_was_read_twice() -> None:
    new = GatewayReading(1, {"m": ModelCounters(), "n": ModelCounters(admitted=5)})
    assert gateway_traffic([at(0, 0, 0, 0, 0), new]) == (ModelTraffic("m", 0, 0, 0), ModelTraffic("n", 0, None, None))
