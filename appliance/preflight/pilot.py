"""The five-point pilot checklist, run together with the host checks into one PilotReport.

Each item maps to a failure mode a fleet can measure before it commits rack space: release
drift (upstream cadence), hidden core patches (core isolation), unreproducible builds (build
pinning), workload mismatch (scheduler constraints) and client breakage (API compatibility).
"""

from __future__ import annotations

import datetime as dt
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance import __version__
from appliance.compat.media import MediaPolicy
from appliance.compat.validate import ValidatedConfig
from appliance.engines.engine_env import EngineEnv, TtnnProbe, inspect_engine, probe_ttnn
from appliance.engines.pinning import pin_drift
from appliance.engines.pins import BUILD_DIR, PinManifest, load_pins
from appliance.engines.releases import RELEASES_FILE, ReleaseList, index_releases, lag, load_releases
from appliance.errors import ConfigError, EngineError, LaunchError
from appliance.host.discovery import HostFacts
from appliance.plan import LaunchPlan
from appliance.preflight.api_contract import CONTRACT_FILE, diff_contract, load_contract, record_contract
from appliance.preflight.checks import host_checks
from appliance.preflight.engine_config import engine_config_check
from appliance.preflight.isolation import scan_core
from appliance.preflight.launch import launch_check
from appliance.preflight.report import PilotReport
from appliance.preflight.results import CheckResult, CheckStatus, HostCheckInput, check, worst
from appliance.preflight.workload_fit import scheduler_check
from appliance.resources import default_engines_dir
from appliance.runtime.spawn import engine_environment

__all__ = [
    "CADENCE_PASS",
    "CADENCE_WARN",
    "PilotOptions",
    "api_check",
    "cadence_check",
    "isolation_check",
    "pinning_check",
    "run_pilot",
    "ttnn_check",
]

CADENCE_PASS = (2, 42)
"""(minor versions, days) a pin may trail the newest release: the plugin's record is 1-2 minors, 4-6 weeks."""
CADENCE_WARN = (4, 84)
"""Beyond twice that record, each upgrade is a migration project: the check fails."""


@dataclass(frozen=True, slots=True)
class PilotOptions:
    engine_url: str | None = None
    """A running engine for the API check; None tries the plan's own serving address."""
    releases: str = str(RELEASES_FILE)
    """The fleet's release list file, or `index` to ask the package index (PyPI)."""
    contract: Path = CONTRACT_FILE
    build_dir: Path = BUILD_DIR
    timeout_s: float = 60.0
    probe: bool = True
    """Ask the engine's own config code about the plan (engine.config)."""


def run_pilot(validated: ValidatedConfig, plan: LaunchPlan, host: HostFacts, options: PilotOptions) -> PilotReport:
    """Every host check and the five pilot checks, with the evidence they were decided on."""
    env, env_error = _engine(plan, options)
    ttnn = _ttnn(validated, plan, host, options)
    pins: PinManifest | str
    try:
        pins = load_pins(plan.engine, options.build_dir)
    except ConfigError as err:
        pins = str(err)
    checks = (
        *host_checks(HostCheckInput(validated, plan, host)),
        launch_check(plan, os.environ, devices=bool(host.boards)),
        ttnn_check(validated, host, ttnn),
        cadence_check(pins, env, _releases(options)),
        isolation_check(env, env_error),
        pinning_check(pins, env, env_error, plan, options.build_dir),
        scheduler_check(validated),
        api_check(options.contract, options.engine_url or plan.base_url, plan.media),
        *((engine_config_check(plan, host),) if options.probe else ()),
    )
    return PilotReport(
        generated_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        host_name=socket.gethostname(),
        appliance_version=__version__,
        host=host,
        engine=env,
        engine_error=env_error,
        ttnn=ttnn,
        plan=plan,
        checks=checks,
        verdict=worst(checks),
    )


