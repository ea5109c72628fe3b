"""Host discovery on recorded sysfs trees and tt-smi snapshots (constructed to the documented
format: testkit/data/hosts/README.md), plus a real `tt-smi` executable on PATH."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from appliance.compat.resolve import mesh_for_host
from appliance.host.discovery import device_lock_name, discover_host, free_disk
from appliance.host.tt_smi import parse_tt_smi
from testkit.paths import DATA

HOSTS = DATA / "hosts"
SNAPSHOT = DATA / "tt-smi" / "t3k-snapshot.json"


def tt_smi_script(tmp_path: Path, body: str) -> Path:
    """A `tt-smi` executable: the real tool cannot exist without boards, its output can."""
    script = tmp_path / "bin" / "tt-smi"
    script.parent.mkdir(exist_ok=True)
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return script


def test_a_t3k_tree_shows_four_n300_boards_with_firmware_kmd_and_hugepages() -> None:
    host = discover_host(HOSTS / "t3k")
    assert [b.card_type for b in host.boards] == ["n300"] * 4
    assert {b.firmware for b in host.boards} == {"18.6.0"} and host.kmd_version == "2.1.0"
    assert host.board_type == "n300"
    assert host.hugepages_1g is not None and (host.hugepages_1g.total, host.hugepages_1g.free) == (4, 4)
    assert host.hugepages_1g.mount == "/dev/hugepages-1G"
    assert host.mem_available_bytes == 501_230_112 * 1024


@pytest.mark.parametrize(
    ("tree", "mesh"), [("n150", "n150"), ("n300", "n300"), ("t3k", "t3k"), ("galaxy", "galaxy"), ("p150", "p150")]
)
def test_recorded_boards_map_to_their_mesh(tree: str, mesh: str) -> None:
    assert mesh_for_host(discover_host(HOSTS / tree)) == mesh


def test_a_p150_without_a_1g_pool_reports_zero_pages_and_no_mount() -> None:
    pages = discover_host(HOSTS / "p150").hugepages_1g
    assert pages is not None and pages.total == 0 and pages.mount is None


def test_this_machine_has_no_boards_but_reports_memory() -> None:
    host = discover_host()
    assert host.boards == () and host.mem_total_bytes and host.mem_available_bytes
    assert host.tt_smi is None and host.tt_smi_error is None  # tt-smi is opt-in


def test_a_tt_smi_snapshot_gives_chips_firmware_driver_and_numeric_telemetry() -> None:
    snapshot = parse_tt_smi(SNAPSHOT.read_text())
    assert snapshot.kmd_version == "2.1.0" and snapshot.tt_smi_version == "3.0.30"
    assert [d.board_type for d in snapshot.devices[:2]] == ["n300 L", "n300 R"]
    assert {d.board_name for d in snapshot.devices} == {"n300"} and len(snapshot.devices) == 8
    first = snapshot.devices[0]
    assert (first.asic_temperature_c, first.power_w, first.aiclk_mhz) == (44.1, 21.3, 500.0)
    assert snapshot.devices[1].bus_id is None  # "N/A" on the remote chip
    assert snapshot.processes == ()


def test_text_that_is_not_a_snapshot_is_refused() -> None:
    with pytest.raises(ValueError, match="no device_info"):
        parse_tt_smi('{"host_info": {}}')
    with pytest.raises(ValueError, match="not JSON"):
        parse_tt_smi("Gathering Information ━━━━")


def test_discovery_runs_tt_smi_when_asked(tmp_path: Path) -> None:
    script = tt_smi_script(tmp_path, f"cat {SNAPSHOT}")
    host = discover_host(HOSTS / "t3k", tt_smi=str(script))
    assert host.tt_smi is not None and len(host.tt_smi.devices) == 8 and host.tt_smi_error is None


def test_a_hanging_tt_smi_is_cut_off_by_the_timeout(tmp_path: Path) -> None:
    script = tt_smi_script(tmp_path, "exec sleep 30")
    host = discover_host(HOSTS / "t3k", tt_smi=str(script), timeout_s=0.5)
    assert host.tt_smi is None and host.tt_smi_error == f"{script} -s did not answer within 0.5s"
    assert len(host.boards) == 4  # the sysfs facts do not depend on tt-smi


def test_a_failing_or_missing_tt_smi_is_explained(tmp_path: Path) -> None:
    failing = tt_smi_script(tmp_path, "echo 'no driver' >&2; exit 3")
    assert discover_host(HOSTS / "n150", tt_smi=str(failing)).tt_smi_error == f"{failing} -s exited 3: no driver"
    missing = discover_host(HOSTS / "n150", tt_smi="tt-smi-not-installed").tt_smi_error
    assert missing == "tt-smi-not-installed is not installed"


def test_tt_smi_processes_name_who_holds_a_device(tmp_path: Path) -> None:
    data = json.loads(SNAPSHOT.read_text())
    data["processes"] = [{"pid": 4242, "user": "svc", "device": "/dev/tenstorrent/0", "cmdline": "python -m vllm"}]
    snapshot = parse_tt_smi(json.dumps(data))
    assert snapshot.processes[0].pid == 4242 and snapshot.processes[0].device == "/dev/tenstorrent/0"


def test_free_disk_measures_the_nearest_existing_parent(tmp_path: Path) -> None:
    where, free = free_disk(tmp_path / "not" / "yet" / "made")
    assert where == tmp_path and free == shutil.disk_usage(tmp_path).free


def test_the_device_lock_is_named_after_the_device_nodes() -> None:
    assert device_lock_name(discover_host(HOSTS / "t3k").boards) == "tenstorrent-0-1-2-3"
