"""The upgrade runner against real engine processes (testkit/fake_engine.py: boots, crashes on demand), with the real
supervisor, the real journal on disk and the real control API over ASGI: the step machine, commit, rollback,
interruption, and the refusals before anything changes. The model gates (eval, workload) need a real model:
tests/rollout/test_upgrade_fleet.py runs them on the CPU engine.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from appliance.compat.matrix import load_matrix
from appliance.compat.validate import validate
from appliance.config.compose import compose_config
from appliance.control.api import create_app
from appliance.control.upgrade_documents import GenerationDocument
from appliance.errors import ConfigError, LaunchError, Problem
from appliance.plan import LaunchPlan
from appliance.rollout.generation import Journal, journal_path, read_journal
from appliance.rollout.runner import Planned, Upgrader
from appliance.runtime.engine_log import EngineLog
from appliance.runtime.lifecycle import EngineState
from appliance.runtime.supervisor import EngineSupervisor
from testkit.helpers import fake_plan, promtool, wait_for

SKIP_MODEL_GATES = {"skip": ["eval", "workload"]}


class Site:
    """One supervised fake engine with its upgrader and control API; `plans` maps override lists to plans."""

    def __init__(self, tmp_path: Path, old: LaunchPlan) -> None:
        self.log = EngineLog(tmp_path / "logs")
        self.sup = EngineSupervisor(old, self.log)
        self.plans: dict[tuple[str, ...], LaunchPlan] = {}
        self.judged: list[tuple[str, ...]] = []
        self.validated = validate(compose_config(["mesh=cpu", "engine=cpu", "model=tiny"]), load_matrix())
        first = GenerationDocument(old.config_hash, ("old",), old.python, 1.0)
        self.path = journal_path(old.state_dir, old.control.port)
        self.upgrader = Upgrader(self.sup, Journal(("old",), None, first), self.path, self.judge)
        self.http = httpx.AsyncClient(
            transport=httpx.ASGITransport(create_app(self.sup, "t", upgrades=self.upgrader)),
            base_url="http://appliance",
            headers={"Authorization": "Bearer t"},
        )

    def judge(self, overrides: tuple[str, ...], against: str | None) -> Planned:
        self.judged.append(overrides)
        if overrides == ("hung",):  # as engine_verdict.engine_accepts says of a probe past its bound
            raise LaunchError("config-time probe of engine cpu failed: the config probe did not finish within 120s")
        if overrides not in self.plans:
            raise ConfigError((Problem(code="bad-override", key=overrides[0], message="is not a config key"),))
        return Planned(self.validated, self.plans[overrides])

    def new(self, *fake_args: str) -> LaunchPlan:
        """A new generation of the same appliance: same ports and state, another config hash and engine mode."""
        old = self.sup.plan
        plan = replace(old, argv=(*old.argv[:4], *fake_args), config_hash=f"new{len(self.plans):09d}")
        self.plans[(f"new{len(self.plans)}",)] = plan
        return plan

    async def ended(self, timeout: float = 30.0) -> str:
        async with asyncio.timeout(timeout):
            while (last := self.upgrader.journal.last) is None or last.outcome == "running":
                await asyncio.sleep(0.05)
        return last.outcome


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[Site]:
    made = Site(tmp_path, fake_plan(tmp_path, deregister_s=0.2))
    running = asyncio.create_task(made.sup.run())
    await wait_for(made.sup, EngineState.READY)
    yield made
    await made.upgrader.stop()
    made.sup.request("stop")
    await running
    await made.http.aclose()
    made.log.close()


async def post(
    site: Site, overrides: tuple[str, ...], gates: object = SKIP_MODEL_GATES, **more: object
) -> httpx.Response:
    return await site.http.post("/upgrade", json={"overrides": list(overrides), "gates": gates, **more})


async def test_an_upgrade_that_passes_commits_the_new_generation_and_keeps_the_old_for_a_rollback(site: Site) -> None:
    old = site.sup.plan
    new = site.new()
    reply = await post(site, ("new0",))
    assert reply.status_code == 202 and reply.json()["new"]["id"] == new.config_hash
    assert (await site.http.get("/readyz")).status_code == 503  # out of rotation from the first step
    during = (await site.http.get("/metrics")).text
    assert f'appliance_generation_info{{generation="{new.config_hash}",role="upgrading"}} 1.0' in during
    assert "appliance_upgrade_running 1.0" in during
    assert await site.ended() == "passed"
    after = (await site.http.get("/metrics")).text
    checked = promtool("check", "metrics", stdin=after)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f'appliance_generation_info{{generation="{new.config_hash}",role="current"}} 1.0' in after
    assert f'appliance_generation_info{{generation="{old.config_hash}",role="previous"}} 1.0' in after
    assert "appliance_upgrade_running 0.0" in after and "appliance_upgrade_failed 0.0" in after
    assert f'config_hash="{new.config_hash}"' in after
    journal = read_journal(site.path)
    assert journal is not None and journal.current.id == new.config_hash and journal.current.since
    assert journal.previous is not None and journal.previous.id == old.config_hash
    assert journal.last is not None
    assert [s.name for s in journal.last.steps] == ["out-of-rotation", "drain", "baseline", "switch", "measure"]
    assert [(g.name, g.passed) for g in journal.last.gates] == [("ready", True), ("capabilities", True)]
    assert site.sup.plan is new and (await site.http.get("/readyz")).status_code == 200
    state = (await site.http.get("/state")).json()
    assert state["generation"]["id"] == new.config_hash and state["upgrade"]["outcome"] == "passed"


async def test_a_new_engine_that_crashes_at_boot_fails_the_ready_gate_and_the_old_generation_serves_again(
    site: Site,
) -> None:
    old = site.sup.plan
    site.new("--mode", "boot-crash")
    assert (await post(site, ("new0",))).status_code == 202
    assert await site.ended() == "rolled-back"
    last = site.upgrader.journal.last
    assert last is not None and last.reason is not None and "gate ready FAILED" in last.reason
    assert "fake engine cannot load the model" in last.reason  # the engine's own words for why
    assert site.upgrader.journal.current.id == old.config_hash and site.sup.plan is old
    assert site.sup.snapshot().state is EngineState.READY and (await site.http.get("/readyz")).status_code == 200
    assert [s.name for s in last.steps][-1] == "rollback"


async def test_an_appliance_stopping_mid_upgrade_journals_it_interrupted_on_the_old_generation(site: Site) -> None:
    old = site.sup.plan
    site.new("--mode", "no-ready")  # boots but never answers /health: the switch waits
    assert (await post(site, ("new0",), {**SKIP_MODEL_GATES, "ready_s": 60})).status_code == 202
    while site.upgrader.journal.last is None or site.upgrader.journal.last.step != "switch":
        await asyncio.sleep(0.05)
    await site.upgrader.stop()
    journal = read_journal(site.path)
    assert journal is not None and journal.current.id == old.config_hash
    assert journal.last is not None and journal.last.outcome == "interrupted"
    assert journal.last.reason == "interrupted at step switch: the appliance stopped"


async def test_refusals_change_nothing_and_name_their_reason(site: Site) -> None:
    before = site.path.read_text()
    moved = site.new()
    site.plans[("moved",)] = replace(moved, port=moved.port + 1)
    cases = {
        ("moved",): (400, "upgrade-moves"),
        ("unknown",): (400, "bad-override"),
        ("hung",): (503, "cannot judge the new generation: config-time probe"),
    }
    for overrides, (status, code) in cases.items():
        reply = await post(site, overrides)
        assert reply.status_code == status and code in reply.json()["error"], reply.text
    bad_gate = await post(site, ("new0",), {"eval_tolerance": 2})
    assert bad_gate.status_code == 400 and "gates.eval_tolerance" in bad_gate.json()["error"]
    assert (await site.http.post("/upgrade", content=b"{")).json() == {"error": "the body is not JSON"}
    site.plans[("same",)] = site.sup.plan
    same = await post(site, ("same",))
    assert same.status_code == 200 and same.json()["old"]["id"] == same.json()["new"]["id"]
    checked = await post(site, ("new0",), check=True)
    assert checked.status_code == 200 and checked.json()["new"]["id"] == moved.config_hash
    assert site.path.read_text() == before and site.upgrader.in_rotation()
    judged = len(site.judged)
    assert (await post(site, ("new0",))).status_code == 202
    assert len(site.judged) == judged  # the check just before stands: the engine is not asked twice
    busy = await post(site, ("new0",))
    assert busy.status_code == 409 and "upgrade-running" in json.loads(busy.text)["error"]
    await site.ended()
