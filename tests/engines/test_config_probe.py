"""The engine's own verdict before boot: vLLM's parser and config code run in the engine's interpreter.

Real cases where vLLM 0.32.0's config code refuses what the records let through: a raw
`--max-num-batched-tokens` below `max_num_seqs`, and a whole-prompt budget below the context with chunked
prefill off. Every test here runs the real CPU engine's interpreter (the engine tier).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from appliance.cli.engine_verdict import installed_classes
from appliance.compat.matrix import CompatibilityMatrix
from appliance.compat.validate import validate
from appliance.config.compose import compose_config
from appliance.engines.engine_env import run_probe
from testkit.appliance_process import Served, free_ports, seed_tiny_model, serve_command
from testkit.helpers import TINY, Cli
from testkit.paths import ROOT

pytestmark = pytest.mark.usefixtures("cpu_engine")

CPU_ARGS = '--gpu-memory-utilization,"0.2",--enforce-eager,--dtype,float32'  # conf/engine/cpu.yaml's
BELOW_SEQS = f"engine.extra_args=[{CPU_ARGS},--max-num-batched-tokens,'8']"
BELOW_CONTEXT = ("features.chunked_prefill=false", f"engine.extra_args=[{CPU_ARGS},--max-num-batched-tokens,'1024']")


def test_the_engine_accepts_the_embedded_plan_as_planned(cli: Cli) -> None:
    done = cli("plan", "--probe", "--json", TINY)
    assert done.returncode == 0, done.stderr
    probe = json.loads(done.stdout)["probe"]
    assert probe["accepted"] and probe["vllm"] == "0.32.0" and probe["differences"] == []
    effective = probe["effective"]
    assert effective["max_model_len"] == 2048 and effective["max_num_seqs"] == 16
    assert effective["enable_prefix_caching"] is False and effective["dtype"] == "float32"
    assert effective["scheduler_cls"] == "vllm.v1.core.sched.scheduler.Scheduler"
    text = cli("plan", "--probe", TINY, "engine.scheduler=phased")
    assert text.returncode == 0, text.stderr
    assert "scheduler=appliance_phased.scheduler.PhasedScheduler" in text.stdout and "as planned" in text.stdout


def test_what_the_records_accept_and_vllm_refuses_is_refused_before_boot(cli: Cli) -> None:
    assert cli("plan", TINY, BELOW_SEQS).returncode == 0  # the records alone let it through
    done = cli("plan", "--probe", TINY, BELOW_SEQS)
    assert done.returncode == 2
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("error[")]
    assert line.startswith("error[engine-refused] engine: vLLM 0.32.0's own config code refused this plan: ")
    assert "must be greater than or equal to max_num_seqs (16)" in line


def test_a_budget_the_plan_sets_is_refused_offline_where_extra_args_would_repeat_it(cli: Cli) -> None:
    """Without chunked prefill the plan sets a whole-prompt budget; a second --max-num-batched-tokens would win in
    vLLM (and, below max_model_len, be refused by its config code): the plan refuses it, no engine asked."""
    done = cli("plan", TINY, *BELOW_CONTEXT)
    assert done.returncode == 2
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("error[")]
    assert line.startswith("error[flag-owned-by-config] engine.extra_args: --max-num-batched-tokens is set by the plan")


def test_serve_stops_at_the_engines_refusal_before_the_engine_spawns(tmp_path: Path) -> None:
    seed_tiny_model(tmp_path / "cache")
    engine_port, control_port = free_ports(2)
    env = os.environ | {"APPLIANCE_TOKEN": "t", "APPLIANCE_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(
        serve_command(engine_port, control_port, BELOW_SEQS), env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2, done.stderr
    assert "error[engine-refused]" in done.stderr and "Traceback" not in done.stderr
    assert "asking the engine's config code" in done.stderr
    assert "control API:" not in done.stdout  # the refusal came before the control API and the engine


def test_serve_boots_the_engine_in_the_process_that_gave_its_verdict(shared_appliance: Served) -> None:
    """vLLM is imported once for the verdict and the boot: the engine serving is the probe's gate, let go."""
    with shared_appliance.api() as api:
        state = api.state()
    assert state.pid is not None and state.restarts == 0
    argv = Path(f"/proc/{state.pid}/cmdline").read_bytes().decode().split("\0")
    assert argv[1].endswith("appliance_probe.py") and argv[2] == "gate", argv
    said = shared_appliance.output.read_text()
    assert "in the engine's process ..." in said and "as planned: every value the plan predicts" in said


def probe_wrapper(tmp_path: Path, cpu_engine: Path, body: str) -> Path:
    """The CPU engine's interpreter, except that running the probe does `body` (a hung or crashing probe)."""
    script = tmp_path / "python"
    script.write_text(f'#!/bin/sh\ncase "$*" in *appliance_probe.py*) {body};; esac\nexec {cpu_engine} "$@"\n')
    script.chmod(0o755)
    return script


