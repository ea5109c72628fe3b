"""Read a slots file (conf/slots/<name>.yaml) and compose each slot as a full deployment.

A slots file lists, per slot, the group choices and keys of one deployment plus the devices
(or CPU cores) it owns. Each slot is composed with the same `compose_config()` a single config
uses, so every slot carries its own provenance and config hash and is refused for the same
reasons a single config would be; the file itself adds only what one deployment cannot say.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, Any, Literal

from appliance.compat.matrix import CompatibilityMatrix
from appliance.compat.resolve import resolve_config
from appliance.config.bounds import Bound
from appliance.config.compose import COMMAND_LINE
from appliance.config.schema import ComposedConfig
from appliance.config.suggest import did_you_mean, yaml_line
from appliance.data_files import parse_yaml
from appliance.errors import ConfigError, Problem
from appliance.resources import conf_dir

if TYPE_CHECKING:  # pydantic is imported where a schema is built: cached data is read back without it
    from pydantic import ConfigDict, TypeAdapter

    from appliance.host.discovery import HostFacts

__all__ = [
    "SlotSpec",
    "SlotsFile",
    "compose_slot",
    "in_slot",
    "load_slots",
    "slot_options",
    "slots_choice",
    "split_overrides",
]

_STRICT: ConfigDict = {"extra": "forbid"}  # docstrings unparsed, as in config/schema.py
_CHOICE = re.compile(r"^\+?slots=(?P<name>.*)$")
_SLOT_KEY = re.compile(r"^(?P<plus>\+{0,2})slots\.(?P<slot>[A-Za-z0-9_-]+)\.(?P<rest>.+)$")
_SLOT_NAME = r"^[a-z0-9][a-z0-9-]{0,30}$"  # a DNS label part: it names k8s resources and log dirs
Index = Annotated[int, Bound(ge=0)]


@dataclass(frozen=True, slots=True)
class SlotSpec:
    __pydantic_config__ = _STRICT

    choices: Mapping[str, str] = field(default_factory=dict)
    """Group options of this slot's deployment (model, mesh, precision, engine)."""
    set: Mapping[str, Any] = field(default_factory=dict)
    """Dotted keys of this slot's deployment (serving.port, model.checkpoint, engine.env.X, ...)."""
    devices: tuple[Index, ...] | Literal["any"] | None = None
    """Device indices this slot owns on the host, or "any": the first free ones its mesh needs."""
    cores: tuple[Index, ...] | None = None
    """CPU engine: the cores its engine is pinned to; None splits the unclaimed cores evenly."""


@dataclass(frozen=True, slots=True)
class SlotsFile:
    __pydantic_config__ = _STRICT

    host: Annotated[str, Bound(min_length=1)]
    """The conf/mesh option of the whole host (t3k, galaxy, cpu): what the slots divide."""
    slots: Annotated[Mapping[Annotated[str, Bound(min_length=1)], SlotSpec], Bound(min_length=1)]
    """Slot name -> its deployment, in the order they are planned and shown."""
    name: str = ""
    """The option name (set on loading)."""
    source: str = ""
    """The file it was read from (set on loading)."""


# Built on first use: every `validate` asks `slots_choice`, and only slots files need the schemas.
@cache
def _slots_adapter() -> TypeAdapter[SlotsFile]:
    from pydantic import TypeAdapter

    return TypeAdapter(SlotsFile)


@cache
def _spec_adapter() -> TypeAdapter[SlotSpec]:
    from pydantic import TypeAdapter

    return TypeAdapter(SlotSpec)


def slots_choice(overrides: Sequence[str]) -> str | None:
    """The slots option `slots=<name>` selects, or None for a single deployment."""
    names = [m["name"] for o in overrides if (m := _CHOICE.match(o))]
    return names[-1] if names else None


def slot_options(site_dir: Path | None = None) -> tuple[str, ...]:
    """Names of the slots files on offer (the site dir's slots/ and conf/slots/)."""
    return tuple(sorted({p.stem for d in _dirs(site_dir) if d.is_dir() for p in d.glob("*.yaml")}))