def ttnn_check(validated: ValidatedConfig, host: HostFacts, probe: TtnnProbe | str) -> CheckResult:
    title, tt = "ttnn sees the chips", validated.engine == "tt"
    if isinstance(probe, str):
        return check("host.ttnn", title, "unknown" if tt else "pass", probe, "Build the engine environment")
    if probe.skipped:
        return check("host.ttnn", title, "unknown", probe.skipped, "Run the check while no appliance serves")
    evidence: dict[str, Any] = {
        "interpreter": probe.interpreter,
        "ttnn": probe.version,
        "chips": probe.chips,
        "pcie_chips": probe.pcie_chips,
        "boards": len(host.boards),
    }
    if not probe.imported or probe.error:
        status: CheckStatus = "fail" if tt else "warn"
        return check(
            "host.ttnn",
            title,
            status,
            f"ttnn does not work: {probe.error}",
            "Without ttnn the plugin's platform_plugin() returns None and vLLM silently picks "
            "another platform; install the tt-metal environment",
            **evidence,
        )
    if probe.pcie_chips != len(host.boards) or (tt and (probe.chips or 0) < validated.config.mesh.chips):
        return check(
            "host.ttnn",
            title,
            "fail" if tt else "warn",
            f"ttnn counts {probe.chips} chip(s) ({probe.pcie_chips} on PCIe), /dev/tenstorrent has "
            f"{len(host.boards)} board(s), mesh={validated.config.mesh.option} needs "
            f"{validated.config.mesh.chips}",
            "Check the cards with `tt-smi -ls` and reset them",
            **evidence,
        )
    return check("host.ttnn", title, "pass", f"ttnn {probe.version} counts {probe.chips} chip(s)", **evidence)


def cadence_check(pins: PinManifest | str, env: EngineEnv | None, releases: ReleaseList | str) -> CheckResult:
    title = "Upstream cadence"
    if isinstance(pins, str) or isinstance(releases, str):
        reason = pins if isinstance(pins, str) else str(releases)
        fix = "Keep build/vllm-releases.yaml current, or use --releases index where PyPI is reachable"
        return check("pilot.cadence", title, "unknown", reason, fix)
    behind = lag(pins.vllm.version, releases)
    newest = behind.newest
    days = f"{behind.days} days" if behind.days is not None else "days unknown"
    evidence: dict[str, Any] = {
        "pinned": pins.vllm.version,
        "installed": env.vllm_version if env else None,
        "newest": newest.version,
        "newest_date": str(newest.date) if newest.date else None,
        "minor_versions_behind": behind.minor_versions,
        "days_behind": behind.days,
        "plugin": f"{pins.plugin.distribution} {pins.plugin.version} @ {pins.plugin.commit}" if pins.plugin else None,
        "source": releases.source,
    }
    over = [behind.minor_versions > limit[0] or (behind.days or 0) > limit[1] for limit in (CADENCE_PASS, CADENCE_WARN)]
    status: CheckStatus = "fail" if over[1] else "warn" if over[0] else "pass"
    return check(
        "pilot.cadence",
        title,
        status,
        f"pin {pins.vllm.version} is {behind.minor_versions} minor version(s) and {days} behind vLLM {newest.version}",
        "Plan the plugin's migration to a newer vLLM (its compat issue "
        "diffs the coupled APIs), or pin a newer plugin commit",
        **evidence,
    )


def isolation_check(env: EngineEnv | None, env_error: str | None) -> CheckResult:
    title = "Core isolation"
    if env is None or env.vllm_path is None:
        reason = env_error or f"{env.interpreter if env else '?'} has no vllm package"
        return check("pilot.isolation", title, "unknown", reason, "Build the engine environment")
    scan = scan_core(Path(env.vllm_path))
    evidence: dict[str, Any] = {
        "scanned": scan.root,
        "files": scan.files,
        "hits": scan.total,
        "findings": [f"{f.path}:{f.line}: {f.symbol}: {f.text}" for f in scan.findings],
    }
    if scan.total:
        return check(
            "pilot.isolation",
            title,
            "fail",
            f"{scan.total} vendor symbol(s) in the vLLM core ({env.vllm_distribution} {env.vllm_version})",
            "Move the vendor code into the plugin and install an unpatched vLLM core",
            **evidence,
        )
    return check(
        "pilot.isolation",
        title,
        "pass",
        f"no vendor symbol in {scan.files} core files of {env.vllm_distribution} {env.vllm_version}",
        **evidence,
    )


