"""Board readings from tt-telemetry, the Prometheus exporter tt-operator deploys on a site's TT hosts.

Where the site runs it, the appliance reads its page instead of sampling sysfs itself: one reader of the
boards per host, and the same numbers on the site's dashboards as in the appliance. Series and labels are
the exporter's documented ones (docs.tenstorrent.com/tt-telemetry: `tt_asic_temperature_celsius`, `tt_arc_heartbeat`,
`tt_ai_clock_mhz`, `tt_tdp_w`, ..., labelled hostname, rack, chip); the page is parsed with prometheus_client's
parser, not by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from appliance.host.board_sensors import BoardReading

__all__ = ["SERIES", "TelemetryUnavailable", "fetch_tt_telemetry", "parse_tt_telemetry"]

SERIES: Mapping[str, str] = {
    "tt_asic_temperature_celsius": "temperature_c",
    "tt_ai_clock_mhz": "aiclk_mhz",
    "tt_tdp_w": "power_w",
    "tt_tdc_a": "current_a",
    "tt_vcore_v": "voltage_v",
    "tt_arc_heartbeat": "heartbeat",
}
"""tt-telemetry series -> the reading's field, in the same units."""
_FIRMWARE = "tt_fw_bundle_firmware_info"


class TelemetryUnavailable(Exception):
    """The exporter could not be read: unreachable, an error status, or not a metrics page."""


async def fetch_tt_telemetry(url: str, transport: httpx.AsyncBaseTransport | None = None) -> str:
    """The exporter's page; TelemetryUnavailable saying why not."""
    try:
        async with httpx.AsyncClient(transport=transport, timeout=5.0, trust_env=False) as http:
            reply = await http.get(url)
    except httpx.HTTPError as err:
        raise TelemetryUnavailable(f"tt-telemetry at {url} unreachable: {err}") from None
    if reply.status_code != 200:
        raise TelemetryUnavailable(f"tt-telemetry at {url} answered {reply.status_code}")
    return reply.text


def parse_tt_telemetry(text: str, hostname: str | None = None) -> tuple[BoardReading, ...]:
    """A reading per chip on the page (those of `hostname` when the page covers several hosts)."""
    chips: dict[str, dict[str, Any]] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as err:
        raise TelemetryUnavailable(f"tt-telemetry page is not Prometheus text: {err}") from None
    for family in families:
        for sample in family.samples:
            chip = sample.labels.get("chip")
            if chip is None or (hostname and sample.labels.get("hostname", hostname) != hostname):
                continue
            values = chips.setdefault(chip, {"alive": True})
            if sample.name in SERIES:
                values[SERIES[sample.name]] = sample.value
            elif sample.name == _FIRMWARE:
                values["firmware"] = sample.labels.get("version")
            elif sample.name == "tt_dram_trained":
                values["dram_trained"] = sample.value == 1
            elif sample.name == "tt_pcie_link_alive":
                values["alive"] = sample.value == 1
    if not chips:
        raise TelemetryUnavailable(f"tt-telemetry page has no chip of host {hostname or '(any)'}")
    return tuple(_reading(chip, values) for chip, values in sorted(chips.items(), key=lambda c: _order(c[0])))


def _reading(chip: str, values: dict[str, Any]) -> BoardReading:
    alive = values.pop("alive")
    problems = tuple(f'{name}{{chip="{chip}"}}: no sample' for name, key in SERIES.items() if key not in values)
    return BoardReading(chip, alive, problems=problems if alive else (), **values)


def _order(chip: str) -> tuple[int, str]:
    return (int(chip), "") if chip.isdigit() else (1 << 30, chip)
