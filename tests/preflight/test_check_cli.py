"""`appliance check` as operators run it, through the command line's own entry point (in-process)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from testkit.board_scenarios import board_dir, copy_tree, hwmon_dir
from testkit.helpers import Cli, Ran, free_port
from tests.host.test_host import HOSTS, SNAPSHOT, tt_smi_script

CHECK_IDS = [
    "host.mesh",
    "host.firmware",
    "host.kmd",
    "host.holders",
    "host.boards",
    "host.hugepages",
    "host.disk",
    "host.memory",
    "host.weights",
    "host.tensor_cache",
    "host.launch",
    "host.ttnn",
    "pilot.cadence",
    "pilot.isolation",
    "pilot.pinning",
    "pilot.scheduler",
    "pilot.api",
]


def check(cli: Cli, *args: str, path: str | None = None) -> Ran:
    nobody = f"http://127.0.0.1:{free_port()}"  # no engine answers: the API check is unknown, not someone else's
    return cli("check", *args, "--engine-url", nobody, env={"PATH": path} if path else None)


@pytest.mark.usefixtures("cpu_engine", "ttnn_engine")  # the checks inspect both interpreters, and pass
def test_the_default_config_on_this_host_is_incomplete_only_for_want_of_an_engine(cli: Cli) -> None:
    done = check(cli, "--json", "--no-probe")  # the engine's own verdict: tests/engines/test_config_probe.py
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [c["id"] for c in report["checks"]] == CHECK_IDS
    assert {c["id"]: c["status"] for c in report["checks"] if c["status"] != "pass"} == {"pilot.api": "unknown"}
    assert report["verdict"] == "unknown" and report["summary"].startswith("INCOMPLETE")
    assert report["plan"]["engine"] == "cpu" and report["config"]["choices"]["mesh"] == "cpu"


def test_a_70b_on_a_t3k_with_old_firmware_is_not_ready(cli: Cli, tmp_path: Path) -> None:
    script = tt_smi_script(tmp_path, f"cat {SNAPSHOT}")
    done = check(
        cli,
        "+model=llama",
        "mesh=t3k",
        "model.checkpoint=meta-llama/Llama-3.3-70B-Instruct",
        "--host-root",
        str(HOSTS / "t3k"),
        path=f"{script.parent}:{os.environ['PATH']}",
    )
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert (
        "fail    Firmware bundle: 18.6.0 is below 18.8.0, the minimum for meta-llama/Llama-3.3-70B-Instruct on t3k"
        in lines
    )
    assert "pass    Devices free: no process holds a device" in lines  # from the tt-smi snapshot
    assert "pass    Board health: 4 board(s), hottest tenstorrent!3 at 46.2 C" in lines
    assert lines[-1].startswith("NOT READY: a check fails")


def test_a_hot_board_with_past_trips_is_a_warning_in_check_and_the_pilot_report(cli: Cli, tmp_path: Path) -> None:
    """The recorded T3K tree (shaped: testkit/data/boards/README.md) with board 1 hot and one trip since the driver
    loaded, and board 2's power attribute unreadable."""
    root = copy_tree("t3k", tmp_path)
    (hwmon_dir(root, "1") / "temp1_input").write_text("98500\n")
    (board_dir(root, "1") / "tt_therm_trip_count").write_text("1\n")
    report = tmp_path / "pilot.md"
    done = check(cli, "+model=llama", "mesh=t3k", "--host-root", str(root), "--report", str(report), "--no-probe")
    lines = done.stdout.splitlines()
    assert (
        "warn    Board health: tenstorrent!1 at 98.5 C (trip 105 C); tenstorrent!1 tripped 1 time(s) since the "
        "driver loaded"
    ) in lines
    text = report.read_text()
    assert "- board health: 0: 44.1 °C, 41 W, aiclk 500 MHz, heartbeat 118263, trips 0; 1: 98.5 °C" in text
    assert "- tenstorrent!1: n300, fw 18.6.0, 98.5 C (trip 105 C), 41.4 W, aiclk 500 MHz" in text
    assert "- source: sysfs and hwmon" in text


@pytest.mark.engine  # the pilot checks run the engines' interpreters
def test_an_unreachable_release_list_makes_cadence_unknown_not_failed(cli: Cli, tmp_path: Path) -> None:
    done = check(cli, "--json", "--releases", str(tmp_path / "none.yaml"))
    cadence = next(c for c in json.loads(done.stdout)["checks"] if c["id"] == "pilot.cadence")
    assert cadence["status"] == "unknown" and "none.yaml: no release list" in cadence["summary"]


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["model=nope"], id="unknown option"),
        # The report is written after the checks ran, and so after the engines' interpreters.
        pytest.param(["--report", "{tmp}/missing/r.md"], id="unwritable report", marks=pytest.mark.engine),
    ],
)
def test_bad_input_is_one_line_without_a_traceback(cli: Cli, tmp_path: Path, args: list[str]) -> None:
    done = check(cli, *(a.format(tmp=tmp_path) for a in args))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith("error")


def test_without_hwmon_the_check_reads_the_boards_from_the_tt_smi_snapshot(cli: Cli, tmp_path: Path) -> None:
    """A recorded N300 tree whose hwmon directory is gone (an older tt-kmd) and its recorded tt-smi snapshot, in
    which chip 1's DRAM did not train."""
    root = copy_tree("n300", tmp_path)
    shutil.rmtree(hwmon_dir(root, "0").parent)
    snapshot = json.loads((HOSTS.parent / "tt-smi" / "n300-snapshot.json").read_text())
    snapshot["device_info"][1]["board_info"]["dram_status"] = False
    (tmp_path / "snapshot.json").write_text(json.dumps(snapshot))
    script = tt_smi_script(tmp_path, f"cat {tmp_path / 'snapshot.json'}")
    done = check(
        cli,
        "+model=llama",
        "mesh=n300",
        "--host-root",
        str(root),
        "--json",
        "--no-probe",
        path=f"{script.parent}:{os.environ['PATH']}",
    )
    boards = next(c for c in json.loads(done.stdout)["checks"] if c["id"] == "host.boards")
    assert boards["status"] == "fail" and boards["summary"].startswith("DRAM did not train on chip(s) 1")
    assert boards["evidence"]["tt-smi chip 1"].startswith("n300 R, fw 18.6.0, 43.6 C (trip 105 C)")
    assert boards["evidence"]["source"] == "tt-smi snapshot"
