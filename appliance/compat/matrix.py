"""Load models/ — the compatibility matrix, kept as data — into typed, frozen rows.

Every model-specific fact the appliance acts on lives in these files; the code has no
model-name special cases.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from appliance.compat.checkpoint_config import CHECKPOINTS_FILE, CheckpointConfig, load_checkpoint_configs
from appliance.compat.image_facts import Vision
from appliance.config.schema import STATUS_ORDER, Status
from appliance.data_files import cached, parse_yaml
from appliance.errors import ConfigError, Problem
from appliance.resources import models_dir

if TYPE_CHECKING:  # pydantic is imported where a schema is built: cached data is read back without it
    from pydantic import ConfigDict, TypeAdapter

__all__ = [
    "MODELS_DIR",
    "Architecture",
    "CapabilityFact",
    "CapabilityRecord",
    "Checkpoint",
    "CompatibilityMatrix",
    "DeviceRow",
    "Family",
    "load_matrix",
    "same_commit",
]

MODELS_DIR = models_dir()
_FORBID: ConfigDict = {"extra": "forbid"}


@dataclass(frozen=True, slots=True)
class CapabilityRecord:
    """What one source says a tt-metal class declares in `model_capabilities`, at a tt-metal commit."""

    __pydantic_config__ = _FORBID

    declares: Mapping[str, bool | int]
    source: str
    tt_metal: str | None = None
    """The tt-metal commit the record was read at; None when the source names no commit."""
    target: str | None = None
    """The class (`module:Class`) it describes when that is not the architecture's default target."""
    status: Literal["verified", "unverified"] = "unverified"


@dataclass(frozen=True, slots=True)
class CapabilityFact:
    """One capability of the class a row runs: declared (True/False) or unknown (None), and how sure."""

    key: str
    value: bool | int | None
    verified: bool
    source: str
    target: str | None


@dataclass(frozen=True, slots=True)
class Architecture:
    """One HF architecture: the TT class the plugin maps it to, and the capability records of that class."""

    __pydantic_config__ = _FORBID

    tt_class: str
    target: str | None
    capabilities: tuple[CapabilityRecord, ...]
    model_type: str | None = None
    """The HF config's model_type (vllm-tt-plugin 0.25.1 gates chunked prefill on it)."""
    env_targets: Mapping[str, str] = field(default_factory=dict)
    """`VAR=value` -> the class the plugin loads instead when that environment variable is set so."""
    moe: bool = False
    mrope: bool = False
    vision: Vision | bool = False
    """False for a text architecture; a vision one carries its image facts (a bare `true` is refused at load)."""
    accepts_optimizations: bool = True

    @property
    def images(self) -> Vision | None:
        """The image facts of a vision architecture, None for a text one."""
        return self.vision if isinstance(self.vision, Vision) else None

    def resolved_target(self, env: Mapping[str, str]) -> str | None:
        """The class the plugin loads under `env` (a TT_*_TEXT_VER can select another one)."""
        chosen = [
            t for spec, t in self.env_targets.items() if env.get(spec.partition("=")[0]) == spec.partition("=")[2]
        ]
        return chosen[0] if chosen else self.target

    def capability(self, key: str, tt_metal: str | None, target: str | None = None) -> CapabilityFact:
        """What the records say about `key` for the class at `tt_metal`: verified only by a verified record.

        A record at the row's own commit comes first, then a verified one at another commit (the class's
        `model_capabilities` read whole, so a key it omits is False, as the plugin reads it), then a record that
        names no commit.
        """
        target = target or self.target
        records = [r for r in self.capabilities if (r.target or self.target) == target]
        exact = [r for r in records if r.tt_metal and tt_metal and same_commit(r.tt_metal, tt_metal)]
        verified = [r for r in records if r.status == "verified"]
        unpinned = [r for r in records if r.tt_metal is None and key in r.declares]
        record = next(iter(exact), None) or next(iter(verified), None) or next(iter(unpinned), None)
        if record is None:
            return CapabilityFact(key, None, False, "no capability record for this class and key", target)
        value = record.declares.get(key, False if record.status == "verified" else None)
        return CapabilityFact(key, value, record.status == "verified", record.source, target)


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
    random_weights: bool = False
    """Its weights are noise (a generated test model): its answers are served, not graded."""
    kv_bytes_per_token: int | None = None
    """KV-cache bytes per token (2 x layers x KV heads x head dim x dtype bytes), for engines sized in bytes."""
    config: CheckpointConfig | None = None
    """Its config.json's length facts, joined from models/checkpoints.yaml at load time."""

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


# The parsing code a cached matrix depends on (appliance.data_files.cached keys on their source).
_CODE = (
    "appliance.compat.matrix",
    "appliance.compat.checkpoint_config",
    "appliance.compat.image_facts",
    "appliance.config.schema",
    "pydantic.version",
)


@cache
def _family_adapter() -> TypeAdapter[Family]:
    """Built on first use: a cached matrix is read without it."""
    from pydantic import TypeAdapter

    return TypeAdapter(Family)


def load_matrix(models_dir: Path = MODELS_DIR) -> CompatibilityMatrix:
    """Read every models/<family>.yaml and the checkpoint facts (cached by content); a malformed file is a
    ConfigError naming it."""
    paths = sorted(models_dir.glob("*.yaml"))
    families = cached("matrix", paths, _CODE, lambda: _parse_families(paths, models_dir / CHECKPOINTS_FILE), dict)
    return CompatibilityMatrix(MappingProxyType(families))


def _parse_families(paths: list[Path], checkpoints: Path) -> dict[str, Family]:
    import yaml
    from pydantic import ValidationError

    families: dict[str, Family] = {}
    problems: list[Problem] = []
    for path in (p for p in paths if p != checkpoints):
        try:
            family = _family_adapter().validate_python(parse_yaml(path.read_text()))
        except yaml.YAMLError as err:
            problems.append(Problem(code="matrix-invalid", key=str(path), message=" ".join(str(err).split())))
            continue
        except ValidationError as err:
            problems.extend(
                Problem(code="matrix-invalid", key=f"{path.name}:{'.'.join(map(str, e['loc']))}", message=e["msg"])
                for e in err.errors()
            )
            continue
        problems.extend(_consistency(path, family))
        families[family.family] = family
    if problems:
        raise ConfigError(tuple(problems))
    configs = load_checkpoint_configs(checkpoints)
    return {name: _with_configs(family, configs) for name, family in families.items()}


def _with_configs(family: Family, configs: Mapping[str, CheckpointConfig]) -> Family:
    checkpoints = tuple(replace(c, config=configs.get(c.checkpoint, c.config)) for c in family.checkpoints)
    return replace(family, checkpoints=checkpoints)


def same_commit(a: str, b: str) -> bool:
    """Commits written at different lengths (short and full hashes) name the same one."""
    return a.startswith(b) or b.startswith(a)


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
    return [Problem(code="matrix-invalid", key=path.name, message=text) for text in found] + _vision_blocks(
        path, family
    )


def _vision_blocks(path: Path, family: Family) -> list[Problem]:
    """A vision architecture must say what its images cost: one line per architecture, naming file and key."""
    found = []
    for name, arch in family.architectures.items():
        key = f"{path.name}:architectures.{name}.vision"
        if arch.vision is True:
            found.append(
                Problem(
                    code="matrix-invalid",
                    key=key,
                    message="a vision architecture needs its block (images_per_prompt, "
                    "largest_image, tokens_per_image, each with a source), not `true`",
                )
            )
        elif arch.images is not None:
            found += [Problem(code="matrix-invalid", key=key, message=text) for text in arch.images.problems()]
    return found
