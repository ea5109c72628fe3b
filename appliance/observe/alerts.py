"""The alerts an appliance raises about its engine's load, most urgent first.

Thresholds come from the appliance's own validated envelope (max_concurrency) and workload SLO,
not from constants of a console.
"""

from __future__ import annotations

from appliance.observe.metrics_window import LoadSummary

__all__ = ["KV_ALERT", "alerts"]

KV_ALERT = 0.9
"""KV-cache usage from which new requests risk preemption."""


def alerts(
    state: str, summary: LoadSummary | None, max_concurrency: int | None, slo_ttft_ms: float | None
) -> tuple[str, ...]:
    """Short alerts for one reachable appliance, most urgent first."""
    found = [state] if state in ("failed", "restarting") else []
    if summary is None:
        return (*found, "no engine metrics") if state == "ready" else tuple(found)
    if summary.restarted:
        found.append("engine restarted")
    if summary.failed_requests:
        found.append(f"{summary.failed_requests:.0f} failed requests")
    if max_concurrency is not None and summary.running is not None and summary.running >= max_concurrency:
        found.append("at max concurrency")
    if summary.waiting:
        found.append(f"{summary.waiting:.0f} queued")
    if summary.kv_usage is not None and summary.kv_usage >= KV_ALERT:
        found.append(f"KV {summary.kv_usage:.0%}")
    if summary.preemptions:
        found.append(f"{summary.preemptions:.0f} preemptions")
    if slo_ttft_ms is not None and summary.ttft is not None and summary.ttft.p99 * 1000 > slo_ttft_ms:
        found.append(f"TTFT p99 over {slo_ttft_ms:.0f} ms")
    if summary.missing:
        found.append(f"{len(summary.missing)} metrics missing")
    return tuple(found)
