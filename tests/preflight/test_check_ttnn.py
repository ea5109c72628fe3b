"""The ttnn probe against the real ttnn package (.engines/ttnn, Python 3.12; `make engine-ttnn`).

This machine has no chips, so ttnn raises "No chips detected in the cluster", which the probe
must report as 0 devices, not as a failure.
"""

from __future__ import annotations

from pathlib import Path

import filelock

from appliance.engines.engine_env import probe_ttnn
from appliance.host.discovery import discover_host
from appliance.preflight.pilot import ttnn_check
from appliance.preflight.results import HostCheckInput
from tests.host.test_host import HOSTS
from tests.preflight.test_check_host import given


def test_ttnn_imports_and_counts_zero_chips_on_a_host_without_boards(ttnn_engine: Path) -> None:
    probe = probe_ttnn(str(ttnn_engine))
    assert probe.imported and probe.error is None
    assert (probe.chips, probe.pcie_chips) == (0, 0)
    assert probe.version == "0.81.1"


def test_the_ttnn_check_passes_for_the_cpu_default_when_ttnn_agrees_with_sysfs(ttnn_engine: Path) -> None:
    checked = given(None)
    result = ttnn_check(checked.validated, checked.host, probe_ttnn(str(ttnn_engine)))
    assert (result.status, result.summary) == ("pass", "ttnn 0.81.1 counts 0 chip(s)")


def test_a_t3k_whose_chips_ttnn_cannot_see_fails_the_tt_config(ttnn_engine: Path) -> None:
    checked: HostCheckInput = given(HOSTS / "t3k", "+model=llama")
    result = ttnn_check(checked.validated, checked.host, probe_ttnn(str(ttnn_engine)))
    assert result.status == "fail"
    assert result.summary.startswith("ttnn counts 0 chip(s) (0 on PCIe), /dev/tenstorrent has 4 board(s)")


def test_an_interpreter_without_ttnn_fails_a_tt_config(cpu_engine: Path) -> None:
    checked = given(HOSTS / "n150", "+model=llama")
    probe = probe_ttnn(str(cpu_engine))
    result = ttnn_check(checked.validated, checked.host, probe)
    assert result.status == "fail" and "No module named 'ttnn'" in result.summary
    assert "platform_plugin() returns None" in result.fix


def test_chips_are_not_counted_while_another_appliance_holds_the_devices(ttnn_engine: Path, tmp_path: Path) -> None:
    boards = discover_host(HOSTS / "t3k").boards
    (tmp_path / "tenstorrent-0-1-2-3.owner").write_text("pid 99, site lab, meta-llama/Llama-3.1-8B-Instruct\n")
    with filelock.FileLock(tmp_path / "tenstorrent-0-1-2-3.lock"):
        probe = probe_ttnn(str(ttnn_engine), boards, tmp_path)
    assert probe.skipped == "the devices are held by pid 99, site lab, meta-llama/Llama-3.1-8B-Instruct"
    assert probe.chips is None
