"""The board alerts `render prometheus` adds, unit-tested by promtool on the appliances' own series and, for a site
whose file names its tt-telemetry exporters, on the exporter's series; a real Prometheus scrapes an appliance's
board series and the recorded tt-telemetry page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from appliance.config.schema import BoardsConfig
from appliance.observe.board_sources import board_monitor
from testkit.board_scenarios import BOARDS, HOSTS
from testkit.helpers import Cli, promtool
from testkit.prometheus import query_until, running_prometheus
from testkit.recorded_appliance import recorded_api, serving

BOARD_ALERTS = (
    "ApplianceBoardHeartbeatStalled",
    "ApplianceBoardNearTrip",
    "ApplianceBoardThermalTrips",
    "ApplianceBoardDramUntrained",
    "ApplianceBoardFirmwareDiffers",
)
OWN = 'job="lab", appliance="a", slot="engine"'
OWN_SERIES = {
    f'appliance_board_heartbeat_age_seconds{{{OWN}, board="0"}}': "0 5 10 30 50 70x6",
    f'appliance_board_heartbeat_age_seconds{{{OWN}, board="1"}}': "0x11",
    f'appliance_board_temperature_celsius{{{OWN}, board="0"}}': "60 70 80 96 97 98x6",
    f'appliance_board_temperature_celsius{{{OWN}, board="1"}}': "60x11",
    f'appliance_board_trip_temperature_celsius{{{OWN}, board="0"}}': "105x11",
    f'appliance_board_trip_temperature_celsius{{{OWN}, board="1"}}': "105x11",
    f'appliance_board_thermal_trips_total{{{OWN}, board="0"}}': "0x5 1x6",
    f'appliance_board_thermal_trips_total{{{OWN}, board="1"}}': "0x11",
    f'appliance_board_dram_trained{{{OWN}, board="0"}}': "1x2 0x9",
    f'appliance_board_dram_trained{{{OWN}, board="1"}}': "1x11",
    f'appliance_board_info{{{OWN}, board="0", card_type="n300", firmware="18.6.0"}}': "1x11",
    f'appliance_board_info{{{OWN}, board="1", card_type="n300", firmware="18.6.0"}}': "1x11",
    'appliance_board_info{job="lab", appliance="b", slot="engine", board="0", card_type="n300", '
    'firmware="18.3.0"}': "_x3 1x8",
}
"""One sample a minute: board 0 of appliance a meets each condition in turn, board 1 none; appliance b appears at 3m
with an older firmware bundle (`_x3`: no sample for 3 minutes)."""
TT = 'job="lab-tt-telemetry", appliance="a", hostname="t3k-lab-07"'
TT_SERIES = {
    f'tt_arc_heartbeat{{{TT}, chip="0"}}': "100+50x3 250x8",
    f'tt_arc_heartbeat{{{TT}, chip="1"}}': "100+50x11",
    f'tt_asic_temperature_celsius{{{TT}, chip="0"}}': "60 70 80 96 97 98x6",
    f'tt_asic_temperature_celsius{{{TT}, chip="1"}}': "60x11",
    f'tt_dram_trained{{{TT}, chip="0"}}': "1x2 0x9",
    f'tt_dram_trained{{{TT}, chip="1"}}': "1x11",
    f'tt_fw_bundle_firmware_info{{{TT}, chip="0", version="18.6.0"}}': "1x11",
    f'tt_fw_bundle_firmware_info{{{TT}, chip="1", version="18.6.0"}}': "_x3 1x8",
    'tt_fw_bundle_firmware_info{job="lab-tt-telemetry", appliance="b", hostname="t3k-lab-08", chip="0", '
    'version="18.3.0"}': "_x3 1x8",
    f'appliance_board_thermal_trips_total{{{OWN}, board="0"}}': "0x5 1x6",
}


def cases(rules: dict[str, dict[str, object]], tt: bool) -> list[dict[str, object]]:
    """Each board alert silent, then firing with its labels, summary and runbook."""
    board = {"chip": "0", "hostname": "t3k-lab-07"} if tt else {"board": "0", "slot": "engine"}
    job = "lab-tt-telemetry" if tt else "lab"
    where = "a chip 0" if tt else "a board 0"
    expected = {
        "ApplianceBoardHeartbeatStalled": (
            "2m",
            "6m",
            {"job": job, "appliance": "a", **board},
            f"{where}: ARC heartbeat stalled",
        ),
        "ApplianceBoardNearTrip": (
            "3m",
            "6m",
            {"job": job, "appliance": "a", **board},
            f"{where} at 98 C, near its thermal trip point",
        ),
        "ApplianceBoardThermalTrips": (
            "4m",
            "6m",
            {"job": "lab", "appliance": "a", "board": "0", "slot": "engine"},
            "a board 0 tripped thermally",
        ),
        "ApplianceBoardDramUntrained": (
            "1m",
            "3m",
            {"job": job, "appliance": "a", **board},
            f"{where}: DRAM did not train",
        ),
        "ApplianceBoardFirmwareDiffers": ("4m", "6m", {}, "site lab: boards run 2 different firmware bundles"),
    }
    out: list[dict[str, object]] = []
    for name, (silent, firing, labels, summary) in expected.items():
        rule = rules[name]
        given: dict[str, str] = rule["annotations"]  # type: ignore[assignment]
        annotations = {"summary": summary, "runbook": given["runbook"], "runbook_url": given["runbook_url"]}
        severity = rule["labels"]["severity"]  # type: ignore[index]
        out.append({"eval_time": silent, "alertname": name, "exp_alerts": []})
        out.append(
            {
                "eval_time": firing,
                "alertname": name,
                "exp_alerts": [{"exp_labels": {**labels, "severity": severity}, "exp_annotations": annotations}],
            }
        )
    return out


@pytest.fixture
def site(tmp_path: Path) -> tuple[Path, Path]:
    creds = tmp_path / "credentials"
    creds.mkdir()
    (creds / "LAB_TOKEN").write_text("lab-secret-value")
    (creds / "LAB_TOKEN").chmod(0o600)
    return tmp_path / "lab.yaml", creds


@pytest.mark.parametrize("tt", [False, True], ids=["own-series", "tt-telemetry"])
def test_each_board_alert_fires_on_its_condition_with_its_runbook(
    cli: Cli, site: tuple[Path, Path], tmp_path: Path, tt: bool
) -> None:
    site_file, creds = site
    exporter = ", tt_telemetry: 'http://10.0.4.21:8080/metrics'" if tt else ""
    site_file.write_text(f"- {{name: a, url: 'http://10.0.4.21:8100', token_env: LAB_TOKEN{exporter}}}\n")
    out = tmp_path / "out"
    ran = cli("render", "prometheus", "--site-file", str(site_file), "--credentials-dir", str(creds), "--out", str(out))
    assert ran.returncode == 0, ran.stderr
    assert promtool("check", "config", "prometheus.yml", cwd=out).returncode == 0
    groups = yaml.safe_load((out / "tt-appliance-rules.yml").read_text())["groups"]
    rules = {r["alert"]: r for r in groups[1]["rules"]}
    assert tuple(rules) == BOARD_ALERTS and all(r["annotations"]["runbook"] for r in rules.values())
    jobs = {s["job_name"]: s for s in yaml.safe_load((out / "prometheus.yml").read_text())["scrape_configs"]}
    if tt:
        assert jobs["lab-tt-telemetry"]["static_configs"] == [
            {"targets": ["10.0.4.21:8080"], "labels": {"appliance": "a"}}
        ]
        assert "tt_arc_heartbeat" in rules["ApplianceBoardHeartbeatStalled"]["expr"]
    else:
        assert "lab-tt-telemetry" not in jobs
    series = [{"series": name, "values": values} for name, values in (TT_SERIES if tt else OWN_SERIES).items()]
    tests = {
        "rule_files": ["tt-appliance-rules.yml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": cases(rules, tt)}],
    }
    (out / "tests.yml").write_text(yaml.safe_dump(tests))
    tested = promtool("test", "rules", "tests.yml", cwd=out)
    assert tested.returncode == 0, tested.stdout + tested.stderr


@pytest.mark.parametrize("tt", [False, True], ids=["own-series", "tt-telemetry"])
def test_the_dashboard_has_a_board_row_on_the_series_the_site_has(cli: Cli, site: tuple[Path, Path], tt: bool) -> None:
    site_file, _ = site
    exporter = ", tt_telemetry: 'http://10.0.4.21:8080/metrics'" if tt else ""
    site_file.write_text(f"- {{name: a, url: 'http://10.0.4.21:8100', token_env: LAB_TOKEN{exporter}}}\n")
    ran = cli("render", "grafana", "--site-file", str(site_file))
    assert ran.returncode == 0, ran.stderr
    panels = json.loads(ran.stdout)["panels"]
    row = [p["title"] for p in panels].index("Boards")
    board = panels[row + 1 :]
    assert panels[row]["type"] == "row" and len(board) == 6
    exprs = " ".join(t["expr"] for p in board for t in p["targets"])
    if tt:
        assert 'tt_asic_temperature_celsius{job="lab-tt-telemetry"}' in exprs and "tt_arc_heartbeat" in exprs
    else:
        assert 'appliance_board_temperature_celsius{job="lab"}' in exprs and "appliance_board_heartbeat_age" in exprs
    assert 'appliance_board_state{job="lab"} == 1' in exprs  # the appliance's verdict either way


async def test_a_real_prometheus_scrapes_an_appliances_boards_and_the_recorded_tt_telemetry_page(
    tmp_path: Path,
) -> None:
    """The recorded appliance's control API with a monitor on the recorded T3K tree, and the exporter page, each over
    real HTTP, scraped by the real Prometheus with the jobs, token file and labels the render gives."""
    page = (BOARDS / "tt-telemetry-t3k.txt").read_text()
    (tmp_path / "token").write_text("recorded-token")

    async def exporter(_: Request) -> PlainTextResponse:
        return PlainTextResponse(page, media_type="text/plain; version=0.0.4")

    watch = board_monitor(BoardsConfig(), (0, 1, 2, 3), root=HOSTS / "t3k")
    await watch.sample()
    with (
        recorded_api(boards=watch.view) as api,
        serving(api.app) as control,
        serving(Starlette(routes=[Route("/metrics", exporter)])) as tt,
    ):
        (tmp_path / "prometheus.yml").write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "200ms"},
                    "scrape_configs": [
                        {
                            "job_name": "lab",
                            "authorization": {"type": "Bearer", "credentials_file": str(tmp_path / "token")},
                            "static_configs": [
                                {"targets": [control.removeprefix("http://")], "labels": {"appliance": "a"}}
                            ],
                        },
                        {
                            "job_name": "lab-tt-telemetry",
                            "static_configs": [{"targets": [tt.removeprefix("http://")], "labels": {"appliance": "a"}}],
                        },
                    ],
                }
            )
        )
        with running_prometheus(tmp_path / "prometheus.yml", tmp_path / "tsdb") as port:
            chips = await query_until(port, 'tt_asic_temperature_celsius{job="lab-tt-telemetry",appliance="a"}', 9)
            boards = await query_until(port, 'appliance_board_temperature_celsius{job="lab",appliance="a"}', 4)
    assert {r["metric"]["hostname"] for r in chips} == {"t3k-lab-07", "t3k-lab-08"}
    assert {(r["metric"]["board"], r["metric"]["slot"]) for r in boards} == {(str(b), "engine") for b in range(4)}