@pytest.mark.parametrize(
    ("body", "says"),
    [("sleep 60", "did not finish within 3s"), ("echo boom >&2; exit 1", "exited 1 without a result: boom")],
    ids=["hung", "crashed"],
)
def test_a_probe_that_hangs_or_crashes_is_one_line_naming_the_engine_and_exit_3(
    cli: Cli, tmp_path: Path, cpu_engine: Path, body: str, says: str
) -> None:
    python = probe_wrapper(tmp_path, cpu_engine, body)
    done = cli("plan", "--probe", TINY, f"engine.python={python}", "engine.probe_timeout_s=3")
    assert done.returncode == 3, done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert line.startswith("error: config-time probe of engine cpu failed: ") and says in line
    assert "--no-probe" in line and "Traceback" not in done.stderr


def test_the_probe_leads_its_own_process_group_in_the_callers_session(tmp_path: Path, cpu_engine: Path) -> None:
    """Its group is killed whole at the bound; a session of its own would be starved beside a busy engine
    (autogroup scheduling gave a new session 4% of a core next to two serving CPU engines, the caller's 49%)."""
    fields = ", ".join(f'\\"{name}\\": $(ps -o {name}= -p $$)' for name in ("sid", "pgid", "pid"))
    said = f'echo "@@appliance-probe@@ {{{fields}}}"; exit 0'
    found = run_probe(str(probe_wrapper(tmp_path, cpu_engine, said)), "config", 30, (), {"PATH": os.environ["PATH"]})
    assert found["sid"] == os.getsid(0) and found["pgid"] == found["pid"] != os.getpgid(0), found


def test_check_reports_the_engines_verdict(cli: Cli) -> None:
    done = cli("check", "--json", TINY, BELOW_SEQS, "--releases", "build/vllm-releases.yaml")
    assert done.returncode == 1
    (result,) = [c for c in json.loads(done.stdout)["checks"] if c["id"] == "engine.config"]
    assert result["status"] == "fail" and "must be greater than or equal to max_num_seqs" in result["summary"]
    assert result["evidence"]["vllm"] == "0.32.0"


@pytest.mark.usefixtures("ttnn_engine")
def test_the_installed_class_decides_where_the_tt_metal_environment_is(
    matrix: CompatibilityMatrix, tmp_path: Path, ttnn_engine: Path
) -> None:
    """The real ttnn interpreter imports the class the plugin would load; a stand-in tt-metal `models` package on
    its PYTHONPATH (tt-metal itself cannot be had here) declares what the Galaxy class declares."""
    module = tmp_path / "models" / "demos" / "llama3_70b_galaxy" / "tt"
    module.mkdir(parents=True)
    for level in (tmp_path / "models", tmp_path / "models" / "demos", module.parent, module):
        (level / "__init__.py").touch()
    (module / "generator_vllm.py").write_text(
        "class LlamaForCausalLM:\n"
        "    model_capabilities = {'supports_sample_on_device': True, 'supports_async_decode': True}\n"
    )
    overrides = [
        "+model=llama",
        "mesh=galaxy",
        "model.checkpoint=meta-llama/Llama-3.3-70B-Instruct",
        f"engine.python={ttnn_engine}",
        f"engine.env.PYTHONPATH={tmp_path}",
    ]
    composed = compose_config(overrides)
    installed = installed_classes(composed, matrix)
    assert installed is not None
    (read,) = installed.values()
    assert read.capabilities == {"supports_sample_on_device": True, "supports_async_decode": True}
    validated = validate(composed, matrix, installed=installed)  # offline, the unverified record refuses it
    assert validated.lane_dp and validated.capabilities is not None
    assert "the installed class" in validated.capabilities.facts["supports_sample_on_device"].source
    missing = compose_config([*overrides[:-1], f"engine.env.PYTHONPATH={tmp_path / 'nowhere'}"])
    gone = installed_classes(missing, matrix)
    assert gone is not None and "No module named 'models'" in str(next(iter(gone.values())).error)


def test_the_probe_imports_nothing_of_the_appliance(cpu_engine: Path, tmp_path: Path) -> None:
    """The engine-side probe is stdlib plus the engine's own packages: run its config mode and list what loaded."""
    seed_tiny_model(tmp_path / "cache")
    script = ROOT / "engine_plugins" / "appliance_probe.py"
    argv = [
        str(script),
        "config",
        "@@",
        "--",
        "--model",
        str(tmp_path / "cache" / "models" / "tiny-llama"),
        "--max-model-len",
        "2048",
        "--dtype",
        "float32",
    ]
    code = (
        f"import runpy, sys; sys.argv = {argv!r}; runpy.run_path({str(script)!r}, run_name='__main__'); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('appliance', 'tui', 'hydra')))"
    )
    env = os.environ | {"VLLM_CPU_KVCACHE_SPACE": "1"}
    done = subprocess.run(
        [str(cpu_engine), "-I", "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env=env,
        check=True,
    )
    assert '"accepted": true' in done.stdout
    assert done.stdout.strip().endswith("[]"), done.stdout[-500:]
