"""`appliance check` as operators run it: the real console script in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .helpers import free_port
from .test_host import HOSTS, SNAPSHOT, tt_smi_script

CHECK_IDS = [
    "host.mesh", "host.firmware", "host.kmd", "host.holders", "host.hugepages", "host.disk", "host.memory",
    "host.ttnn", "pilot.cadence", "pilot.isolation", "pilot.pinning", "pilot.scheduler", "pilot.api",
]  # fmt: skip


def check(*args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    nobody = f"http://127.0.0.1:{free_port()}"  # no engine answers: the API check is unknown, not someone else's
    env = os.environ | ({"PATH": path} if path else {})
    return subprocess.run([sys.executable, "-m", "appliance.cli", "check", *args, "--engine-url", nobody],
                          capture_output=True, text=True, timeout=120, env=env)  # fmt: skip


def test_the_default_config_on_this_host_is_incomplete_only_for_want_of_an_engine() -> None:
    done = check("--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [c["id"] for c in report["checks"]] == CHECK_IDS
    assert {c["id"]: c["status"] for c in report["checks"] if c["status"] != "pass"} == {"pilot.api": "unknown"}
    assert report["verdict"] == "unknown" and report["summary"].startswith("INCOMPLETE")
    assert report["plan"]["engine"] == "cpu" and report["config"]["choices"]["mesh"] == "cpu"


def test_a_70b_on_a_t3k_with_old_firmware_is_not_ready(tmp_path: Path) -> None:
    script = tt_smi_script(tmp_path, f"cat {SNAPSHOT}")
    done = check("+model=llama", "mesh=t3k", "model.checkpoint=meta-llama/Llama-3.3-70B-Instruct",
                 "--host-root", str(HOSTS / "t3k"), path=f"{script.parent}:{os.environ['PATH']}")  # fmt: skip
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert (
        "fail    Firmware bundle: 18.6.0 is below 18.8.0, the minimum for meta-llama/Llama-3.3-70B-Instruct on t3k"
        in lines
    )
    assert "pass    Devices free: no process holds a device" in lines  # from the tt-smi snapshot
    assert lines[-1].startswith("NOT READY: a check fails")


def test_an_unreachable_release_list_makes_cadence_unknown_not_failed(tmp_path: Path) -> None:
    done = check("--json", "--releases", str(tmp_path / "none.yaml"))
    cadence = next(c for c in json.loads(done.stdout)["checks"] if c["id"] == "pilot.cadence")
    assert cadence["status"] == "unknown" and "none.yaml: no release list" in cadence["summary"]


def test_bad_input_is_one_line_without_a_traceback(tmp_path: Path) -> None:
    for args, code in ((["model=nope"], 2), (["--report", str(tmp_path / "missing" / "r.md")], 2)):
        done = check(*args)
        assert done.returncode == code and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith("error")
