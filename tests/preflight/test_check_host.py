"""Host preflight checks on recorded TT host trees, and the blocking subset `appliance serve` runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.compat.matrix import load_matrix
from appliance.compat.resolve import resolve_config
from appliance.compat.validate import validate
from appliance.errors import LaunchError
from appliance.host.discovery import discover_host
from appliance.plan import build_plan
from appliance.preflight.checks import host_checks, params_from_name, require_host_ready
from appliance.preflight.results import HostCheckInput
from testkit.helpers import TINY, free_ports
from tests.host.test_host import HOSTS, SNAPSHOT, tt_smi_script

LLAMA_70B = ("+model=llama", "mesh=t3k", "model.checkpoint=meta-llama/Llama-3.3-70B-Instruct")


def given(root: Path | None, *overrides: str, tt_smi: str | None = None) -> HostCheckInput:
    host = discover_host(root, tt_smi=tt_smi) if root else discover_host()
    matrix = load_matrix()
    validated = validate(resolve_config(list(overrides), matrix, lambda: host), matrix)
    return HostCheckInput(validated, build_plan(validated), host)


def results(given_input: HostCheckInput) -> dict[str, tuple[str, str, str]]:
    return {r.id: (r.status, r.summary, r.fix) for r in host_checks(given_input)}


def test_the_cpu_default_passes_every_host_check_on_this_machine() -> None:
    found = results(given(None))
    assert {status for status, _, _ in found.values()} == {"pass"}, found


def test_a_mesh_the_boards_cannot_form_fails_and_names_the_mesh_they_can() -> None:
    status, summary, fix = results(given(HOSTS / "n150", "+model=llama", "mesh=t3k"))["host.mesh"]
    assert status == "fail"
    assert summary == "mesh=t3k needs 4 n300 board(s); this host has 1 board(s) of type n150"
    assert fix == "Use mesh=n150, which this host's boards form"


def test_mesh_auto_on_a_t3k_picks_t3k_and_the_boards_form_it() -> None:
    checked = given(HOSTS / "t3k", "+model=llama")
    assert checked.plan.mesh == "t3k"
    assert results(checked)["host.mesh"][:2] == ("pass", "4 n300 board(s)")


def test_firmware_and_kmd_below_the_row_minimum_fail() -> None:
    found = results(given(HOSTS / "t3k", *LLAMA_70B))
    assert found["host.firmware"][:2] == (
        "fail",
        "18.6.0 is below 18.8.0, the minimum for meta-llama/Llama-3.3-70B-Instruct on t3k",
    )
    assert found["host.kmd"][:2] == (
        "fail",
        "2.1.0 is below 2.2.0, the minimum for meta-llama/Llama-3.3-70B-Instruct on t3k",
    )
    assert found["host.kmd"][2] == "Install a newer tt-kmd to ≥ 2.2.0"


def test_boards_with_different_firmware_warn(tmp_path: Path) -> None:
    tree = shutil.copytree(HOSTS / "t3k", tmp_path / "t3k")
    for index, version in enumerate(["18.8.0", "18.8.0", "18.9.0", "18.8.0"]):
        (tree / "sys" / "class" / "tenstorrent" / f"tenstorrent!{index}" / "tt_fw_bundle_ver").write_text(version)
    (tree / "sys" / "module" / "tenstorrent" / "version").write_text("2.2.0")
    found = results(given(tree, *LLAMA_70B))
    assert found["host.firmware"][:2] == ("warn", "boards differ: 18.8.0, 18.9.0")
    assert found["host.kmd"][:2] == ("pass", "2.2.0 ≥ 2.2.0")


def test_tt_without_1g_hugepages_fails() -> None:
    status, summary, fix = results(given(HOSTS / "p150", "+model=llama", "mesh=p150"))["host.hugepages"]
    assert status == "fail" and summary == "1 free page(s) needed; 0 free of 0, mount None"
    assert "/dev/hugepages-1G" in fix


def test_devices_held_by_another_process_fail_and_are_unknown_without_tt_smi(tmp_path: Path) -> None:
    assert results(given(HOSTS / "t3k", "+model=llama"))["host.holders"][0] == "unknown"
    data = json.loads(SNAPSHOT.read_text())
    data["processes"] = [{"pid": 4242, "user": "svc", "device": "/dev/tenstorrent/0", "cmdline": "python -m vllm"}]
    (tmp_path / "held.json").write_text(json.dumps(data))
    script = tt_smi_script(tmp_path, f"cat {tmp_path / 'held.json'}")
    status, summary, _ = results(given(HOSTS / "t3k", "+model=llama", tt_smi=str(script)))["host.holders"]
    assert (status, summary) == ("fail", "1 process(es) hold Tenstorrent devices")
    free = tt_smi_script(tmp_path, f"cat {SNAPSHOT}")
    assert results(given(HOSTS / "t3k", "+model=llama", tt_smi=str(free)))["host.holders"][0] == "pass"


def test_require_host_ready_names_every_blocking_failure_in_one_error() -> None:
    with pytest.raises(LaunchError) as caught:
        require_host_ready(given(HOSTS / "t3k", *LLAMA_70B))
    assert "Firmware bundle: 18.6.0 is below 18.8.0" in str(caught.value)
    assert "Kernel driver (tt-kmd): 2.1.0 is below 2.2.0" in str(caught.value)


@pytest.mark.parametrize(
    ("checkpoint", "billions"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", 8.0),
        ("openai/gpt-oss-120b", 120.0),
        ("Qwen/Qwen3-30B-A3B", 30.0),
        ("google/gemma-3-4b-it", 4.0),
        ("deepseek-ai/DeepSeek-R1-0528", None),
        ("Qwen/Qwen2.5-VL-7B-Instruct", 7.0),
    ],
)
def test_the_parameter_count_is_read_from_the_checkpoint_name(checkpoint: str, billions: float | None) -> None:
    assert params_from_name(checkpoint) == billions


def test_disk_need_drops_the_weights_once_they_are_in_the_hub_cache(tmp_path: Path) -> None:
    overrides = ("+model=llama", "mesh=n150", f"paths.cache_dir={tmp_path}")

    def need() -> int:
        disk = next(r for r in host_checks(given(HOSTS / "n150", *overrides)) if r.id == "host.disk")
        return int(disk.evidence["need_bytes"])

    before = need()
    (tmp_path / "hf" / "hub" / "models--meta-llama--Llama-3.1-8B-Instruct").mkdir(parents=True)
    assert (before, need()) == (24_000_000_000, 8_000_000_000)  # bf16 weights + bfp8 tensor cache, then the cache


def test_serve_refuses_a_kv_cache_larger_than_memory_before_spawning_anything(tmp_path: Path) -> None:
    done = subprocess.run(
        # engine.python: any interpreter that exists, so the fast tier needs no built engine to reach the memory check
        [
            sys.executable,
            "-m",
            "appliance.cli",
            "serve",
            TINY,
            "engine.env.VLLM_CPU_KVCACHE_SPACE=4096",
            f"engine.python={sys.executable}",
            *(f"{key}.port={port}" for key, port in zip(("serving", "control"), free_ports(2), strict=True)),
        ],
        env=os.environ | {"APPLIANCE_CACHE_DIR": str(tmp_path / "cache")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3, done.stderr
    errors = done.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("error: Free memory: ") and "4096 GiB KV cache" in errors[0]
    assert "spawning" not in done.stdout + done.stderr
    assert not (tmp_path / "cache" / "models").exists()  # not even the model was built
