"""A site as Prometheus and Grafana watch it: the rendered scrape config and rules checked and unit-tested
by promtool (Debian's prometheus package, `make prometheus`), the Grafana dashboard read back through
Grafana's own schema types, and the render's refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from testkit.helpers import Cli, promtool


@pytest.fixture
def site(tmp_path: Path) -> tuple[Path, Path]:
    """A site file of two appliances sharing one token, and the credentials directory holding it."""
    creds = tmp_path / "credentials"
    creds.mkdir()
    (creds / "LAB_TOKEN").write_text("lab-secret-value")
    (creds / "LAB_TOKEN").chmod(0o600)
    site_file = tmp_path / "lab.yaml"
    site_file.write_text(
        "- {name: lab-01, url: 'http://10.0.4.21:8100', token_env: LAB_TOKEN}\n"
        "- {name: lab-02, url: 'http://10.0.4.22:8100', token_env: LAB_TOKEN}\n"
    )
    return site_file, creds


def test_the_rendered_config_and_rules_pass_promtool_and_hold_no_token(
    cli: Cli, site: tuple[Path, Path], tmp_path: Path
) -> None:
    site_file, creds = site
    out = tmp_path / "prometheus"
    ran = cli("render", "prometheus", "--site-file", str(site_file), "--credentials-dir", str(creds), "--out", str(out))
    assert ran.returncode == 0, ran.stderr
    checked = promtool("check", "config", "prometheus.yml", cwd=out)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 14 rules found" in promtool("check", "rules", "tt-appliance-rules.yml", cwd=out).stdout
    config = yaml.safe_load((out / "prometheus.yml").read_text())
    jobs = {s["job_name"]: s for s in config["scrape_configs"]}
    assert set(jobs) == {"lab", "lab-engine"} and jobs["lab-engine"]["metrics_path"] == "/engine/metrics"
    assert jobs["lab"]["authorization"] == {"type": "Bearer", "credentials_file": str(creds / "LAB_TOKEN")}
    assert [t["targets"] for t in jobs["lab"]["static_configs"]] == [["10.0.4.21:8100"], ["10.0.4.22:8100"]]
    for path in out.iterdir():
        assert "lab-secret-value" not in path.read_text()


def test_slots_are_scraped_under_their_routes_and_other_credentials_in_a_scrape_config_of_their_own(
    cli: Cli, site: tuple[Path, Path], tmp_path: Path
) -> None:
    site_file, creds = site
    (creds / "SLOT_TOKEN").write_text("slot-secret-value")
    (creds / "SLOT_TOKEN").chmod(0o400)
    site_file.write_text(
        "- {name: host-a, url: 'http://10.0.4.23:8100/slots/a', token_env: SLOT_TOKEN}\n"
        "- {name: host-b, url: 'http://10.0.4.23:8100/slots/b/', token_env: SLOT_TOKEN}\n"
        "- {name: lab-01, url: 'http://10.0.4.21:8100', token_env: LAB_TOKEN}\n"
    )
    out = tmp_path / "prometheus"
    ran = cli("render", "prometheus", "--site-file", str(site_file), "--credentials-dir", str(creds), "--out", str(out))
    assert ran.returncode == 0, ran.stderr
    assert promtool("check", "config", "prometheus.yml", cwd=out).returncode == 0
    scrapes = yaml.safe_load((out / "prometheus.yml").read_text())["scrape_configs"]
    paths = {(s["metrics_path"], s["authorization"]["credentials_file"].rsplit("/", 1)[1]) for s in scrapes}
    assert paths == {
        ("/slots/a/metrics", "SLOT_TOKEN"),
        ("/slots/a/engine/metrics", "SLOT_TOKEN"),
        ("/slots/b/metrics", "SLOT_TOKEN"),
        ("/slots/b/engine/metrics", "SLOT_TOKEN"),
        ("/metrics", "LAB_TOKEN"),
        ("/engine/metrics", "LAB_TOKEN"),
    }
    # Several scrape configs, one job per site: the rules and the dashboard select job="lab" or "lab-engine".
    assert {r["replacement"] for s in scrapes for r in s["relabel_configs"]} == {"lab", "lab-engine"}


SERIES_IN = {
    'appliance_engine_ready{job="lab", appliance="a"}': "1 1 0x10",
    'up{job="lab", appliance="a"}': "1x12",
    'appliance_engine_ready{job="lab", appliance="b"}': "1x12",
    'up{job="lab", appliance="b"}': "1x3 0x8",
    'appliance_engine_restarts_total{job="lab", appliance="a"}': "0 1 2 3 4 5 5x6",
    'appliance_engine_restarts_total{job="lab", appliance="b"}': "0 1 1x10",
    'appliance_boot_elapsed_seconds{job="lab", appliance="a"}': "10+60x12",
    'appliance_boot_expected_seconds{job="lab", appliance="a"}': "200x12",
    'appliance_decode_stall_seconds_total{job="lab", appliance="a"}': "0+30x12",
    'appliance_decode_seconds_total{job="lab", appliance="a"}': "0+60x12",
    'appliance_decode_stall_seconds_total{job="lab", appliance="b"}': "0+1x12",
    'appliance_decode_seconds_total{job="lab", appliance="b"}': "0+60x12",
    'appliance_kv_cache_usage_ratio{job="lab", appliance="a"}': "0.95x12",
    'appliance_requests_waiting{job="lab", appliance="a"}': "3x12",
    'appliance_kv_cache_usage_ratio{job="lab", appliance="b"}': "0.95x12",
    'appliance_requests_waiting{job="lab", appliance="b"}': "0x12",
    'appliance_goodput_ratio{job="lab", appliance="a", slo="ttft"}': "0.5x12",
    'appliance_goodput_ratio{job="lab", appliance="b", slo="ttft"}': "1x12",
    'appliance_capability_differs{job="lab", appliance="a", capability="prefix_caching"}': "0x2 1x10",
    'appliance_quarantined{job="lab", appliance="a"}': "0 0 1x10",
    'appliance_quarantined{job="lab", appliance="b"}': "0x12",
    'appliance_weights_verified{job="lab", appliance="a", checkpoint="org/m", revision="r1"}': "1 1 0x10",
    'appliance_weights_verified{job="lab", appliance="b", checkpoint="org/m", revision="r1"}': "1x12",
}
"""One sample a minute: appliance a meets each alert's condition, b (mostly) does not."""
ALERTS = (
    # alert, silent at, firing at, [(labels beyond job and severity, summary)]
    (
        "ApplianceNotReady",
        "4m",
        "10m",
        [({"appliance": "a"}, "a has not been ready for 5m"), ({"appliance": "b"}, "b has not been ready for 5m")],
    ),
    ("ApplianceRestartLoop", "3m", "6m", [({"appliance": "a"}, "a restarted 4 times or more in 15m")]),
    ("ApplianceBootPastEta", "4m", "9m", [({"appliance": "a"}, "a boot is over 2x its record")]),
    ("ApplianceDecodeStalls", "3m", "11m", [({"appliance": "a"}, "a: decode stalls take 50% of inter-token time")]),
    ("ApplianceKvNearFull", "3m", "6m", [({"appliance": "a"}, "a: KV cache nearly full with requests waiting")]),
    (
        "ApplianceGoodputUnderSlo",
        "3m",
        "6m",
        [({"appliance": "a", "slo": "ttft"}, "a: only 50% of requests meet the ttft SLO")],
    ),
    (
        "ApplianceEffectiveDiffers",
        "6m",
        "8m",
        [({"appliance": "a", "capability": "prefix_caching"}, "a runs prefix_caching otherwise than planned")],
    ),
    (
        "ApplianceQuarantined",
        "1m",
        "2m",
        [({"appliance": "a"}, "a is quarantined: a device fault came back after its reset")],
    ),
    (
        "ApplianceWeightsUnverified",
        "1m",
        "2m",
        [
            (
                {"appliance": "a", "checkpoint": "org/m", "revision": "r1"},
                "a: org/m@r1 no longer matches its weights lock",
            )
        ],
    ),
)


