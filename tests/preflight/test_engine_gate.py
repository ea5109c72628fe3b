"""serve's first boot behind the engine's verdict, in one process (preflight/engine_gate.py), with a real supervisor.

The engine here is testkit/fake_gate.py, a real child that speaks the gate's protocol and then becomes
testkit/fake_engine.py; the engine tier boots every appliance through the real gate
(tests/engines/test_config_probe.py).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from appliance.errors import LaunchError
from appliance.plan import ENGINE_MODULE, LaunchPlan
from appliance.preflight.engine_gate import GatedEngine, verdict_in_engine
from appliance.runtime.engine_log import EngineLog
from appliance.runtime.lifecycle import EngineState
from appliance.runtime.spawn import engine_placement
from appliance.runtime.supervisor import EngineSupervisor
from testkit.helpers import cpu_plan, fake_plan, group_gone, wait_for
from testkit.paths import TESTKIT

FAKE_GATE = TESTKIT / "fake_gate.py"


def gated_plan(tmp_path: Path, *args: str) -> LaunchPlan:
    """The fake engine's plan, its interpreter the fake gate, its command line the real one's shape."""
    plan = fake_plan(tmp_path)
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE_GATE} "$@"\n')
    python.chmod(0o755)
    argv = (str(python), "-m", ENGINE_MODULE, *plan.argv[2:], *args)
    return replace(plan, python=str(python), argv=argv, probe_timeout_s=2.0)


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


async def test_the_first_boot_is_the_process_that_gave_the_verdict_and_a_restart_spawns_plain(
    tmp_path: Path,
) -> None:
    plan = gated_plan(tmp_path)
    assert verdict_in_engine(plan)
    gate = await GatedEngine.start(plan, os.environ)
    waiting = gate.pid
    verdict = await gate.judge()
    assert verdict.accepted and verdict.vllm == "0.0.0-fake" and gate.pid == waiting
    log = EngineLog(tmp_path / "logs")
    sup = EngineSupervisor(plan, log, spawn=gate.spawn)
    run = asyncio.create_task(sup.run())
    try:
        await wait_for(sup, EngineState.READY)
        first = sup.snapshot().pid
        assert first == waiting and "fake_engine.py" in cmdline(first)[1]  # the gate became the engine
        os.kill(first, signal.SIGKILL)
        await wait_for(sup, EngineState.RESTARTING)
        await wait_for(sup, EngineState.READY)
        second = sup.snapshot().pid
        assert second not in (None, first)
        assert sup.snapshot().restarts == 1
    finally:
        sup.request("stop")
        await run
        await gate.close()
        log.close()
    assert "a line the engine logs" not in log.path.read_text()  # the gate's own lines are the verdict's


async def test_a_refusal_leaves_nothing_running_and_no_cgroup(tmp_path: Path) -> None:
    plan = replace(gated_plan(tmp_path, "--refuse"), host_share=cpu_plan(tmp_path).host_share)  # the engine's share
    placement = engine_placement(plan)
    assert placement is not None
    gate = await GatedEngine.start(plan, os.environ)
    pid = gate.pid
    verdict = await gate.judge()
    assert not verdict.accepted and verdict.refusal == "ValueError: refused on request"
    assert gate.pid is None and pid is not None and group_gone(pid)
    assert placement.group is None or not Path(placement.group).exists()  # nice where no cgroup can be written


@pytest.mark.parametrize(
    ("arg", "says"),
    [
        ("--crash", "exited 1 without a result: INFO a line the engine logs while it imports boom"),
        ("--hang", "did not finish within 2s"),
    ],
    ids=["crashed", "hung"],
)
async def test_a_gate_without_a_verdict_is_one_line_naming_the_engine_and_its_group_is_gone(
    tmp_path: Path, arg: str, says: str
) -> None:
    gate = await GatedEngine.start(gated_plan(tmp_path, arg), os.environ)
    pid = gate.pid
    with pytest.raises(LaunchError) as raised:
        await gate.judge()
    message = str(raised.value)
    assert message.startswith("config-time probe of engine cpu failed: ") and says in message, message
    assert "--no-probe" in message and "\n" not in message
    assert pid is not None and group_gone(pid)


async def test_a_gate_never_judged_or_let_go_is_dismissed(tmp_path: Path) -> None:
    gate = await GatedEngine.start(gated_plan(tmp_path), os.environ)
    pid = gate.pid
    assert pid is not None
    await gate.close()
    assert group_gone(pid) and gate.pid is None


def test_tt_keeps_its_probe_apart(tmp_path: Path) -> None:
    assert not verdict_in_engine(replace(gated_plan(tmp_path), engine="tt"))
