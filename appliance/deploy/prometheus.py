"""A site watched by Prometheus: the scrape config for its site file, and alert rules with runbooks.

Each appliance is scraped twice through its control port, with its control token: `/metrics` (the
appliance's own series, `appliance.control.metrics`) as job `<site>`, and `/engine/metrics` (vLLM's
series, relayed) as job `<site>-engine`, each target labelled `appliance=<name>`. The token is read
by Prometheus from a file named after the site file's `token_env` in the credentials directory, the
layout `$APPLIANCE_SECRETS_DIR` and the Kubernetes Secret use; its value is never read here. The site's gateways,
when given (`--gateway`), are scraped as `<site>-gateway`, with alert rules of their own (gateway_watch).

The thresholds default to the appliance's own: the pilot's decode-stall share (INTERRUPT_WARN), the
console's KV alert (KV_ALERT), the boot-slow factor (SLOW_FACTOR), the supervisor's max_restarts.
"""

from __future__ import annotations

import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from appliance.config.schema import BoardsConfig, SupervisorConfig
from appliance.deploy.board_rules import alert as _alert
from appliance.deploy.board_rules import board_alerts
from appliance.deploy.gateway_watch import gateway_alerts, gateway_scrapes
from appliance.deploy.site_appliance import Appliance
from appliance.errors import ConfigError, Problem
from appliance.observe.alerts import KV_ALERT
from appliance.preflight.workload_fit import INTERRUPT_WARN
from appliance.runtime.boot_record import SLOW_FACTOR

__all__ = ["DOCS_URL", "AlertOptions", "PrometheusFiles", "render_prometheus", "runbook_path"]

RULES_FILE = "tt-appliance-rules.yml"
DOCS_URL = "https://tt-appliance.invalid/docs/"
"""Where the documentation site is served (mkdocs.yml's site_url): each alert's `runbook_url` points into it. A site
that serves its own copy (`make docs` builds it) passes `--docs-url`."""
_DURATION = re.compile(r"(?=\d)(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?")
"""Prometheus's duration syntax (model.ParseDuration): units from years to milliseconds, largest first."""


@dataclass(frozen=True, slots=True)
class AlertOptions:
    """Every interval and threshold of the rendered config; `render prometheus --<name>` overrides each."""

    scrape_interval: str = field(default="15s", metadata={"help": "how often each target is scraped"})
    evaluation_interval: str = field(default="15s", metadata={"help": "how often the rules are evaluated"})
    not_ready_for: str = field(default="5m", metadata={"help": "not ready (or unreachable) this long alerts"})
    load_for: str = field(default="5m", metadata={"help": "stalls, KV, goodput, capabilities: held this long"})
    boot_for: str = field(default="1m", metadata={"help": "a boot past its ETA this long alerts"})
    rate_window: str = field(default="5m", metadata={"help": "window of the decode-stall share"})
    restart_window: str = field(default="15m", metadata={"help": "window the restarts are counted in"})
    restarts: int = field(
        default=SupervisorConfig().max_restarts,
        metadata={"help": "restarts in the window that make a restart loop (default: supervisor.max_restarts)"},
    )
    boot_factor: float = field(default=SLOW_FACTOR, metadata={"help": "a boot this many times its record is late"})
    stall_share: float = field(
        default=INTERRUPT_WARN,
        metadata={"help": "decode-stall share of inter-token time that alerts (the pilot's scheduler check)"},
    )
    kv_full: float = field(default=KV_ALERT, metadata={"help": "KV-cache usage that, with requests waiting, alerts"})
    goodput_min: float = field(
        default=0.99, metadata={"help": "least share of requests within each SLO (0.99: the console's TTFT p99 rule)"}
    )
    board_for: str = field(default="2m", metadata={"help": "a hot board, differing firmware: held this long"})
    board_stall: float = field(
        default=BoardsConfig().heartbeat_stall_s,
        metadata={"help": "seconds a board's heartbeat may hold (default: boards.heartbeat_stall_s)"},
    )
    board_stall_window: str = field(
        default="2m", metadata={"help": "on tt-telemetry: a heartbeat unchanged this long alerts (several scrapes)"}
    )
    board_trip: float = field(
        default=BoardsConfig().trip_c,
        metadata={"help": "trip point (C) on tt-telemetry, which publishes none (default: boards.trip_c)"},
    )
    board_margin: float = field(
        default=BoardsConfig().hot_margin_c,
        metadata={"help": "degrees below the trip point that alert (default: boards.hot_margin_c)"},
    )
    gateway_shed_share: float = field(
        default=0.1,
        metadata={"help": "share of a model's requests the gateway sheds (429) that alerts, over the window"},
    )
    gateway_queue_for: str = field(
        default="10m", metadata={"help": "a model's requests queued at the gateway without a break this long alerts"}
    )


