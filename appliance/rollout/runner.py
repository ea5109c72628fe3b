"""One appliance upgraded in place: out of rotation, drained, measured, switched, gated, then committed or
rolled back, the control API answering throughout.

The appliance's own serve process runs the upgrade (POST /upgrade starts it), so an `appliance upgrade`
client that dies, or an Ansible run that is cut off, changes nothing: the steps carry on and /state tells
how they end. Every step is journaled as it starts and ends; the current generation changes only at the
commit (`appliance.rollout.generation`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import httpx

from appliance.compat.validate import ValidatedConfig
from appliance.config.schema import WorkloadConfig
from appliance.control.upgrade_documents import (
    GateDocument,
    GenerationDocument,
    Outcome,
    StepDocument,
    UpgradeDocument,
)
from appliance.errors import ApplianceError, ConfigError, Problem
from appliance.observe.effective import differences, effective, requested
from appliance.plan import LaunchPlan
from appliance.rollout.environments import prune_environments
from appliance.rollout.gates import EvalMode, GateFile, GateSettings, eval_mode, judge, measure, parse_settings
from appliance.rollout.generation import Journal, write_journal
from appliance.runtime.drain import in_flight
from appliance.runtime.lifecycle import EngineEvent, EngineState
from appliance.runtime.supervisor import EngineSupervisor

__all__ = ["Planned", "Planner", "Upgrader"]

log = logging.getLogger(__name__)
T = TypeVar("T")
_LOG_SCAN = 5000  # engine lines searched for the new boot's config line (as /state's capabilities read them)
_CHECK_KEPT_S = 900.0  # how long a check's verdict stands for the upgrade that follows it


@dataclass(frozen=True, slots=True)
class Planned:
    validated: ValidatedConfig
    plan: LaunchPlan

    @property
    def workload(self) -> WorkloadConfig:
        return self.validated.config.workload


Planner = Callable[[tuple[str, ...], str | None], Planned]
"""A full override list and plugin state (`vllm=X`; None: the pinned one) -> its validated plan, as `serve` makes
it (for an upgrade: with its model built and the engine's own config code asked in its environment; ConfigError
when anything refuses)."""


class _GateFailed(Exception):
    pass


class Upgrader:
    """Runs at most one upgrade at a time for one supervised engine and keeps its journal."""

    def __init__(self, sup: EngineSupervisor, journal: Journal, path: Path, judge: Planner) -> None:
        self._sup, self._journal, self._path, self._judge = sup, journal, path, judge
        self._task: asyncio.Task[None] | None = None
        self._holding = False
        self._checked: tuple[tuple[tuple[str, ...], str | None], float, Planned] | None = None
        write_journal(path, journal)

    @property
    def journal(self) -> Journal:
        return self._journal

    @property
    def site_dir(self) -> str | None:
        """`serve --site-dir` made absolute here, where `serve` resolved it: a client composing a generation as this
        appliance does (`appliance upgrade --fetch`) runs elsewhere."""
        site = self._journal.site_dir
        return str(Path(site).resolve()) if site else None

    def in_rotation(self) -> bool:
        """False from the moment an upgrade takes the appliance out until it passes or is rolled back."""
        return not self._holding

    def generations(self) -> tuple[GenerationDocument, GenerationDocument | None, UpgradeDocument | None]:
        return self._journal.current, self._journal.previous, self._journal.last

    async def start(
        self, overrides: tuple[str, ...], against: str | None, gates: Mapping[str, object], check: bool
    ) -> UpgradeDocument:
        """Judge the new generation (its config, its model, the engine's own config code in its environment) and,
        unless `check`, start the upgrade; ConfigError before anything changes. The record's old and new are one
        generation when there is nothing to change."""
        settings = parse_settings(gates, "gates.")
        if self._task is not None and not self._task.done():
            raise _refused("upgrade-running", "an upgrade is already under way", "Wait for it (appliance status)")
        planned = await self._judged(overrides, against, check)
        new, current = planned.plan, self._journal.current
        _same_place(self._sup.plan, new)
        generation = GenerationDocument(new.config_hash, overrides, new.python, against=against)
        record = UpgradeDocument(current, generation, time.time())
        if check or new.config_hash == current.id:
            return record
        self._save(replace(self._journal, last=record))
        self._holding = True  # out of rotation from the moment the upgrade is accepted
        self._task = asyncio.create_task(self._run(planned, settings))
        return record

    async def _judged(self, overrides: tuple[str, ...], against: str | None, check: bool) -> Planned:
        """The judge's verdict; an upgrade right after a check of the same change (Ansible's two plays) reuses it
        instead of asking the engine's config code again (a minute on a busy host)."""
        key, checked = (overrides, against), self._checked
        if not check and checked is not None and checked[0] == key and time.monotonic() - checked[1] < _CHECK_KEPT_S:
            return checked[2]
        planned = await asyncio.to_thread(self._judge, overrides, against)
        self._checked = (key, time.monotonic(), planned) if check else None
        return planned

    async def stop(self) -> None:
        """The appliance is stopping: end an upgrade under way, journaled as interrupted at its step."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self, planned: Planned, settings: GateSettings) -> None:
        old, new = self._sup.plan, planned.plan
        try:
            await self._step(
                "out-of-rotation",
                asyncio.sleep(old.supervisor.deregister_s),
                f"/readyz 503; waited deregister_s {old.supervisor.deregister_s:g}s",
            )
            await self._step("drain", self._drain(old), "no request in flight")
            mode = eval_mode(old, new, settings)
            baseline = await self._step("baseline", measure(old, planned.workload, settings, mode), "")
            self._update(baseline=baseline)
            await self._gates(new, planned.workload, settings, baseline, mode)
        except asyncio.CancelledError:
            self._end("interrupted", f"interrupted at step {self._last().step}: the appliance stopped")
            raise
        except (_GateFailed, ApplianceError, httpx.HTTPError, OSError) as error:
            await self._roll_back(old, str(error) or type(error).__name__)
            return
        self._commit()

    def gate_first_boot(self, gates: GateFile, workload: WorkloadConfig) -> None:
        """`serve --gates`: this boot stays out of rotation until it passes the gates against a recorded baseline
        (how a Kubernetes rollout waits on them: the new pod is not ready until then, and never is if one fails)."""
        current = self._journal.current
        self._save(replace(self._journal, last=UpgradeDocument(current, current, time.time(), baseline=gates.baseline)))
        self._holding = True
        self._task = asyncio.create_task(self._first_boot(gates, workload))

    async def _first_boot(self, gates: GateFile, workload: WorkloadConfig) -> None:
        try:
            mode = eval_mode(None, self._sup.plan, gates.gates)
            await self._gates(self._sup.plan, workload, gates.gates, gates.baseline, mode, switch=False)
        except asyncio.CancelledError:
            self._end("interrupted", f"interrupted at step {self._last().step}: the appliance stopped")
            raise
        except (_GateFailed, ApplianceError, httpx.HTTPError, OSError) as error:
            self._end("failed", f"{error}; held out of rotation (readiness 503) until an operator acts")
            return
        self._holding = False
        self._update(outcome="passed")

    async def _gates(
        self,
        new: LaunchPlan,
        workload: WorkloadConfig,
        settings: GateSettings,
        baseline: dict[str, float],
        mode: EvalMode,
        *,
        switch: bool = True,
    ) -> None:
        budget = settings.ready_s or new.ready_timeout_s
        seconds = await self._step("switch" if switch else "boot", self._boot(new, budget, switch=switch), "")
        why = self._sup.snapshot().last_error or "still booting"
        said = f"ready in {seconds:.0f}s" if seconds is not None else f"not ready: {why}"
        said += f" (budget {budget:.0f}s)"
        self._gate(GateDocument("ready", seconds is not None, seconds, budget, said))
        if "capabilities" not in settings.skip:
            found = differences(requested(new), effective(self._sup.log.tail(_LOG_SCAN)))
            self._gate(
                GateDocument(
                    "capabilities",
                    not found,
                    len(found),
                    0,
                    "as planned" if not found else "; ".join(p.message for p in found),
                )
            )
        figures = await self._step("measure", measure(new, workload, settings, mode), "")
        for gate in judge(baseline, figures, settings, mode):
            self._gate(gate)

    def _gate(self, gate: GateDocument) -> None:
        log.info("upgrade %s", gate.render())
        self._update(gates=(*self._last().gates, gate))
        if not gate.passed:
            raise _GateFailed(gate.render())

    async def _boot(self, plan: LaunchPlan, budget: float, *, switch: bool = True) -> float | None:
        """Switch the engine to `plan` (or wait for its boot under way); seconds until it was ready, None when it
        failed or ran out of budget."""
        events: asyncio.Queue[EngineEvent] = asyncio.Queue()
        unsubscribe = self._sup.subscribe(events.put_nowait)
        started = time.monotonic()
        try:
            if switch:
                self._sup.switch(plan)
            elif self._sup.snapshot().state is EngineState.READY:
                return 0.0
            async with asyncio.timeout(budget):
                while (event := await events.get()).state not in (EngineState.READY, EngineState.FAILED):
                    pass
        except TimeoutError:
            return None
        finally:
            unsubscribe()
        return time.monotonic() - started if event.state is EngineState.READY else None

    async def _drain(self, plan: LaunchPlan) -> None:
        """Until the engine has no request running or waiting, within the plan's shutdown budget."""
        deadline = time.monotonic() + plan.supervisor.shutdown_timeout_s
        async with httpx.AsyncClient() as http:
            while time.monotonic() < deadline:
                if not await in_flight(http, f"{plan.base_url}/metrics"):  # none, or an engine without /metrics
                    return
                await asyncio.sleep(0.5)
        raise _GateFailed(f"requests still in flight after shutdown_timeout_s {plan.supervisor.shutdown_timeout_s:g}s")

    async def _roll_back(self, old: LaunchPlan, reason: str) -> None:
        log.warning("upgrade rolling back: %s", reason)
        self._update(reason=reason)
        seconds: float | None = 0.0
        if self._switched():  # the old engine still serves when the upgrade failed before its switch
            seconds = await self._step("rollback", self._boot(old, old.ready_timeout_s), "")
        self._holding = False
        if seconds is None:
            self._end("failed", f"{reason}; the rollback to {old.config_hash} did not become ready either")
        else:
            self._end("rolled-back", reason)

    def _switched(self) -> bool:
        return any(step.name == "switch" for step in self._last().steps)

    def _commit(self) -> None:
        last = self._last()
        current = replace(last.new, since=time.time())
        self._save(
            replace(
                self._journal, current=current, previous=last.old, last=replace(last, new=current, outcome="passed")
            )
        )
        self._holding = False
        freed = prune_environments(self._sup.plan, {current.engine_python, last.old.engine_python})
        log.info("upgrade passed: generation %s -> %s%s", last.old.id, current.id, freed)

    async def _step(self, name: str, work: Awaitable[T], detail: str) -> T:
        self._update(steps=(*self._last().steps, StepDocument(name, time.time())))
        log.info("upgrade step %s", name)
        result = await work
        text = detail or _describe(result)
        steps = self._last().steps
        self._update(steps=(*steps[:-1], replace(steps[-1], ended=time.time(), detail=text)))
        return result

    def _end(self, outcome: Outcome, reason: str) -> None:
        self._update(outcome=outcome, reason=reason)

    def _last(self) -> UpgradeDocument:
        assert self._journal.last is not None  # set by start() before the task runs
        return self._journal.last

    def _update(self, **changes: object) -> None:
        self._save(replace(self._journal, last=replace(self._last(), **changes)))  # type: ignore[arg-type]

    def _save(self, journal: Journal) -> None:
        self._journal = journal
        write_journal(self._path, journal)


def _describe(result: object) -> str:
    if isinstance(result, dict):
        return ", ".join(f"{k} {v:.3g}" for k, v in result.items())
    return f"ready in {result:.0f}s" if isinstance(result, float) else ""


def _same_place(current: LaunchPlan, new: LaunchPlan) -> None:
    """An upgrade changes what serves, not where: the balancer and the console keep their addresses."""
    for key, was, now in (
        ("serving.port", current.port, new.port),
        ("control.port", current.control.port, new.control.port),
        ("paths.state_dir", current.state_dir, new.state_dir),
    ):
        if was != now:
            raise _refused(
                "upgrade-moves",
                f"{key} would change from {was} to {now}",
                "Upgrade in place only; serve the new address as a new appliance",
            )


def _refused(code: str, message: str, fix: str) -> ConfigError:
    return ConfigError((Problem(code=code, key="upgrade", message=message, fix=fix),))