def pinning_check(
    pins: PinManifest | str, env: EngineEnv | None, env_error: str | None, plan: LaunchPlan, build_dir: Path
) -> CheckResult:
    title = "Build pinning"
    if isinstance(pins, str) or env is None:
        return check(
            "pilot.pinning",
            title,
            "unknown",
            pins if isinstance(pins, str) else str(env_error),
            "Build the engine environment from build/",
        )
    drift = pin_drift(env, pins, engine_environment(plan, os.environ), build_dir)
    manifest = str(build_dir / plan.engine / "pins.yaml")
    evidence: dict[str, Any] = {
        "manifest": manifest,
        "interpreter": env.interpreter,
        "drift": list(drift),
        "distributions": len(env.distributions),
    }
    if drift:
        return check(
            "pilot.pinning",
            title,
            "fail",
            f"{len(drift)} difference(s) from {manifest}",
            f"Rebuild the environment (make engine-{plan.engine}) or update the manifest deliberately",
            **evidence,
        )
    return check("pilot.pinning", title, "pass", f"the environment matches {manifest}", **evidence)


def api_check(
    contract_path: Path, base_url: str, media: MediaPolicy | None = None, timeout_s: float = 10.0
) -> CheckResult:
    """The client contract against the live engine; on a vision plan, also what image URLs clients may send."""
    title = "API compatibility"
    note = "" if media is None else f"; {_media_note(media)}"
    try:
        recorded = load_contract(contract_path)
        live = record_contract(base_url, timeout_s)
    except (ConfigError, EngineError) as err:
        return check(
            "pilot.api",
            title,
            "unknown",
            " ".join(str(err).split()) + note,
            "Boot the engine (`appliance serve`) and pass --engine-url, with a recorded contract",
        )
    diff = diff_contract(recorded, live)
    evidence: dict[str, Any] = {
        "contract": str(contract_path),
        "recorded_from": recorded.source,
        "engine": base_url,
        "removed": list(diff.removed),
        "changed": list(diff.changed),
        "added": list(diff.added),
        "media_hosts": list(media.allowed_hosts) if media else None,
    }
    counts = f"{len(diff.removed)} removed, {len(diff.changed)} changed, {len(diff.added)} added{note}"
    if diff.breaking:
        return check(
            "pilot.api",
            title,
            "fail",
            f"clients would break: {counts}",
            "Review the diff with the platform team before the pilot review closes",
            **evidence,
        )
    return check("pilot.api", title, "pass", f"the engine serves the client contract ({counts})", **evidence)


def _media_note(media: MediaPolicy) -> str:
    if media.allowed_hosts:
        return f"image URLs only from {', '.join(media.allowed_hosts)} (others get a 4xx: tell clients)"
    return "remote image URLs are refused with a 4xx: clients must send images inline (data: URLs)"


def _engine(plan: LaunchPlan, options: PilotOptions) -> tuple[EngineEnv | None, str | None]:
    try:
        return inspect_engine(plan.python, options.timeout_s), None
    except LaunchError as err:
        return None, str(err)


def _ttnn(validated: ValidatedConfig, plan: LaunchPlan, host: HostFacts, options: PilotOptions) -> TtnnProbe | str:
    """ttnn in the engine's interpreter on tt; on cpu, in the .engines/ttnn probe environment if built."""
    engines = (
        Path(paths.engines_dir)
        if (paths := validated.config.paths).engines_dir
        else default_engines_dir(paths.cache_dir)
    )
    python = plan.python if plan.engine == "tt" else str(engines / "ttnn" / "bin" / "python")
    if plan.engine != "tt" and not Path(python).is_file():
        return f"not needed by the CPU engine ({python} is not built: make engine-ttnn)"
    try:
        return probe_ttnn(python, host.boards, Path(plan.state_dir) / "locks", options.timeout_s)
    except LaunchError as err:
        return str(err)


def _releases(options: PilotOptions) -> ReleaseList | str:
    try:
        return index_releases() if options.releases == "index" else load_releases(Path(options.releases))
    except (ConfigError, EngineError) as err:
        return f"no release list: {' '.join(str(err).split())}"