def _dirs(site_dir: Path | None) -> list[Path]:
    return ([site_dir / "slots"] if site_dir else []) + [conf_dir() / "slots"]


def load_slots(name: str, site_dir: Path | None = None) -> SlotsFile:
    """The slots file `name` from the site dir's slots/ (first) or conf/slots/; ConfigError if bad."""
    path = next((d / f"{name}.yaml" for d in _dirs(site_dir) if (d / f"{name}.yaml").is_file()), None)
    if path is None:
        known = slot_options(site_dir)
        near = did_you_mean(name, known, "`slots={}`")
        raise ConfigError(
            (
                Problem(
                    code="unknown-option",
                    key="slots",
                    message=f"no slots file {name!r}",
                    fix=f"{near}Choose one of: {', '.join(known)}",
                ),
            )
        )
    import yaml  # here, as pydantic: every `validate` imports this module for `slots_choice` alone
    from pydantic import ValidationError

    try:
        raw = parse_yaml(path.read_text())
        parsed = _slots_adapter().validate_python(raw)
    except yaml.YAMLError as error:
        raise ConfigError(
            (
                Problem(
                    code="yaml-error", key=str(path), message=" ".join(str(error).split()), fix="Fix the YAML syntax"
                ),
            )
        ) from None
    except ValidationError as error:
        raise ConfigError(tuple(_file_problem(path, e) for e in error.errors())) from None
    bad = [
        Problem(
            code="bad-value",
            key=f"slots.{s}",
            message=f"{path}: slot name {s!r} is not a lowercase DNS label",
            fix="Use lowercase letters, digits and -",
        )
        for s in parsed.slots
        if not re.match(_SLOT_NAME, s)
    ]
    if bad:
        raise ConfigError(tuple(bad))
    return replace(parsed, name=name, source=str(path))


def split_overrides(
    slots: SlotsFile, overrides: Sequence[str]
) -> tuple[SlotsFile, tuple[str, ...], Mapping[str, tuple[str, ...]]]:
    """The slots file with `slots.<name>.devices|cores=` applied, the overrides for every slot, and
    per slot its `slots.<name>.<key>=v` ones with the prefix removed."""
    import yaml
    from pydantic import ValidationError

    common: list[str] = []
    per_slot: dict[str, list[str]] = {name: [] for name in slots.slots}
    specs = dict(slots.slots)
    problems: list[Problem] = []
    for override in overrides:
        if _CHOICE.match(override):
            continue
        if not (m := _SLOT_KEY.match(override)):
            common.append(override)
        elif m["slot"] not in per_slot:
            problems.append(
                Problem(
                    code="unknown-key",
                    key=f"slots.{m['slot']}",
                    message=f"{override!r}: {slots.name} has no slot {m['slot']!r}",
                    fix=f"{did_you_mean(m['slot'], slots.slots, '`slots.{}`')}Address one of: {', '.join(slots.slots)}",
                )
            )
        elif (key := m["rest"].partition("=")[0]) in ("devices", "cores"):
            try:
                changed = {**_fields(specs[m["slot"]]), key: _parse(m["rest"])}
                specs[m["slot"]] = _spec_adapter().validate_python(changed)
            except (ValidationError, yaml.YAMLError):
                problems.append(
                    Problem(
                        code="bad-value",
                        key=f"slots.{m['slot']}.{key}",
                        message=f"{override!r} is not a list of indices" + (" or `any`" if key == "devices" else ""),
                        fix=f"Write {key}=[0,1]",
                    )
                )
        else:
            per_slot[m["slot"]].append(m["plus"] + m["rest"])
    if problems:
        raise ConfigError(tuple(problems))
    own = MappingProxyType({k: tuple(v) for k, v in per_slot.items()})
    return replace(slots, slots=MappingProxyType(specs)), tuple(common), own