@dataclass(frozen=True, slots=True)
class PrometheusFiles:
    config: str
    """prometheus.yml, loading the rules from RULES_FILE beside it."""
    rules: str


def render_prometheus(
    site: str,
    entries: Sequence[Appliance],
    credentials_dir: Path,
    options: AlertOptions = AlertOptions(),
    source: str = "site file",
    docs_url: str = DOCS_URL,
    gateways: tuple[str, ...] = (),
) -> PrometheusFiles:
    """The scrape config and alert rules of one site, and of its `gateways` (their exporters' host:port); ConfigError
    naming the entry (of the file `source`), the credentials file or the flag otherwise."""
    _check(options)
    docs = urlsplit(docs_url)
    if docs.scheme not in ("http", "https") or not docs.netloc:
        raise ConfigError(
            (
                Problem(
                    code="alert-option",
                    key="--docs-url",
                    message=f"{docs_url!r} is not an http(s) URL",
                    fix=f"Pass --docs-url {DOCS_URL} or where your site serves the docs",
                ),
            )
        )
    groups: dict[tuple[str, str, str, str | None], list[dict[str, Any]]] = {}
    for entry in entries:
        url = urlsplit(entry.url)
        if not url.hostname or url.port is None:
            raise ConfigError(
                (
                    Problem(
                        code="site-file",
                        key=f"{source}:{entry.name}.url",
                        message=f"{entry.url} has no control port",
                        fix="Write each appliance's control API URL with its port, e.g. http://10.0.4.21:8100",
                    ),
                )
            )
        credentials = _credentials(credentials_dir, entry.token_env)
        key = (url.scheme, url.path.rstrip("/"), str(credentials), entry.ca_file)
        groups.setdefault(key, []).append({"targets": [url.netloc], "labels": {"appliance": entry.name}})
    scrapes = [
        _scrape(site, source, key, targets, i if len(groups) > 1 else None)
        for source in ("", "engine")
        for i, (key, targets) in enumerate(groups.items(), start=1)
    ]
    exporters = _exporters(site, entries)
    scrapes += exporters
    if gateways:
        scrapes += gateway_scrapes(site, gateways)
    config = {
        "global": {"scrape_interval": options.scrape_interval, "evaluation_interval": options.evaluation_interval},
        "rule_files": [RULES_FILE],
        "scrape_configs": scrapes,
    }
    head = f"# Rendered by `appliance render prometheus` for site {site}; tokens are read from files, never held.\n"
    rules = _rules(site, options)
    rule_groups = [
        rules,
        {"name": f"tt-appliance-{site}-boards", "rules": board_alerts(site, options, bool(exporters))},
    ]
    if gateways:
        rule_groups.append({"name": f"tt-appliance-{site}-gateway", "rules": gateway_alerts(site, options)})
    for rule in (r for group in rule_groups for r in group["rules"]):
        rule["annotations"]["runbook_url"] = docs_url.rstrip("/") + "/" + runbook_path(rule["alert"])
    return PrometheusFiles(head + _yaml(config), head + _yaml({"groups": rule_groups}))


def runbook_path(alert: str) -> str:
    """The alert's runbook page in the documentation site: `ApplianceNotReady` -> operations/alerts/appliance-not-
    ready/ (docs/operations/alerts/appliance-not-ready.md)."""
    return "operations/alerts/" + re.sub(r"(?<!^)(?=[A-Z])", "-", alert).lower() + "/"


