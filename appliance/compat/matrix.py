"""Load models/ — the compatibility matrix, kept as data — into typed, frozen rows.

Every model-specific fact the appliance acts on lives in these files; the code has no
model-name special cases.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

import yaml
from pydantic import ConfigDict, TypeAdapter, ValidationError

from appliance.config.schema import STATUS_ORDER, Status
from appliance.errors import ConfigError, Problem
from appliance.resources import models_dir

__all__ = [
    "MODELS_DIR",
    "Architecture",
    "Capability",
    "Checkpoint",
    "CompatibilityMatrix",
    "DeviceRow",
    "Family",
    "load_matrix",
]

MODELS_DIR = models_dir()
Capability = Literal["prefix_caching", "async_decode", "sample_on_device"]
_FORBID = ConfigDict(extra="forbid")


@dataclass(frozen=True, slots=True)
class Architecture:
    """What vllm-tt-plugin registers for one HF architecture, and what that class declares."""

    __pydantic_config__ = _FORBID

    tt_class: str
    target: str | None
    capabilities: tuple[Capability, ...]
    registered: bool = True
    """False where the plugin has no class for it: listed only to say why it is refused."""
    moe: bool = False
    mrope: bool = False
    vision: bool = False
    accepts_optimizations: bool = True
    chunked_prefill: bool = False


@dataclass(frozen=True, slots=True)
class DeviceRow:
    """One checkpoint validated on one mesh, with the limits and settings that were validated."""

    __pydantic_config__ = _FORBID

    mesh: str
    status: Status
    max_context: int
    max_concurrency: int
    data_parallel: int
    precisions: tuple[str, ...]
    kv_pool_tokens: int | None
    env: Mapping[str, str]
    tt: Mapping[str, Any]
    tt_metal: str | None
    vllm: str | None
    release: str | None
    firmware_min: str | None
    kmd_min: str | None
    known_issues: tuple[str, ...]
    source: str

    def status_rank(self) -> int:
        return STATUS_ORDER.index(self.status)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    __pydantic_config__ = _FORBID

    checkpoint: str
    architecture: str
    devices: tuple[DeviceRow, ...]
    generated: str | None = None
    """Name of the recipe that builds this checkpoint locally (no download possible)."""
    kv_bytes_per_token: int | None = None
    """KV-cache bytes per token (2 x layers x KV heads x head dim x dtype bytes), for engines sized in bytes."""

    def row(self, mesh: str) -> DeviceRow | None:
        return next((d for d in self.devices if d.mesh == mesh), None)


@dataclass(frozen=True, slots=True)
class Family:
    __pydantic_config__ = _FORBID

    family: str
    description: str
    default_checkpoint: str
    architectures: Mapping[str, Architecture]
    checkpoints: tuple[Checkpoint, ...]

    def checkpoint(self, name: str) -> Checkpoint | None:
        return next((c for c in self.checkpoints if c.checkpoint == name), None)


@dataclass(frozen=True, slots=True)
class CompatibilityMatrix:
    families: Mapping[str, Family] = field(default_factory=dict)

    def find(self, checkpoint: str) -> tuple[Family, Checkpoint] | None:
        """The family and entry that list `checkpoint`, wherever it is filed."""
        for family in self.families.values():
            entry = family.checkpoint(checkpoint)
            if entry is not None:
                return family, entry
        return None

    def checkpoint_names(self) -> tuple[str, ...]:
        return tuple(c.checkpoint for f in self.families.values() for c in f.checkpoints)

    def nearest(self, name: str, candidates: tuple[str, ...]) -> tuple[str, ...]:
        """Up to three close spellings of `name`, for "did you mean" fixes."""
        lowered = {c.lower(): c for c in candidates}
        return tuple(lowered[m] for m in difflib.get_close_matches(name.lower(), lowered, n=3, cutoff=0.5))

    def rows(self) -> tuple[tuple[Family, Checkpoint, DeviceRow], ...]:
        return tuple((f, c, d) for f in self.families.values() for c in f.checkpoints for d in c.devices)


_FAMILY: TypeAdapter[Family] = TypeAdapter(Family)


def load_matrix(models_dir: Path = MODELS_DIR) -> CompatibilityMatrix:
    """Read every models/<family>.yaml; a malformed file is a ConfigError naming it."""
    families: dict[str, Family] = {}
    problems: list[Problem] = []
    for path in sorted(models_dir.glob("*.yaml")):
        try:
            # libyaml's loader: the matrix is read on every validate, and the pure-Python one is 5x slower
            family = _FAMILY.validate_python(yaml.load(path.read_text(), Loader=yaml.CSafeLoader))
        except yaml.YAMLError as err:
            problems.append(Problem("matrix-invalid", str(path), " ".join(str(err).split())))
            continue
        except ValidationError as err:
            problems.extend(
                Problem("matrix-invalid", f"{path.name}:{'.'.join(map(str, e['loc']))}", e["msg"]) for e in err.errors()
            )
            continue
        problems.extend(_consistency(path, family))
        families[family.family] = family
    if problems:
        raise ConfigError(tuple(problems))
    return CompatibilityMatrix(MappingProxyType(families))


def _consistency(path: Path, family: Family) -> list[Problem]:
    found = []
    if family.family != path.stem:
        found.append(f"family {family.family!r} differs from the file name")
    if family.checkpoint(family.default_checkpoint) is None:
        found.append(f"default_checkpoint {family.default_checkpoint!r} is not listed")
    found += [
        f"{c.checkpoint}: architecture {c.architecture!r} is not declared"
        for c in family.checkpoints
        if c.architecture not in family.architectures
    ]
    return [Problem("matrix-invalid", path.name, text) for text in found]
