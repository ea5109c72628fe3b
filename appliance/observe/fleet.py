"""A site's appliances (the site file) and the alerts the console raises for each.

Site file, YAML: a list of appliances, each

    - name: lab-t3k-01                 # shown in the fleet view
      url: http://10.0.4.21:8100       # its control API
      token_env: LAB_T3K_01_TOKEN      # env var holding its control token (default APPLIANCE_TOKEN)

Tokens are named, never written in the file. Alert thresholds come from each appliance's own
validated envelope (max_concurrency) and workload SLO, not from constants of the console.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import ConfigDict, TypeAdapter, ValidationError

from appliance.errors import ConfigError, Problem
from appliance.observe.metrics_window import LoadSummary

__all__ = ["KV_ALERT", "SiteEntry", "Target", "alerts", "load_site_file", "target"]

KV_ALERT = 0.9
"""KV-cache usage from which new requests risk preemption."""


@dataclass(frozen=True, slots=True)
class SiteEntry:
    __pydantic_config__ = ConfigDict(extra="forbid")

    name: str
    url: str
    token_env: str = "APPLIANCE_TOKEN"


@dataclass(frozen=True, slots=True)
class Target:
    """One appliance the console watches."""

    name: str
    url: str
    token: str = field(repr=False)


_SITE = TypeAdapter(list[SiteEntry])


def load_site_file(path: Path) -> tuple[SiteEntry, ...]:
    """The appliances a site file lists; ConfigError naming the file and key otherwise."""
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise _site_error(path, "", f"cannot read it: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise _site_error(path, "", f"not valid YAML: {err}".splitlines()[0]) from None
    try:
        entries = tuple(_SITE.validate_python(data))
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise _site_error(path, where, first["msg"].lower()) from None
    if not entries:
        raise _site_error(path, "", "lists no appliances")
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise _site_error(path, "name", f"names must be unique, got {names}")
    return entries


def target(entry: SiteEntry, environ: Mapping[str, str] = os.environ) -> Target:
    return Target(entry.name, entry.url.rstrip("/"), environ.get(entry.token_env, ""))


def _site_error(path: Path, key: str, message: str) -> ConfigError:
    fix = "Each entry needs name and url, and may set token_env (see `appliance console --help`)"
    return ConfigError((Problem("site-file", f"{path}{':' + key if key else ''}", message, fix),))


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
