"""Every recorded vllm-tt-plugin state, loaded from build/tt/plugin-states/, and the one the tt pin selects."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from appliance.compat.states import PluginState
from appliance.data_files import cached, load_data_file
from appliance.errors import ConfigError, Problem
from appliance.resources import build_dir

if TYPE_CHECKING:  # pydantic is imported where a schema is built: cached data is read back without it
    from pydantic import ConfigDict

__all__ = ["PluginStates", "cpu_vllm", "load_states"]

_IGNORE: ConfigDict = {"extra": "ignore"}


@dataclass(frozen=True, slots=True)
class PluginStates:
    """Every recorded state, and the one build/tt/pins.yaml pins."""

    states: tuple[PluginState, ...]
    pinned: PluginState

    def for_vllm(self, version: str) -> PluginState | None:
        return next((s for s in self.states if s.vllm == version), None)

    def select(self, against: str | None) -> PluginState:
        """The state `--against vllm=X` names, or the pinned one; a ConfigError names the recorded ones."""
        if against is None:
            return self.pinned
        name, _, version = against.partition("=")
        state = self.for_vllm(version.strip()) if name.strip() == "vllm" else None
        if state is None:
            known = ", ".join(f"vllm={s.vllm}" for s in self.states)
            raise ConfigError(
                (
                    Problem(
                        code="bad-against",
                        key="--against",
                        message=f"{against!r} names no recorded plugin state",
                        fix=f"Use one of: {known}",
                    ),
                )
            )
        return state

    def newer_supporting(self, state: PluginState, supports: str) -> PluginState | None:
        """The first state after `state` (by vLLM version) whose `supports` test holds, for messages."""
        later = sorted(
            (s for s in self.states if _version(s.vllm) > _version(state.vllm)), key=lambda s: _version(s.vllm)
        )
        return next((s for s in later if _supports(s, supports)), None)


@dataclass(frozen=True, slots=True)
class _Pinned:
    """The one field of build/tt/pins.yaml that selects the pinned state (engines/pins.py owns the rest)."""

    __pydantic_config__ = _IGNORE

    vllm: Mapping[str, str]


# The parsing code cached states depend on (appliance.data_files.cached keys on their source).
_CODE = (
    "appliance.compat.state_set",
    "appliance.compat.states",
    "appliance.config.schema",
    "appliance.data_files",
    "pydantic.version",
)


@cache
def load_states(build: Path | None = None) -> PluginStates:
    """Every build/tt/plugin-states/*.yaml, cached by content; a ConfigError names a malformed file and key."""
    root = (build or build_dir()) / "tt"
    paths = [*sorted((root / "plugin-states").glob("*.yaml")), root / "pins.yaml"]
    return cached("plugin-states", paths, _CODE, lambda: _parse_states(root), PluginStates)


@cache
def cpu_vllm(build: Path | None = None) -> str:
    """The vLLM version build/cpu/pins.yaml pins for the cpu engine (engines/pins.py owns the rest of the file)."""
    path = (build or build_dir()) / "cpu" / "pins.yaml"
    return cached("cpu-vllm", [path], _CODE, lambda: _required(_pinned_vllm(path), path), str)


def _pinned_vllm(path: Path) -> str | None:
    from pydantic import TypeAdapter

    return load_data_file(path, TypeAdapter(_Pinned), "pins", "pin manifest for this engine").vllm.get("version")


def _required(version: str | None, path: Path) -> str:
    if version is None:
        raise ConfigError(
            (Problem(code="pins-invalid", key=f"{path}:vllm.version", message="no vLLM version is pinned"),)
        )
    return version


def _parse_states(root: Path) -> PluginStates:
    from pydantic import TypeAdapter  # here: cached states are read without pydantic's schema builder

    states, adapter = [], TypeAdapter(PluginState)  # built here: cached states are read without it
    for path in sorted((root / "plugin-states").glob("*.yaml")):
        state = load_data_file(path, adapter, "plugin-state", "plugin state")
        if path.stem != state.name:
            raise ConfigError(
                (
                    Problem(
                        code="plugin-state-invalid", key=str(path), message=f"the file must be named {state.name}.yaml"
                    ),
                )
            )
        states.append(state)
    version = _pinned_vllm(root / "pins.yaml")
    pinned = next((s for s in states if s.vllm == version), None)
    if pinned is None:
        raise ConfigError(
            (
                Problem(
                    code="pin-inconsistent",
                    key=str(root / "pins.yaml"),
                    message=f"vllm {version} has no file in {root / 'plugin-states'}",
                ),
            )
        )
    return PluginStates(tuple(states), pinned)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def _supports(state: PluginState, what: str) -> bool:
    """Whether `state` supports a named surface: a tt key, an env rule, a feature flag, an architecture."""
    kind, _, name = what.partition(":")
    checks = {
        "tt": lambda: name in state.tt_keys and state.tt_keys[name].kind not in ("multi_host", "legacy"),
        "env": lambda: name in state.env,
        "arch": lambda: name in state.architectures,
        "speculative": lambda: state.speculative is not None and name in state.speculative.methods,
        "chunked_prefill": lambda: state.chunked_prefill.gate == "capability",
        "form": lambda: name in state.additional_config_forms,
    }
    return checks[kind]()
