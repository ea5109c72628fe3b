"""`appliance serve slots=cpu-pair` for real: two vLLM CPU engines, each on its own core, under one
appliance process. One module fixture boots it once; each test leaves both slots ready again,
except the last, which stops the appliance with SIGTERM."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from textual.widgets import DataTable

from appliance.control.client import ApiError, ControlClient, SyncControlClient, Target, expand_slots, slot_target
from appliance.control.documents import SlotsDocument, StateDocument
from testkit.appliance_process import openai_client, seed_tiny_model
from testkit.console_pilot import until
from testkit.helpers import free_ports, group_gone
from tui.app import make_console
from tui.screens.fleet import FleetScreen

pytestmark = pytest.mark.engine  # the conftest gate skips it without the CPU engine
SLOTS = ("left", "right")


@dataclass
class Pair:
    proc: subprocess.Popen[bytes]
    appliance: Target
    ports: dict[str, int]
    output: Path

    def slots(self) -> SlotsDocument:
        with SyncControlClient(self.appliance, timeout_s=30.0) as api:
            found = api.slots()
        assert found is not None, "an appliance serving slots answers GET /slots"
        return found

    def act(self, slot: str, action: str) -> str:
        with SyncControlClient(slot_target(self.appliance, slot), timeout_s=30.0) as api:
            return api.act(action)  # type: ignore[arg-type]

    def wait_for(self, slot: str, *states: str, timeout: float = 600.0) -> StateDocument:
        deadline, last = time.monotonic() + timeout, "unreachable"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"appliance exited {self.proc.returncode}:\n{self.output.read_text()[-3000:]}")
            try:
                doc = self.slots().slots[slot]
            except ApiError:
                last = "unreachable"
            else:
                if doc.state in states:
                    return doc
                last = doc.state
            time.sleep(0.5)
        raise AssertionError(f"slot {slot} never reached {states}; last {last}")

    def complete(self, slot: str) -> str:
        client = openai_client(f"http://127.0.0.1:{self.ports[slot]}")
        reply = client.completions.create(model=f"tiny-{slot}", prompt="Hello", max_tokens=4)
        return reply.model


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    tmp = tmp_path_factory.mktemp("slots")
    seed_tiny_model(tmp / "cache")
    *picked, control = free_ports(len(SLOTS) + 1)
    ports, token = dict(zip(SLOTS, picked, strict=True)), secrets.token_urlsafe(16)
    command = [
        str(Path(sys.executable).parent / "appliance"),
        "serve",
        "slots=cpu-pair",
        f"control.port={control}",
        "supervisor.backoff_initial_s=0.5",
        *(f"slots.{s}.serving.port={p}" for s, p in ports.items()),
    ]
    env = os.environ | {"APPLIANCE_TOKEN": token, "APPLIANCE_CACHE_DIR": str(tmp / "cache")}
    output = tmp / "serve.out"
    with output.open("wb") as sink:
        proc = subprocess.Popen(command, env=env, stdout=sink, stderr=sink)
    served = Pair(proc, Target("pair", f"http://127.0.0.1:{control}", token), ports, output)
    try:
        for slot in SLOTS:
            served.wait_for(slot, "ready")
        yield served
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_both_slots_answer_and_the_api_lists_each_with_its_engine(pair: Pair) -> None:
    assert [pair.complete(slot) for slot in SLOTS] == ["tiny-left", "tiny-right"]
    listed = pair.slots()
    assert (listed.name, list(listed.slots)) == ("cpu-pair", list(SLOTS))
    for slot, doc in listed.slots.items():
        assert doc.engine_url == f"http://127.0.0.1:{pair.ports[slot]}" and doc.pid is not None
        assert doc.plan.env["VLLM_CPU_OMP_THREADS_BIND"] == str(SLOTS.index(slot))
    with SyncControlClient(pair.appliance) as api:
        refused = api.request("GET", "/state")
    assert refused.status_code == 404 and "/slots/left/state" in refused.json()["error"]
    output = pair.output.read_text()
    assert "ready: slot left" in output and "ready: slot right" in output and "every slot is ready" in output
    status = subprocess.run(
        [str(Path(sys.executable).parent / "appliance"), "status", "--url", pair.appliance.url],
        env=os.environ | {"APPLIANCE_TOKEN": pair.appliance.token},
        capture_output=True,
        text=True,
        timeout=60,
    )
    slot_rows = [row for row in status.stdout.splitlines() if not row.startswith("  ")]  # details are indented
    assert status.returncode == 0
    assert [row.split("  ")[:2] for row in slot_rows] == [["left", "ready"], ["right", "ready"]]


async def test_the_console_shows_the_slots_like_a_fleet_and_enter_drills_in(pair: Pair) -> None:
    targets = expand_slots(pair.appliance)
    assert [t.name for t in targets] == ["pair/left", "pair/right"]
    app = make_console(ControlClient(targets), refresh_s=0.5)
    async with app.run_test(size=(140, 40)) as pilot:
        await until(lambda: isinstance(app.screen, FleetScreen) and app.screen.query_one(DataTable).row_count == 2)
        table = app.screen.query_one(DataTable)
        await until(lambda: [str(table.get_row_at(i)[1]) for i in range(2)] == ["ready", "ready"])
        assert [str(table.get_row_at(i)[0]) for i in range(2)] == ["pair/left", "pair/right"]
        await pilot.press("down", "enter")
        await until(lambda: app.current_mode == "dashboard")
        assert app.selected == "pair/right"


def test_kill_9_of_one_engine_restarts_only_that_slot(pair: Pair) -> None:
    before = pair.slots().slots
    os.kill(before["left"].pid or 0, signal.SIGKILL)
    pair.wait_for("left", "restarting", "starting", "loading", "warming", timeout=90)
    assert pair.complete("right") == "tiny-right"  # while left is down
    after = pair.wait_for("left", "ready")
    right = pair.slots().slots["right"]
    assert after.restarts == before["left"].restarts + 1 and after.pid != before["left"].pid
    assert (right.pid, right.restarts, right.state) == (before["right"].pid, before["right"].restarts, "ready")
    assert group_gone(before["left"].pid or 0)
    assert pair.complete("left") == "tiny-left"


def test_a_drain_of_one_slot_leaves_the_other_serving(pair: Pair) -> None:
    right_pid = pair.slots().slots["right"].pid
    assert pair.act("left", "drain") == "ready"
    pair.wait_for("left", "stopped", timeout=120)
    assert pair.complete("right") == "tiny-right"
    assert pair.slots().slots["right"].pid == right_pid
    pair.act("left", "restart")
    pair.wait_for("left", "ready")
    assert pair.complete("left") == "tiny-left"


def test_sigterm_drains_every_slot_and_exits_143(pair: Pair) -> None:
    pids = [doc.pid or 0 for doc in pair.slots().slots.values()]
    pair.proc.send_signal(signal.SIGTERM)
    assert pair.proc.wait(timeout=180) == 143
    assert all(group_gone(pid) for pid in pids)
