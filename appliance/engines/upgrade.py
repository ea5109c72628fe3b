"""What moving the tt engine's core vLLM pin would break, from the plugin's compat data in build/tt.

The plugin supports exactly one vLLM per commit and freezes retired pins under compat tags, so a
vLLM version is only usable together with the plugin state that targets it (and the tt-metal
release paired with that state).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, TypeAdapter

from appliance.data_files import load_data_file
from appliance.engines.pins import BUILD_DIR, PinManifest, load_pins
from appliance.errors import ConfigError, Problem

__all__ = ["CompatData", "PluginState", "Tracking", "UpgradeReport", "check_upgrade", "load_compat"]

_FORBID = ConfigDict(extra="forbid")
_VERSION = re.compile(r"^\d+(\.\d+){1,2}$")
Verdict = Literal["current", "ready", "commit-unknown", "retired", "unsupported"]


@dataclass(frozen=True, slots=True)
class PluginState:
    __pydantic_config__ = _FORBID

    vllm: str
    commit: str | None
    """Plugin commit that targets this vLLM; None where it is known to exist but not recorded."""
    compat_tag: str | None
    status: Literal["supported", "retired"]
    since: str
    note: str


@dataclass(frozen=True, slots=True)
class Tracking:
    __pydantic_config__ = _FORBID

    vllm: str
    issue: int
    note: str


@dataclass(frozen=True, slots=True)
class CompatData:
    __pydantic_config__ = _FORBID

    repository: str
    states: tuple[PluginState, ...]
    tracking: tuple[Tracking, ...] = ()

    def state_for(self, vllm: str) -> PluginState | None:
        return next((s for s in self.states if s.vllm == vllm), None)


@dataclass(frozen=True, slots=True)
class UpgradeReport:
    """The answer to `--check-upgrade vllm=X`: a verdict and every consequence, one per line."""

    current: str
    target: str
    verdict: Verdict
    state: PluginState | None
    findings: tuple[Problem, ...]

    @property
    def blocked(self) -> bool:
        return any(p.severity == "error" for p in self.findings)


_ADAPTER: TypeAdapter[CompatData] = TypeAdapter(CompatData)


def load_compat(build_dir: Path = BUILD_DIR) -> CompatData:
    """build/tt/compat.yaml; a missing or malformed file is a ConfigError naming it."""
    return load_data_file(build_dir / "tt" / "compat.yaml", _ADAPTER, "compat", "plugin compat data")


def check_upgrade(spec: str, build_dir: Path = BUILD_DIR) -> UpgradeReport:
    """Report what pinning the tt engine to `vllm=X` would take and break."""
    name, _, target = spec.partition("=")
    if name.strip() != "vllm" or not _VERSION.match(target.strip()):
        raise ConfigError(
            (
                Problem(
                    code="bad-upgrade",
                    key="--check-upgrade",
                    message=f"{spec!r} is not vllm=<version>",
                    fix="Use e.g. vllm=0.26.0",
                ),
            )
        )
    target = target.strip()
    pins, compat = load_pins("tt", build_dir), load_compat(build_dir)
    state = compat.state_for(target)
    findings = [*_pin_findings(pins, compat), *_target_findings(pins, compat, target, state)]
    return UpgradeReport(pins.vllm.version, target, _verdict(pins, target, state), state, tuple(findings))


def _verdict(pins: PinManifest, target: str, state: PluginState | None) -> Verdict:
    if state is None:
        return "unsupported"
    if target == pins.vllm.version:
        return "current"
    if state.status == "retired":
        return "retired"
    return "ready" if state.commit else "commit-unknown"


def _pin_findings(pins: PinManifest, compat: CompatData) -> list[Problem]:
    """The current pin itself must be a recorded plugin state, or every build drifts."""
    state = compat.state_for(pins.vllm.version)
    commit = pins.plugin.commit if pins.plugin else None
    if state is None or state.commit is None or commit is None or not state.commit.startswith(commit):
        return [
            Problem(
                code="pin-inconsistent",
                key="build/tt/pins.yaml",
                message=f"vllm {pins.vllm.version} with plugin commit {commit} is not a recorded plugin state",
                fix="Pin the plugin commit that build/tt/compat.yaml lists for this vLLM",
            )
        ]
    return []


def _target_findings(pins: PinManifest, compat: CompatData, target: str, state: PluginState | None) -> list[Problem]:
    key = f"vllm={target}"
    if state is None:
        known = ", ".join(s.vllm for s in compat.states)
        tracked = [t for t in compat.tracking if target.startswith(t.vllm)]
        why = f"; tracked in plugin issue #{tracked[0].issue} ({tracked[0].note})" if tracked else ""
        return [
            Problem(
                code="plugin-unsupported",
                key=key,
                message=f"no vllm-tt-plugin state targets vLLM {target}{why}",
                fix=f"Stay on {pins.vllm.version}; the plugin supports {known}",
            )
        ]
    found = [
        Problem(
            code="plugin-state",
            key=key,
            message=f"plugin {state.status} since {state.since}: {state.note}",
            severity="warning",
        )
    ]
    if target == pins.vllm.version:
        return found
    if state.status == "retired":
        found.append(
            Problem(
                code="compat-tag",
                key=key,
                message=f"only the frozen tag {state.compat_tag} ({state.commit}) targets {target}",
                fix="Pin plugin.commit to that tag's commit and the tt-metal commit paired with it; "
                "it receives no fixes",
                severity="warning",
            )
        )
    elif state.commit is None:
        found.append(
            Problem(
                code="commit-unknown",
                key=key,
                message=f"the plugin commit that targets {target} is not recorded",
                fix=f"Record it in build/tt/compat.yaml ({compat.repository})",
            )
        )
    found += [
        Problem(
            code="plugin-commit",
            key="plugin.commit",
            message=f"moves with vLLM: {_short(pins)} -> {_short_state(state)}",
            severity="warning",
        ),
        Problem(
            code="tt-metal",
            key="tt_metal",
            message="the tt-metal release must move with the plugin (the triple is pinned "
            "together); take it from tt-metal's LLMs table",
            severity="warning",
        ),
        Problem(
            code="installed-version",
            key="vllm",
            message=f"the built vLLM reports {target}+{pins.vllm.build_target}; "
            "re-read vLLM's requirements/common.txt at that tag for new dependencies",
            severity="warning",
        ),
    ]
    return found


def _short(pins: PinManifest) -> str:
    return (pins.plugin.commit[:7] if pins.plugin else "none") or "none"


def _short_state(state: PluginState) -> str:
    return state.compat_tag or (state.commit[:7] if state.commit else "unrecorded")