def _exporters(site: str, entries: Sequence[Appliance]) -> list[dict[str, Any]]:
    """The tt-telemetry exporters the site file names, one job per scheme and path, each target labelled with its
    appliance (the exporter needs no token)."""
    jobs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for entry in entries:
        if entry.tt_telemetry:
            url = urlsplit(entry.tt_telemetry)
            jobs.setdefault((url.scheme, url.path or "/metrics"), []).append(
                {"targets": [url.netloc], "labels": {"appliance": entry.name}}
            )
    named = [f"{site}-tt-telemetry" + (f"-{i}" if len(jobs) > 1 else "") for i in range(1, len(jobs) + 1)]
    return [
        {
            "job_name": name,
            "scheme": scheme,
            "metrics_path": path,
            "static_configs": targets,
            **(
                {"relabel_configs": [{"target_label": "job", "replacement": f"{site}-tt-telemetry"}]}
                if len(jobs) > 1
                else {}
            ),
        }
        for name, ((scheme, path), targets) in zip(named, jobs.items(), strict=True)
    ]


def _check(options: AlertOptions) -> None:
    """Every duration in Prometheus's syntax and every threshold above 0, else ConfigError naming the flag."""
    for item in fields(options):
        given = getattr(options, item.name)
        wrong = not _DURATION.fullmatch(given) if isinstance(given, str) else given <= 0
        if wrong:
            kind = "a Prometheus duration such as 30s, 5m or 1h" if isinstance(given, str) else "a number above 0"
            flag = f"--{item.name.replace('_', '-')}"
            fix = f"Pass {flag} {item.default}"
            raise ConfigError((Problem(code="alert-option", key=flag, message=f"{given!r} is not {kind}", fix=fix),))


def _credentials(directory: Path, name: str) -> Path:
    path = (directory / name).absolute()
    try:
        mode = path.stat().st_mode
    except OSError as err:
        fix = f"Write the token that {name} holds into {path} (mode 0600)"
        raise ConfigError(
            (Problem(code="credentials-file", key=str(path), message=f"cannot read it: {err.strerror}", fix=fix),)
        ) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(
            (
                Problem(
                    code="credentials-file",
                    key=str(path),
                    message=f"mode {stat.S_IMODE(mode):04o} opens the token to group or others",
                    fix=f"chmod 600 {path}",
                ),
            )
        )
    return path


def _scrape(
    site: str, source: str, key: tuple[str, str, str, str | None], targets: list[dict[str, Any]], group: int | None
) -> dict[str, Any]:
    scheme, prefix, credentials, ca_file = key
    job = f"{site}-{source}" if source else site
    scrape: dict[str, Any] = {
        "job_name": job if group is None else f"{job}-{group}",
        "scheme": scheme,
        "metrics_path": f"{prefix}/{source}/metrics" if source else f"{prefix}/metrics",
        "authorization": {"type": "Bearer", "credentials_file": credentials},
        "static_configs": targets,
    }
    if ca_file is not None:
        scrape["tls_config"] = {"ca_file": ca_file}
    if group is not None:  # several credentials: one scrape config each, all of them the site's job
        scrape["relabel_configs"] = [{"target_label": "job", "replacement": job}]
    return scrape


def _rules(site: str, o: AlertOptions) -> dict[str, Any]:
    on = f'job="{site}"'
    return {"name": f"tt-appliance-{site}", "rules": [*_lifecycle_alerts(on, o), *_load_alerts(on, o)]}


