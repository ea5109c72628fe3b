"""The engine's bounded share of the host (engine.host_share): its cgroup on this host's real cgroup v1 cpu controller,
cgroup v2 delegation on a directory laid out as systemd delegates a unit's cgroup (v2's cpu controller cannot be
mounted here beside v1's), the nice fallback with its one warning, the cores, and bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from appliance.host.share import owned_cores, parse_cores, place, placement_for
from testkit.appliance_process import ROOT, Served
from testkit.helpers import Cli

V1_CPU = Path("/sys/fs/cgroup/cpu")
SLEEP = [sys.executable, "-c", "import time; time.sleep(30)"]


def run_placed(placement: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen(SLEEP, preexec_fn=placement.enter)  # type: ignore[attr-defined]


@pytest.mark.skipif(not os.access(V1_CPU / "cpu.shares", os.W_OK), reason="no writable cgroup v1 cpu controller")
def test_on_cgroup_v1_the_engine_runs_in_a_group_of_its_own_weighted_below_an_ordinary_process() -> None:
    placement = placement_for(f"test-{os.getpid()}", 10, 0, None)
    assert placement.mechanism == "cgroup v1" and placement.warning is None and placement.group is not None
    group = Path(placement.group)
    assert group.parent == V1_CPU and (group / "cpu.shares").read_text().strip() == "102"  # 10 of 100 -> of 1024
    child = run_placed(placement)
    try:
        assert f":cpu:/{group.name}" in Path(f"/proc/{child.pid}/cgroup").read_text()
        assert str(child.pid) in (group / "cgroup.procs").read_text().split()
        placement.release()
        assert group.is_dir()  # still in use: kept
    finally:
        child.kill()
        child.wait()
    placement.release()
    assert not group.exists()


def delegated_unit(root: Path, pids: str) -> Path:
    """A unit's cgroup as systemd delegates it on v2 (Delegate=cpu): the cpu controller available, the appliance in
    it, nothing enabled for its children yet."""
    unit = root / "system.slice" / "tt-appliance.service"
    unit.mkdir(parents=True)
    for name, text in {
        "cgroup.controllers": "cpuset cpu io memory pids\n",
        "cgroup.procs": pids,
        "cgroup.subtree_control": "",
    }.items():
        (unit / name).write_text(text)
    return unit


def test_on_cgroup_v2_a_delegated_unit_keeps_the_appliance_in_a_leaf_and_weights_the_engines_group(
    tmp_path: Path,
) -> None:
    unit = delegated_unit(tmp_path, f"{os.getpid()}\n")
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cgroup").write_text("0::/system.slice/tt-appliance.service\n")
    placement = place("engine-8000", 20, None, proc=proc, mounts=[("cgroup v2", str(tmp_path))])
    assert placement.mechanism == "cgroup v2" and placement.group == str(unit / "tt-engine-8000")
    assert (unit / "tt-control" / "cgroup.procs").read_text() == str(os.getpid())  # out of the interior first
    assert (unit / "cgroup.subtree_control").read_text() == "+cpu"
    assert (unit / "tt-engine-8000" / "cpu.weight").read_text() == "20"
    assert placement.describe() == f"cgroup v2: {unit / 'tt-engine-8000'}, weight 20"


def test_where_no_cgroup_can_be_written_the_engine_runs_niced_and_one_warning_says_why(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cgroup").write_text("1:cpu:/\n")
    placement = place("engine-8000", 20, None, proc=proc, mounts=[("cgroup v1", str(tmp_path / "absent"))])
    assert placement.mechanism == "nice" and placement.group is None and placement.nice == 7
    assert placement.warning is not None and "\n" not in placement.warning
    assert "cgroup v1 at" in placement.warning and "No such file or directory" in placement.warning
    child = run_placed(placement)
    try:
        assert int(Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[16]) == os.nice(0) + 7
    finally:
        child.kill()
        child.wait()


def test_the_engines_threads_run_on_the_cores_it_owns(tmp_path: Path) -> None:
    assert parse_cores("0,2-3") == (0, 2, 3) and parse_cores("auto") is None and parse_cores("") is None
    assert owned_cores(0, None, (0, 1, 2, 3)) is None  # every core: nothing to bind
    assert owned_cores(1, None, (0, 1, 2, 3)) == (1, 2, 3)  # the lowest kept for the control plane
    assert owned_cores(3, (5,), (0, 1, 2, 3)) == (5,)  # a slot's cores replace the reserve
    with pytest.raises(ValueError, match="reserves 4 of the 4 cores"):
        owned_cores(4, None, (0, 1, 2, 3))
    last = max(os.sched_getaffinity(0))
    placement = place("engine-8000", 20, (last,), mounts=[])
    child = run_placed(placement)
    try:
        assert os.sched_getaffinity(child.pid) == {last}
    finally:
        child.kill()
        child.wait()


def test_a_reserve_that_leaves_the_engine_no_core_is_one_line_naming_the_key_and_nothing_starts(
    cli: Cli, tmp_path: Path
) -> None:
    cores = len(os.sched_getaffinity(0))
    done = cli("serve", "model=tiny", f"engine.host_share.reserve_cores={cores}", f"paths.state_dir={tmp_path}")
    assert done.returncode == 3, done.stderr  # a fact of this host
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error[host-share-no-core] engine.host_share.reserve_cores:") and "leaving the" in line
    assert not (tmp_path / "logs").exists() and not list(tmp_path.glob("*.lock"))


@pytest.mark.parametrize(
    "bad", ["engine.host_share.weight=0", "engine.host_share.weight=10001", "engine.host_share.reserve_cores=-1"]
)
def test_a_weight_or_reserve_out_of_range_is_one_line_naming_the_key(cli: Cli, bad: str) -> None:
    done = cli("validate", bad)
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("error[")]
    assert done.returncode == 2 and error.startswith(f"error[bad-value] {bad.partition('=')[0]}: "), done.stderr


def test_plan_shows_the_bound_and_the_rendered_unit_and_manifests_carry_it(cli: Cli, tmp_path: Path) -> None:
    plan = cli("plan")
    assert "# host share: the engine and its probe in a cgroup of their own at CPU weight 10" in plan.stdout
    assert "host share" not in cli("plan", "+model=llama", "mesh=t3k").stdout  # tt: the appliance's share
    assert cli("render", "systemd", "--out", str(tmp_path / "unit")).returncode == 0
    unit = next((tmp_path / "unit").glob("*.service")).read_text().splitlines()
    assert {"Delegate=cpu", "ProtectControlGroups=no"} <= set(unit)
    assert cli("render", "k8s", "engine.host_share.weight=50", "--out", str(tmp_path / "k8s")).returncode == 0
    manifests = "\n".join(p.read_text() for p in (tmp_path / "k8s").glob("*.yaml"))
    assert "cpu: 500m" in manifests


def test_a_served_engine_and_its_workers_run_in_its_group_and_status_says_where(shared_appliance: Served) -> None:
    state = shared_appliance.state()
    assert state.host_share is not None and state.pid is not None
    if os.access(V1_CPU / "cpu.shares", os.W_OK):
        group = V1_CPU / f"tt-engine-{shared_appliance.engine_url.rsplit(':', 1)[1]}"
        assert state.host_share == f"cgroup v1: {group}, weight 10, cores 1"  # READ_ONLY_EXTRA binds core 1
        engine = psutil.Process(state.pid)
        family = {engine.pid, *(child.pid for child in engine.children(recursive=True))}
        assert len(family) > 1 and family <= {int(pid) for pid in (group / "cgroup.procs").read_text().split()}
    shown = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "appliance"), "status", "--url", shared_appliance.control_url],
        env=os.environ | {"APPLIANCE_TOKEN": shared_appliance.token},
        capture_output=True,
        text=True,
    )
    assert f"host share: {state.host_share}" in shown.stdout, shown.stdout