GATEWAY = 'job="lab-gateway", instance="10.0.4.20:8405"'
GATEWAY_SERIES_IN = {
    f'haproxy_backend_{name}{{{GATEWAY}, proxy="model:{model}", model="{model}"}}': values
    for model, series in {
        "tiny-a": {
            "http_requests_total": "0+100x15",
            "requests_denied_total": "0+10x15",
            "connection_errors_total": "0+10x15",
            "current_queue": "0 3x15",
        },
        "tiny-b": {
            "http_requests_total": "0+100x15",
            "requests_denied_total": "0+1x15",
            "connection_errors_total": "0x15",
            "current_queue": "3x5 0 3x10",
        },
    }.items()
    for name, values in series.items()
}
"""As the exporter names them, with the `model` label the scrape adds: tiny-a's queue never empties after the first
minute; tiny-b's emptied once, at 6m."""
CLASSES = 'job="lab-gateway-classes", instance="10.0.4.20:8405"'
GATEWAY_SERIES_IN |= {
    f'appliance_gateway_requests_total{{{CLASSES}, model="{model}", class="{cls}", outcome="{outcome}"}}': values
    for (model, cls), outcomes in {
        ("tiny-a", "low"): {"admitted": "0+80x15", "shed": "0+20x15", "refused": "0+200x15"},
        ("tiny-a", "high"): {"admitted": "0+100x15", "shed": "0x15"},
        ("tiny-b", "normal"): {"admitted": "0+99x15", "shed": "0+1x15"},
    }.items()
    for outcome, values in outcomes.items()
}
"""As the gateway counts them: tiny-a sheds 20 % of its low class's offered requests (the refused ones were never
offered) and none of its high class's; tiny-b sheds 1 % of its normal class's."""
GATEWAY_ALERTS = (
    (
        "ApplianceGatewayShedding",
        "3m",
        "7m",
        [
            (
                {"job": "lab-gateway-classes", "instance": "10.0.4.20:8405", "model": "tiny-a", "class": "low"},
                "gateway 10.0.4.20:8405: tiny-a sheds 20% of its low requests",
            )
        ],
    ),
    (
        "ApplianceGatewayQueueSaturated",
        "5m",
        "11m",
        [
            (
                {"job": "lab-gateway", "instance": "10.0.4.20:8405", "proxy": "model:tiny-a", "model": "tiny-a"},
                "gateway 10.0.4.20:8405: tiny-a has had requests queued for 10m",
            )
        ],
    ),
)


