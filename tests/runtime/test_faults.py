"""The fault ladder: every rule is exercised by a line the record shows, and classifies it into cause and next step."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from appliance.errors import ConfigError
from appliance.runtime.faults import load_fault_ladder
from testkit.paths import DATA

FAULTS = DATA / "faults"
RECORDED = [
    tuple(line.split("\t", 1))
    for line in (FAULTS / "recorded-lines.tsv").read_text().splitlines()
    if line and not line.startswith("#")
]


def test_every_rule_has_a_source_and_a_recorded_line() -> None:
    ladder = load_fault_ladder()
    assert {rule.id for rule in ladder.rules} == {rule_id for rule_id, _ in RECORDED}
    assert all(rule.source and rule.next_step for rule in ladder.rules)


@pytest.mark.parametrize(("rule_id", "line"), RECORDED, ids=[f"{r}-{i}" for i, (r, _) in enumerate(RECORDED)])
def test_a_recorded_line_is_classified_by_its_rule_with_its_values_filled_in(rule_id: str, line: str) -> None:
    fault = load_fault_ladder().classify(line)
    assert fault is not None and fault.rule == rule_id
    assert "{" not in fault.cause + fault.next_step and "?" not in fault.cause
    assert "\n" not in fault.render()


def test_the_real_ttnn_no_chips_output_is_a_device_fault_with_a_next_step() -> None:
    """Recorded from the real ttnn 0.81.1 wheel on this host (no boards): open_device's own output."""
    faults = [
        f
        for line in (FAULTS / "ttnn-0.81.1-open-device-no-chips.log").read_text().splitlines()
        if (f := load_fault_ladder().classify(line))
    ]
    assert faults and faults[0].rule == "no-chips" and faults[0].device
    assert "/dev/tenstorrent" in faults[0].next_step


def test_ordinary_boot_lines_are_not_faults() -> None:
    boot = (DATA / "vllm-cpu-boot.log").read_text().splitlines()
    assert [line for line in boot if load_fault_ladder().classify(line)] == []


def test_values_from_the_line_name_the_device_and_the_holder() -> None:
    fault = load_fault_ladder().classify(RECORDED[0][1])
    assert fault is not None and "pid 72566" in fault.cause and "/proc/driver/tenstorrent/5/pids" in fault.next_step


def test_a_malformed_ladder_is_refused_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "faults.yaml"
    bad.write_text("rules:\n  - id: x\n    pattern: y\n")
    with pytest.raises(ConfigError, match=re.escape(str(bad))):
        load_fault_ladder(bad)
