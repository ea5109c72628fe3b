"""Slots files composed, validated and planned through the real conf/ and matrix: the shipped
T3K, Galaxy and cpu-pair examples, and every collision refused in one line naming both slots.

The commands run in-process (the `cli` fixture); tests/cli/test_cli.py runs the console script itself."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from appliance.compat.matrix import CompatibilityMatrix
from appliance.errors import ConfigError
from appliance.slots.declare import load_slots
from appliance.slots.plan import VISIBILITY, HostPlan, plan_host
from testkit.helpers import Cli
from testkit.paths import ROOT


def host_plan(matrix: CompatibilityMatrix, name: str, *overrides: str, cpus: tuple[int, ...] = (0, 1)) -> HostPlan:
    return plan_host(load_slots(name), [f"slots={name}", *overrides], matrix, cpus=cpus)


def problems(matrix: CompatibilityMatrix, name: str, *overrides: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        host_plan(matrix, name, *overrides)
    return [p.render() for p in caught.value.problems]


def test_the_t3k_example_gives_each_8b_engine_its_own_n300_board(matrix: CompatibilityMatrix) -> None:
    plan = host_plan(matrix, "t3k-4x8b")
    assert [s.devices for s in plan.slots] == [(0,), (1,), (2,), (3,)]
    for slot in plan.slots:
        assert slot.plan.checkpoint == "meta-llama/Llama-3.1-8B-Instruct"
        assert (slot.plan.mesh, slot.plan.env["MESH_DEVICE"]) == ("n300", "N300")
        assert slot.plan.env[VISIBILITY] == str(slot.devices[0])
    assert len({s.plan.env["TT_CACHE_PATH"] for s in plan.slots}) == 4
    assert len({s.plan.log_dir for s in plan.slots}) == 4
    assert len({s.plan.port for s in plan.slots}) == 4


def test_the_galaxy_example_splits_its_32_chips_into_four_disjoint_t3k_submeshes(matrix: CompatibilityMatrix) -> None:
    plan = host_plan(matrix, "galaxy-4x70b")
    seen = [set(s.plan.env[VISIBILITY].split(",")) for s in plan.slots]
    assert [len(s) for s in seen] == [8, 8, 8, 8]
    assert set.union(*seen) == {str(i) for i in range(32)}
    assert all(s.plan.env["MESH_DEVICE"] == "T3K" and s.plan.mesh == "galaxy_t3k" for s in plan.slots)


def test_the_cpu_pair_pins_each_engine_to_its_own_core(matrix: CompatibilityMatrix) -> None:
    plan = host_plan(matrix, "cpu-pair")
    assert [(s.name, s.plan.env["VLLM_CPU_OMP_THREADS_BIND"]) for s in plan.slots] == [("left", "0"), ("right", "1")]
    assert all(VISIBILITY not in s.plan.env for s in plan.slots)
    assert plan.slots[0].plan.provenance["serving.port"].endswith("conf/slots/cpu-pair.yaml")


def test_an_override_addresses_one_slot_by_name(matrix: CompatibilityMatrix) -> None:
    plan = host_plan(matrix, "t3k-4x8b", "slots.chat.serving.max_context=8192")
    assert [s.plan.max_context for s in plan.slots][0] == 8192
    assert plan.slots[1].plan.max_context != 8192
    assert plan.slots[0].plan.provenance["serving.max_context"] == "command line"
    assert plan.slots[0].plan.config_hash != host_plan(matrix, "t3k-4x8b").slots[0].plan.config_hash


def test_cores_split_evenly_when_no_slot_names_them(matrix: CompatibilityMatrix) -> None:
    plan = plan_host(
        load_slots("cpu-pair"), ["slots.left.cores=null", "slots.right.cores=null"], matrix, cpus=(0, 1, 2, 3)
    )
    assert [s.cores for s in plan.slots] == [(0, 1), (2, 3)]


def test_overlapping_devices_are_refused_naming_both_slots(matrix: CompatibilityMatrix) -> None:
    assert problems(matrix, "t3k-4x8b", "slots.code.devices=[0]") == [
        "error[slot-device-overlap] slots.code.devices: slots chat and code both claim device(s) [0]. "
        "Give each slot its own devices"
    ]


def test_overlapping_cores_are_refused_naming_both_slots(matrix: CompatibilityMatrix) -> None:
    assert problems(matrix, "cpu-pair", "slots.right.cores=[0]") == [
        "error[slot-core-overlap] slots.right.cores: slots left and right both claim core(s) [0]. "
        "Give each slot its own cores"
    ]


def test_two_slots_on_one_port_are_refused_naming_both(matrix: CompatibilityMatrix) -> None:
    found = problems(matrix, "cpu-pair", "slots.right.serving.port=8001")
    assert found == [
        "error[slot-port-collision] slots.right.serving.port: slots left and right both serve on port "
        "8001. Set slots.right.serving.port to a free port"
    ]


def test_a_slot_larger_than_the_host_is_refused(matrix: CompatibilityMatrix) -> None:
    found = problems(matrix, "t3k-4x8b", "slots.chat.mesh=galaxy", "slots.chat.devices=any")
    assert any(
        p.startswith("error[slot-larger-than-host] slots.chat.mesh: slot chat: mesh=galaxy takes 32") for p in found
    )


def test_every_finding_of_every_slot_comes_together(matrix: CompatibilityMatrix) -> None:
    found = problems(
        matrix,
        "t3k-4x8b",
        "slots.code.devices=[0]",
        "slots.spare.serving.port=8001",
        "slots.router.serving.max_context=lots",
    )
    codes = sorted(p.split("]")[0] for p in found)
    assert codes == ["error[bad-type", "error[slot-device-overlap", "error[slot-port-collision"]
    assert any(p.startswith("error[bad-type] slots.router.serving.max_context: slot router:") for p in found)


def test_a_t3k_slot_takes_all_four_boards_and_leaves_none(matrix: CompatibilityMatrix) -> None:
    found = problems(matrix, "t3k-4x8b", "slots.chat.mesh=t3k", "slots.chat.devices=any", "slots.code.devices=any")
    assert any("slot code: mesh=n300 needs 1 free device(s); 0 of the host's 4 are left" in p for p in found)


def test_a_slots_file_in_the_site_dir_is_found_and_a_bad_one_refused_naming_the_file(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "slots").mkdir()
    shipped = yaml.safe_load((ROOT / "conf" / "slots" / "cpu-pair.yaml").read_text())
    (tmp_path / "slots" / "mine.yaml").write_text(yaml.safe_dump(shipped))
    (tmp_path / "slots" / "bad.yaml").write_text("host: cpu\nslots: {a: {devics: [0]}}\n")
    ok = cli("validate", "slots=mine", "--site-dir", str(tmp_path))
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines()[-1].startswith("ok: 2 slots on host cpu (mine, ")
    bad = cli("validate", "slots=bad", "--site-dir", str(tmp_path))
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.startswith("error[unknown-key] slots.a.devics: ") and "bad.yaml:2: " in bad.stderr
    assert "Did you mean `devices`?" in bad.stderr and len(bad.stderr.splitlines()) == 1


def test_plan_and_render_print_every_slot(cli: Cli, tmp_path: Path) -> None:
    plan = cli("plan", "slots=t3k-4x8b")
    assert plan.returncode == 0, plan.stderr
    lines = [line for line in plan.stdout.splitlines() if not line.startswith("#")]
    assert [f"{VISIBILITY}={i}" in line for i, line in enumerate(lines)] == [True] * 4
    k8s = cli("render", "k8s", "slots=t3k-4x8b", "--out", str(tmp_path / "k8s"))
    assert k8s.returncode == 0, k8s.stderr
    files = sorted(p.name for p in (tmp_path / "k8s").iterdir())
    assert files == [f"tt-appliance-default-{s}.yaml" for s in ("chat", "code", "router", "spare")]
    claims = [
        d for d in yaml.safe_load_all((tmp_path / "k8s" / files[0]).read_text()) if d["kind"] == "ResourceClaimTemplate"
    ]
    assert claims[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 1
    unit = cli("render", "systemd", "slots=t3k-4x8b")
    assert unit.returncode == 0, unit.stderr
    assert "serve slots=t3k-4x8b" in unit.stdout and "chat, code, router, spare on t3k" in unit.stdout


def test_kv_shares_beyond_this_hosts_memory_are_refused_naming_every_slot(cli: Cli) -> None:
    done = cli("validate", "slots=cpu-pair", "slots.left.engine.env.VLLM_CPU_KVCACHE_SPACE=100000")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("error[slots-memory] slots: cpu-pair: the slots need ")
    # 2 GiB for the engine processes (preflight's estimate) plus each slot's KV share
    left, right = (
        "left 100002.0 GiB (engine processes + 100000 GiB KV cache)",
        "right 3.0 GiB (engine processes + 1 GiB",
    )
    assert f"({left}, {right} KV cache))" in done.stderr
