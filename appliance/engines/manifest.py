"""The record a fleet inventory keeps of one engine environment: pins against what is installed.

Installed distributions come from `inspect_engine`, which runs the engine's own interpreter in a
subprocess (the appliance never imports vLLM); drift from the pins is `pin_drift`'s, the same
comparison `appliance check` makes, so the two can never disagree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic_core import to_jsonable_python

from appliance.engines.engine_env import EngineEnv, EntryPoint, inspect_engine
from appliance.engines.pinning import build_target, installed_commit, pin_drift
from appliance.engines.pins import BUILD_DIR, PinManifest, load_pins
from appliance.host.discovery import HostFacts

__all__ = ["EnvironmentManifest", "PinRow", "read_manifest", "write_manifest"]


@dataclass(frozen=True, slots=True)
class PinRow:
    """One headline pin beside what the environment has (the full comparison is `drift`)."""

    name: str
    pinned: str | None
    installed: str | None


@dataclass(frozen=True, slots=True)
class EnvironmentManifest:
    engine: str
    interpreter: str
    python: str
    created: str
    """UTC time of the inspection (ISO 8601)."""
    config_hash: str
    pins: tuple[PinRow, ...]
    drift: tuple[str, ...]
    """Every way the environment differs from build/<engine>/pins.yaml; empty when it matches."""
    distributions: Mapping[str, str]
    """Every installed distribution (normalized name -> version)."""
    entry_points: tuple[EntryPoint, ...]
    host: HostFacts

    @property
    def ok(self) -> bool:
        return not self.drift

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = to_jsonable_python(self, fallback=dict)
        return {"ok": self.ok, **data}


def read_manifest(
    engine: str,
    python: str,
    config_hash: str,
    host: HostFacts,
    environ: Mapping[str, str],
    build_dir: Path = BUILD_DIR,
) -> EnvironmentManifest:
    """Inspect the environment of `python` and compare it with build/<engine>/pins.yaml."""
    pins = load_pins(engine, build_dir)
    env = inspect_engine(python)
    return EnvironmentManifest(
        engine=engine,
        interpreter=python,
        python=env.python,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        config_hash=config_hash,
        pins=_rows(pins, env, build_dir),
        drift=pin_drift(env, pins, environ, build_dir),
        distributions=env.distributions,
        entry_points=env.entry_points,
        host=host,
    )


def write_manifest(manifest: EnvironmentManifest, path: Path) -> None:
    """Write the manifest as JSON, replacing the previous one atomically."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(manifest.to_json(), indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def _rows(pins: PinManifest, env: EngineEnv, build_dir: Path) -> tuple[PinRow, ...]:
    vllm = pins.vllm
    rows = [
        PinRow("python", " or ".join(pins.python), env.python),
        PinRow(vllm.distribution, vllm.version, env.version(vllm.distribution)),
        PinRow("vllm build target", vllm.build_target, build_target(env.vllm_distribution, env.vllm_version)),
        *(
            PinRow(name, spec, env.version(name))
            for name, spec in (("torch", pins.torch), ("numpy", pins.numpy), ("ttnn", pins.ttnn))
            if spec
        ),
    ]
    if pins.plugin:
        plugin = pins.plugin
        direct = env.direct_urls.get(plugin.distribution, {})
        rows += [
            PinRow(plugin.distribution, plugin.version, env.version(plugin.distribution)),
            PinRow("plugin commit", plugin.commit, installed_commit(direct)),
        ]
    frozen = pins.requirement_pins(build_dir)
    if frozen:
        held = sum(env.version(name) == version for name, version in frozen.items())
        rows.append(PinRow(f"{pins.requirements} pins", str(len(frozen)), f"{held} match"))
    return tuple(rows)