def rule_tests(
    rules: dict[str, object],
    alerts: tuple[tuple[str, str, str, list[tuple[dict[str, str], str]]], ...] = ALERTS,
    series_in: dict[str, str] = SERIES_IN,
    group: int = 0,
) -> dict[str, object]:
    """promtool's unit tests of the rendered rules of `group`: each alert silent, then firing with its runbook."""
    rendered = {r["alert"]: r for r in rules["groups"][group]["rules"]}  # type: ignore[index]
    cases: list[dict[str, object]] = []
    for name, silent, firing, expected in alerts:
        severity = rendered[name]["labels"]["severity"]
        annotations = rendered[name]["annotations"]
        runbook, runbook_url = annotations["runbook"], annotations["runbook_url"]
        cases.append({"eval_time": silent, "alertname": name, "exp_alerts": []})
        cases.append(
            {
                "eval_time": firing,
                "alertname": name,
                "exp_alerts": [
                    {
                        "exp_labels": {"job": "lab", "severity": severity, **labels},
                        "exp_annotations": {"summary": summary, "runbook": runbook, "runbook_url": runbook_url},
                    }
                    for labels, summary in expected
                ],
            }
        )
    series = [{"series": name, "values": values} for name, values in series_in.items()]
    return {
        "rule_files": ["tt-appliance-rules.yml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": cases}],
    }