def _fields(spec: SlotSpec) -> dict[str, Any]:
    return {"choices": spec.choices, "set": spec.set, "devices": spec.devices, "cores": spec.cores}


def _parse(assignment: str) -> Any:
    value = parse_yaml(assignment.partition("=")[2])
    return [value] if isinstance(value, int) else value


def compose_slot(
    slots: SlotsFile,
    name: str,
    overrides: tuple[Sequence[str], Sequence[str]],
    matrix: CompatibilityMatrix,
    site_dir: Path | None = None,
) -> ComposedConfig:
    """Compose slot `name`: its choices and keys, then the (common, own) overrides, resolved as
    a single config is (engine=auto from the mesh).

    ConfigError problems name the slot in their key (`slots.<name>.<key>`) and message.
    """
    spec = slots.slots[name]
    common, own = overrides
    declared = [f"{g}={v}" for g, v in spec.choices.items()] + [f"{k}={_value(v)}" for k, v in _flat(spec.set, "")]

    def no_auto_mesh() -> HostFacts:
        raise ConfigError(
            (
                Problem(
                    code="mesh-auto-slot",
                    key="mesh",
                    message="mesh=auto picks the whole host, not a slot's part of it",
                    fix=f"Set choices.mesh for the slot in {slots.source}",
                ),
            )
        )

    # The slot's keys came from the slots file, not the command line, unless an override set them again.
    from_file = {k for k, _ in _flat(spec.set, "")} - {o.lstrip("+").partition("=")[0] for o in (*common, *own)}
    try:
        composed = resolve_config([*declared, *common, *own], matrix, no_auto_mesh, site_dir=site_dir)
    except ConfigError as error:
        located = (_set_in(slots, name, p) if p.key in from_file else p for p in error.problems)
        raise ConfigError(tuple(in_slot(name, p) for p in located)) from None
    provenance = {
        k: (slots.source if k in from_file and v == COMMAND_LINE else v) for k, v in composed.provenance.items()
    }
    return replace(composed, provenance=MappingProxyType(provenance), overrides=(*declared, *common, *own))


def _set_in(slots: SlotsFile, name: str, problem: Problem) -> Problem:
    """`problem` about a key of slot `name`'s `set:`, naming the file and line that set it."""
    line = yaml_line(Path(slots.source), f"slots.{name}.set.{problem.key}")
    where = slots.source if line is None else f"{slots.source}:{line}"
    return replace(problem, message=f"{problem.message} (set in {where})")


def in_slot(name: str, problem: Problem) -> Problem:
    """`problem` as a finding about slot `name`."""
    return replace(problem, key=f"slots.{name}.{problem.key}", message=f"slot {name}: {problem.message}")


def _flat(tree: Mapping[str, Any], prefix: str) -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = []
    for key, value in tree.items():
        if isinstance(value, Mapping) and value:
            items += _flat(value, f"{prefix}{key}.")
        else:
            items.append((f"{prefix}{key}", value))
    return items


def _value(value: Any) -> str:
    """A YAML value as Hydra override syntax: strings quoted, so "1" stays a string."""
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_value(v) for v in value) + "]"
    return json.dumps(value)


def _file_problem(path: Path, error: Any) -> Problem:
    key = ".".join(str(p) for p in error["loc"] if not str(p).startswith(("function-", "literal[", "tuple[")))
    key = key.replace(".SlotSpec", "")
    shape = "See conf/slots/cpu-pair.yaml for the shape of a slots file"
    if error["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
        parts, line = key.split("."), yaml_line(path, key)
        near = did_you_mean(parts[-1], [f.name for f in fields(SlotSpec if len(parts) > 1 else SlotsFile)])
        where = str(path) if line is None else f"{path}:{line}"
        return Problem(
            code="unknown-key", key=key, message=f"{where}: `{key}` is not a slots file key", fix=f"{near}{shape}"
        )
    return Problem(
        code="bad-config", key=key or "slots", message=f"{path}: {error['msg']} (got {error.get('input')!r})", fix=shape
    )