def _lifecycle_alerts(on: str, o: AlertOptions) -> list[dict[str, Any]]:
    return [
        _alert(
            "ApplianceNotReady",
            f"appliance_engine_ready{{{on}}} == 0 or up{{{on}}} == 0",
            o.not_ready_for,
            "warning",
            "{{ $labels.appliance }} has not been ready for " + o.not_ready_for,
            "Clients get no answers from it. `appliance status` says its state and last error: a drain or "
            "restart in progress ends by itself; failed needs a restart (the console, or POST /restart) after "
            "reading /logs; unreachable means the appliance process or host is down.",
        ),
        _alert(
            "ApplianceRestartLoop",
            f"increase(appliance_engine_restarts_total{{{on}}}[{o.restart_window}]) >= {o.restarts}",
            "0m",
            "critical",
            "{{ $labels.appliance }} restarted " + f"{o.restarts} times or more in {o.restart_window}",
            "The engine keeps crashing: read the crash cause in `appliance status` and /logs "
            "(the fault ladder names the rule and the next step); fix it before restarting again.",
        ),
        _alert(
            "ApplianceBootPastEta",
            f"appliance_boot_elapsed_seconds{{{on}}} > {o.boot_factor} * appliance_boot_expected_seconds{{{on}}}",
            o.boot_for,
            "warning",
            "{{ $labels.appliance }} boot is over " + f"{o.boot_factor:g}x its record",
            "A boot far slower than this config's record on this host: a tensor cache rebuilt every boot, or "
            "device init retrying. Watch the boot phase in `appliance status` and the engine log.",
        ),
        _alert(
            "ApplianceQuarantined",
            f"appliance_quarantined{{{on}}} == 1",
            "0m",
            "critical",
            "{{ $labels.appliance }} is quarantined: a device fault came back after its reset",
            "The boards need hands: inspect them with tt-smi, reset or replace them; then a restart (the console, "
            "or POST /restart) lifts the quarantine.",
        ),
        _alert(
            "ApplianceWeightsUnverified",
            f"appliance_weights_verified{{{on}}} == 0",
            "0m",
            "critical",
            "{{ $labels.appliance }}: {{ $labels.checkpoint }}@{{ $labels.revision }} no longer matches its "
            "weights lock",
            "A file of the served checkpoint was removed, resized or changed on disk: the next "
            "restart refuses it. Run `appliance fetch --verify` on the host, then `appliance fetch` to mend it.",
        ),
    ]


def _load_alerts(on: str, o: AlertOptions) -> list[dict[str, Any]]:
    return [
        _alert(
            "ApplianceDecodeStalls",
            f"rate(appliance_decode_stall_seconds_total{{{on}}}[{o.rate_window}]) / "
            f"rate(appliance_decode_seconds_total{{{on}}}[{o.rate_window}]) > {o.stall_share}",
            o.load_for,
            "warning",
            "{{ $labels.appliance }}: decode stalls take {{ $value | humanizePercentage }} of inter-token time",
            "Prefill steps hold running streams back (phase-exclusive scheduling) beyond "
            "the pilot's threshold: fewer or shorter prompts per decode, or replay the mix with `appliance "
            "loadtest` and accept the latency.",
        ),
        _alert(
            "ApplianceKvNearFull",
            f"appliance_kv_cache_usage_ratio{{{on}}} >= {o.kv_full} and appliance_requests_waiting{{{on}}} > 0",
            o.load_for,
            "warning",
            "{{ $labels.appliance }}: KV cache nearly full with requests waiting",
            "New requests queue and running ones risk preemption: lower serving.max_concurrency or the "
            "context length, or add an appliance to the site.",
        ),
        _alert(
            "ApplianceGoodputUnderSlo",
            f"appliance_goodput_ratio{{{on}}} < {o.goodput_min}",
            o.load_for,
            "warning",
            "{{ $labels.appliance }}: only {{ $value | humanizePercentage }} of requests meet the "
            "{{ $labels.slo }} SLO",
            "Latency is over the workload's SLO: check load and queueing on the "
            "dashboard, the decode stalls and KV use; shed load or add capacity.",
        ),
        _alert(
            "ApplianceEffectiveDiffers",
            f"appliance_capability_differs{{{on}}} == 1",
            o.load_for,
            "warning",
            "{{ $labels.appliance }} runs {{ $labels.capability }} otherwise than planned",
            "The engine or plugin silently changed what the plan asked for: `appliance status` shows requested "
            "against effective and where the engine said it; plan what the engine can run.",
        ),
    ]


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True  # the two jobs share their targets: spelled out in each, as an operator reads them


def _yaml(data: dict[str, Any]) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=120)