def test_each_alert_fires_on_its_condition_and_stays_silent_otherwise(
    cli: Cli, site: tuple[Path, Path], tmp_path: Path
) -> None:
    site_file, creds = site
    ran = cli(
        "render",
        "prometheus",
        "--site-file",
        str(site_file),
        "--credentials-dir",
        str(creds),
        "--out",
        str(tmp_path),
        "--restarts",
        "4",
    )
    assert ran.returncode == 0, ran.stderr
    rules = yaml.safe_load((tmp_path / "tt-appliance-rules.yml").read_text())
    assert {r["alert"] for r in rules["groups"][0]["rules"]} == {a[0] for a in ALERTS}
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(rule_tests(rules)))
    tested = promtool("test", "rules", "tests.yml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_the_gateway_is_scraped_with_a_model_label_and_its_alerts_fire_on_the_exporters_series(
    cli: Cli, site: tuple[Path, Path], tmp_path: Path
) -> None:
    site_file, creds = site
    flags = ("--site-file", str(site_file), "--credentials-dir", str(creds), "--gateway", "10.0.4.20:8405")
    ran = cli("render", "prometheus", *flags, "--out", str(tmp_path))
    assert ran.returncode == 0, ran.stderr
    assert promtool("check", "config", "prometheus.yml", cwd=tmp_path).returncode == 0
    assert "SUCCESS: 16 rules found" in promtool("check", "rules", "tt-appliance-rules.yml", cwd=tmp_path).stdout
    jobs = {s["job_name"]: s for s in yaml.safe_load((tmp_path / "prometheus.yml").read_text())["scrape_configs"]}
    assert jobs["lab-gateway"]["static_configs"] == [{"targets": ["10.0.4.20:8405"]}]
    assert "authorization" not in jobs["lab-gateway"]  # the exporter needs no token
    classes = jobs["lab-gateway-classes"]  # the gateway's own counters, on the same listener
    assert classes["static_configs"] == jobs["lab-gateway"]["static_configs"]
    assert classes["metrics_path"] == "/metrics/classes" and "authorization" not in classes
    rules = yaml.safe_load((tmp_path / "tt-appliance-rules.yml").read_text())
    assert [g["name"] for g in rules["groups"]][2] == "tt-appliance-lab-gateway"
    assert {r["alert"] for r in rules["groups"][2]["rules"]} == {a[0] for a in GATEWAY_ALERTS}
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(rule_tests(rules, GATEWAY_ALERTS, GATEWAY_SERIES_IN, 2)))
    tested = promtool("test", "rules", "tests.yml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    refused = cli("render", "prometheus", *flags[:-1], "gateway.lab", "--out", str(tmp_path / "no"))
    assert refused.returncode == 2 and refused.stderr.startswith("error[alert-option] --gateway: 'gateway.lab' is not")


def test_the_dashboard_is_grafanas_own_model_with_a_panel_per_question(cli: Cli, site: tuple[Path, Path]) -> None:
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import Dashboard

    ran = cli("render", "grafana", "--site-file", str(site[0]))
    assert ran.returncode == 0, ran.stderr
    model = json.loads(ran.stdout)
    # Read through the schema's generated types and written back: nothing the schema lacks survives unchanged.
    assert json.loads(json.dumps(Dashboard.from_json(model), cls=JSONEncoder)) == model
    titles = [p["title"] for p in model["panels"]]
    assert titles[0] == "State per appliance" and titles[titles.index("Boards") - 1] == "Generation per appliance"
    exprs = " ".join(t["expr"] for p in model["panels"] for t in p.get("targets", ()))  # a row has none
    for series in (
        "appliance_kv_cache_usage_ratio",
        "vllm:time_to_first_token_seconds_bucket",
        "appliance_goodput",
        "vllm:inter_token_latency_seconds_bucket",
        "appliance_decode_stall_seconds_total",
        "appliance_engine_restarts_total",
        'appliance_generation_info{job="lab",role=~"current|upgrading"}',
    ):
        assert series in exprs


@pytest.mark.parametrize(
    ("entry", "mode", "expected"),
    [
        (
            "{name: lab-01, url: 'http://10.0.4.21', token_env: LAB_TOKEN}",
            0o600,
            "lab.yaml:lab-01.url: http://10.0.4.21 has no control port",
        ),
        ("{name: lab-01, url: 'http://10.0.4.21:8100', token_env: OTHER_TOKEN}", 0o600, "OTHER_TOKEN: cannot read it"),
        (
            "{name: lab-01, url: 'http://10.0.4.21:8100', token_env: LAB_TOKEN}",
            0o644,
            "LAB_TOKEN: mode 0644 opens the token to group or others",
        ),
    ],
)
def test_a_site_file_or_credentials_file_it_cannot_use_is_refused_in_one_line(
    cli: Cli, site: tuple[Path, Path], tmp_path: Path, entry: str, mode: int, expected: str
) -> None:
    site_file, creds = site
    site_file.write_text(f"- {entry}\n")
    (creds / "LAB_TOKEN").chmod(mode)
    out = tmp_path / "out"
    ran = cli("render", "prometheus", "--site-file", str(site_file), "--credentials-dir", str(creds), "--out", str(out))
    assert ran.returncode == 2
    assert expected in ran.stderr and len(ran.stderr.strip().splitlines()) == 1 and "Traceback" not in ran.stderr
    assert not out.exists()


@pytest.mark.parametrize(("kind", "flag"), [("grafana", "--site-file"), ("prometheus", "--credentials-dir")])
def test_a_render_without_its_site_file_or_credentials_names_the_flag(
    cli: Cli, site: tuple[Path, Path], kind: str, flag: str
) -> None:
    ran = cli("render", kind, *(["--site-file", str(site[0])] if flag != "--site-file" else []))
    assert ran.returncode == 2 and ran.stdout == ""
    assert ran.stderr.startswith(f"error[missing-flag] {flag}: ") and len(ran.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("flag", "given", "shown"),
    [("--not-ready-for", "5 minutes", "'5 minutes'"), ("--stall-share", "0", "0.0"), ("--load-for", "", "''")],
)
def test_an_interval_or_threshold_prometheus_cannot_take_is_refused_naming_its_flag(
    cli: Cli, site: tuple[Path, Path], tmp_path: Path, flag: str, given: str, shown: str
) -> None:
    site_file, creds = site
    ran = cli(
        "render",
        "prometheus",
        "--site-file",
        str(site_file),
        "--credentials-dir",
        str(creds),
        "--out",
        str(tmp_path / "out"),
        flag,
        given,
    )
    assert ran.returncode == 2 and ran.stderr.startswith(f"error[alert-option] {flag}: {shown} is not")
    assert not (tmp_path / "out").exists()


def test_each_alert_links_to_its_runbook_where_the_site_serves_the_docs(
    cli: Cli, site: tuple[Path, Path], tmp_path: Path
) -> None:
    site_file, creds = site
    flags = ("render", "prometheus", "--site-file", str(site_file), "--credentials-dir", str(creds))
    ran = cli(*flags, "--out", str(tmp_path), "--docs-url", "https://docs.lab.example/tt/")
    assert ran.returncode == 0, ran.stderr
    rules = yaml.safe_load((tmp_path / "tt-appliance-rules.yml").read_text())["groups"][0]["rules"]
    urls = {r["alert"]: r["annotations"]["runbook_url"] for r in rules}
    assert urls["ApplianceKvNearFull"] == "https://docs.lab.example/tt/operations/alerts/appliance-kv-near-full/"
    refused = cli(*flags, "--out", str(tmp_path / "no"), "--docs-url", "docs/")
    assert refused.returncode == 2 and not (tmp_path / "no").exists()
    assert refused.stderr.strip() == (
        "error[alert-option] --docs-url: 'docs/' is not an http(s) URL. Pass --docs-url "
        "https://tt-appliance.invalid/docs/ or where your site serves the docs"
    )


def test_with_a_gateway_the_dashboard_has_a_row_of_what_it_admits_queues_and_sheds_per_model(
    cli: Cli, site: tuple[Path, Path]
) -> None:
    ran = cli("render", "grafana", "--site-file", str(site[0]), "--gateway", "10.0.4.20:8405")
    assert ran.returncode == 0, ran.stderr
    panels = json.loads(ran.stdout)["panels"]
    gateway = panels[[p["title"] for p in panels].index("Gateway") + 1 :]
    exprs = [t["expr"] for p in gateway for t in p["targets"]]
    assert [t["legendFormat"] for p in gateway for t in p["targets"]] == [
        "{{model}} admitted",
        "{{model}} shed",
        "{{model}}",
        "{{model}} {{class}} admitted",
        "{{model}} {{class}} shed",
        "{{model}} {{class}} abandoned",
        "{{model}} {{class}}",
    ]
    assert all('job="lab-gateway",model!=""' in e for e in exprs[:3])
    assert "haproxy_backend_requests_denied_total" in exprs[1] and "haproxy_backend_current_queue" in exprs[2]
    assert all('job="lab-gateway-classes"' in e for e in exprs[3:])
    assert 'outcome="shed"' in exprs[4] and 'outcome="abandoned"' in exprs[5]
    assert "appliance_gateway_queue_seconds_bucket" in exprs[6]
