"""Test and bench helpers: free ports, plans pointed at a child script, lifecycle waits, the CLI in-process."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import pytest

from appliance.cli.main import main
from appliance.compat.matrix import load_matrix
from appliance.compat.validate import validate
from appliance.config.compose import compose_config
from appliance.plan import LaunchPlan, build_plan
from appliance.runtime.lifecycle import EngineState
from appliance.runtime.supervisor import EngineSupervisor

from .paths import ROOT

FAKE_ENGINE = Path(__file__).with_name("fake_engine.py")
REPLAY_ENGINE = Path(__file__).with_name("replay_engine.py")
# The Hypothesis profile (tests/conftest.py): "ci" under `make test`, "dev" otherwise.
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "dev")
# Generated-input tests that run a full Hydra composition (about 0.45 s) per example: the ci
# profile's 1,000 under `make test`, a sample in the fast tier.
COMPOSING_EXAMPLES = 1000 if PROFILE == "ci" else 20
DATA = Path(__file__).with_name("data")
"""Recorded real data (engine logs, /metrics pages, sysfs trees) for sources that cannot exist here."""


def promtool(*args: str, stdin: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Prometheus's promtool (Debian's prometheus package, `make prometheus`) with `args`."""
    binary = shutil.which("promtool")
    assert binary, "promtool is missing: `make prometheus` installs Debian's prometheus package"
    return subprocess.run([binary, *args], input=stdin, capture_output=True, text=True, cwd=cwd, timeout=60)


CHECKOV = ROOT / ".tools" / "checkov" / "bin" / "checkov"
"""checkov, the manifests' policy check, in a venv of its own (`make checkov`)."""


def checkov_report(folder: Path) -> dict[str, Any]:
    """checkov's JSON report on the Kubernetes manifests under `folder`."""
    if not CHECKOV.is_file():
        pytest.fail(f"checkov is not installed at {CHECKOV.relative_to(ROOT)}: `make checkov` installs it", False)
    command = [str(CHECKOV), "-d", str(folder), "--framework", "kubernetes", "-o", "json", "--skip-download"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def free_ports(count: int) -> tuple[int, ...]:
    """`count` distinct free ports: bound all at once, so (unlike two `free_port()` calls) no two are the same."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return tuple(int(sock.getsockname()[1]) for sock in socks)


def free_port() -> int:
    return free_ports(1)[0]


# The serving-path tests run the tiny model: it boots in seconds; the embedded default (smollm2)
# is booted once, by the quality tests.
TINY = "model=tiny"


def cpu_plan(tmp_path: Path, *overrides: str, model: str = "tiny") -> LaunchPlan:
    """The real CPU plan of `model` (the tiny one unless told), with its state and logs under tmp_path."""
    return build_plan(
        validate(
            compose_config(
                [
                    "mesh=cpu",
                    "engine=cpu",
                    f"model={model}",
                    f"paths.state_dir={tmp_path}/state",
                    f"paths.log_dir={tmp_path}/logs",
                    *overrides,
                ]
            ),
            load_matrix(),
        )
    )


def fake_plan(tmp_path: Path, *fake_args: str, ready_timeout_s: float = 20.0, **supervisor: Any) -> LaunchPlan:
    """The tiny model's plan with its argv pointed at testkit/fake_engine.py on a free port."""
    plan = cpu_plan(tmp_path)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    fast = {
        "health_interval_s": 0.2,
        "hang_timeout_s": 1.0,
        "stop_grace_s": 1.0,
        "shutdown_timeout_s": 1.0,
        "backoff_initial_s": 0.1,
        "backoff_max_s": 0.2,
    } | supervisor
    # No host share: a fake engine stands in for supervision on 1 s timers, and at weight 10 beside the fast tier's
    # three workers on two cores it would wait out those timers (test_host_share.py tests the share itself).
    return replace(
        plan,
        argv=(sys.executable, str(FAKE_ENGINE), "--port", str(port), *fake_args),
        port=port,
        base_url=base,
        health_url=f"{base}/health",
        ready_timeout_s=ready_timeout_s,
        supervisor=replace(plan.supervisor, **fast),
        host_share=None,
    )


async def wait_for(sup: EngineSupervisor, *states: EngineState, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (state := sup.snapshot().state) not in states:
        if loop.time() > deadline:
            raise AssertionError(f"state stayed {state.value}, wanted {[s.value for s in states]}")
        await asyncio.sleep(0.05)


def group_gone(pgid: int, timeout: float = 10.0) -> bool:
    """Whether the group has no running process within `timeout` (SIGKILLed processes take a moment to die)."""
    deadline = time.monotonic() + timeout
    while process_group_alive(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def process_group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs (zombies waiting to be reaped do not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


@dataclass(frozen=True)
class Ran:
    """What one `appliance` command gave, in the shape of `subprocess.CompletedProcess`."""

    returncode: int
    stdout: str
    stderr: str


class Cli(Protocol):
    def __call__(self, *args: str, env: Mapping[str, str] | None = None) -> Ran: ...


def run_cli(
    capture: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, args: Sequence[str], env: Mapping[str, str]
) -> Ran:
    """`appliance.cli.main.main(args)` with what the console script adds around it: the exit code of
    `sys.exit`, and log records on stderr as `logging.basicConfig` would print them in a fresh process
    (here pytest's own handlers already sit on the root logger, so basicConfig is a no-op)."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    capture.readouterr()
    root = logging.getLogger()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        code = main(list(args))
    except SystemExit as exit_:  # argparse's usage errors
        code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    captured = capture.readouterr()
    return Ran(code, captured.out, captured.err)


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    """SIGTERM, then SIGKILL after `timeout`: of its whole group when it leads one (a session of its own)."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError):
            if os.getpgid(proc.pid) == proc.pid:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        proc.wait()
