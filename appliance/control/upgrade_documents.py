"""Generations and upgrades as both ends read them: /state's `generation` and `upgrade`, and the journal an
appliance keeps of them on disk (`appliance.rollout.generation`) — one set of types for the wire and the file.

A generation is the full override list `serve` composes (the engine environment is one of its keys,
`engine.python`), named by the config hash it gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import ConfigDict

__all__ = ["GateDocument", "GenerationDocument", "Outcome", "StepDocument", "UpgradeDocument", "generation_lines"]

_WIRE = ConfigDict(extra="ignore")
Outcome = Literal["running", "passed", "rolled-back", "interrupted", "failed"]
"""running: under way; passed: committed; rolled-back: a gate failed and the old generation serves again;
interrupted: the appliance stopped mid-way (the old generation serves); failed: the rollback itself failed."""


@dataclass(frozen=True, slots=True)
class GenerationDocument:
    __pydantic_config__ = _WIRE

    id: str
    """The config hash the overrides compose to."""
    overrides: tuple[str, ...]
    engine_python: str
    since: float | None = None
    """When it became current (epoch seconds); None while it is being tried."""
    against: str | None = None
    """The plugin state it is judged under (`vllm=X`, as `--against` names it); None: the pinned one."""


@dataclass(frozen=True, slots=True)
class StepDocument:
    __pydantic_config__ = _WIRE

    name: str
    started: float
    ended: float | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class GateDocument:
    __pydantic_config__ = _WIRE

    name: str
    passed: bool
    figure: float | None
    threshold: float | None
    detail: str

    def render(self) -> str:
        return f"gate {self.name} {'passed' if self.passed else 'FAILED'}: {self.detail}"


@dataclass(frozen=True, slots=True)
class UpgradeDocument:
    """One upgrade: old -> new, each step with its times, each gate with its figure, and how it ended."""

    __pydantic_config__ = _WIRE

    old: GenerationDocument
    new: GenerationDocument
    started: float
    outcome: Outcome = "running"
    steps: tuple[StepDocument, ...] = ()
    gates: tuple[GateDocument, ...] = ()
    baseline: dict[str, float] | None = None
    """The figures measured on the old generation before the change."""
    reason: str | None = None
    """Why it did not pass: the failed gate with its figure against the threshold, or the interruption."""

    @property
    def step(self) -> str | None:
        return self.steps[-1].name if self.steps else None


def generation_lines(
    current: GenerationDocument | None, previous: GenerationDocument | None, upgrade: UpgradeDocument | None
) -> list[str]:
    """What `appliance status` and the console say: the generation serving, and the upgrade under way (its step and
    gates so far) or how the last one ended when it did not pass."""
    if current is None:
        return []
    lines = [f"generation {current.id}" + (f" (previous {previous.id})" if previous else "")]
    if upgrade is None or (upgrade.outcome == "passed" and upgrade.new.id == current.id):
        return lines
    if upgrade.outcome != "running":
        return [*lines, f"last upgrade {upgrade.old.id} -> {upgrade.new.id} {upgrade.outcome}: {upgrade.reason}"]
    return [
        *lines,
        f"upgrading {upgrade.old.id} -> {upgrade.new.id}: step {upgrade.step}",
        *(f"  {gate.render()}" for gate in upgrade.gates),
    ]
