"""Benchmark: CPU the operator console uses at a 1 s refresh against a live engine, side by side
with vllm-htop polling the same engine at the same interval, in one run.

Boots `appliance serve` (CPU engine), keeps a light steady load on it (so rates, histograms and
the log stream all move), and runs both viewers as real processes in their own pseudo-terminals
(140x48), exactly as an operator would start them. CPU is user+system time from /proc over the
measurement window, after a warm-up that excludes start-up imports. The appliance's own CPU is
reported too, since the console's polls land there: state, host, the log stream, and /load, for
which the appliance scrapes and summarises its engine's /metrics (the console no longer parses them).
Target: console <= 3 % of one core.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import secrets
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import psutil

from appliance.control.client import ApiError, SyncControlClient, Target
from tests.helpers import free_ports

ROOT = Path(__file__).resolve().parent.parent
MODEL = "appliance/tiny-llama"
Popen = subprocess.Popen[bytes]


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process."""
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


@contextlib.contextmanager
def in_pty(
    argv: Sequence[str], env: dict[str, str], cols: int = 140, rows: int = 48
) -> Iterator[subprocess.Popen[bytes]]:
    """Run argv on a pseudo-terminal of its own, draining its output; stop it afterwards."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env | {"TERM": "xterm-256color"},
                            start_new_session=True)  # fmt: skip
    os.close(slave)

    def drain() -> None:
        with contextlib.suppress(OSError):
            while os.read(master, 65536):
                pass

    threading.Thread(target=drain, daemon=True).start()
    try:
        yield proc
    finally:
        for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            if proc.poll() is None:
                proc.send_signal(sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(wait)
        os.close(master)


@contextlib.contextmanager
def served(env: dict[str, str], engine_port: int, control_port: int) -> Iterator[Popen]:
    log = tempfile.NamedTemporaryFile(prefix="console-bench-serve-", suffix=".log", delete=False)  # noqa: SIM115
    argv = [
        sys.executable,
        "-m",
        "appliance.cli",
        "serve",
        "model=tiny",  # the console's cost does not depend on the model; the tiny one leaves the cores to it
        f"serving.port={engine_port}",
        f"control.port={control_port}",
    ]
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 600
        while not ready(control_port, env["APPLIANCE_TOKEN"]):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"appliance did not become ready; see {log.name}")
            time.sleep(1)
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(180)


def ready(control_port: int, token: str) -> bool:
    try:
        with SyncControlClient(Target("appliance", f"http://127.0.0.1:{control_port}", token)) as api:
            return api.state().state == "ready"
    except ApiError:
        return False


def steady_load(engine_port: int, stop: threading.Event) -> None:
    """One request at a time with pauses: the engine stays busy part-time, like a quiet service."""
    body = {"model": MODEL, "prompt": "The operator console", "max_tokens": 64}
    with httpx.Client(timeout=60) as http:
        while not stop.is_set():
            http.post(f"http://127.0.0.1:{engine_port}/v1/completions", json=body)
            stop.wait(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=60.0, help="measured seconds (default 60)")
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds before measuring (default 15)")
    args = parser.parse_args()
    htop = shutil.which("vllm-htop", path=str(Path(sys.executable).parent))
    if htop is None:
        raise SystemExit("vllm-htop is not installed in this venv: pip install vllm-htop (a dev dependency)")
    engine_port, control_port = free_ports(2)
    token = secrets.token_urlsafe(16)
    cache = Path(tempfile.mkdtemp(prefix="console-bench-"))
    env = os.environ | {"APPLIANCE_TOKEN": token, "APPLIANCE_CACHE_DIR": str(cache)}
    console = [sys.executable, "-m", "appliance.cli", "console", "--url", f"http://127.0.0.1:{control_port}"]
    viewer = [htop, "--url", f"http://127.0.0.1:{engine_port}", "--interval", "1", "--no-gpu-detect"]
    stop = threading.Event()
    with served(env, engine_port, control_port) as serve:
        load = threading.Thread(target=steady_load, args=(engine_port, stop), daemon=True)
        load.start()
        with in_pty(console, env) as tui, in_pty(viewer, env) as other:
            time.sleep(args.warmup)
            pids = {"appliance console": tui.pid, "vllm-htop": other.pid, "appliance serve": serve.pid}
            before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            started = time.monotonic()
            time.sleep(args.window)
            elapsed = time.monotonic() - started
            used = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
            alive = {name: proc.poll() is None for name, proc in (("appliance console", tui), ("vllm-htop", other))}
        stop.set()
        load.join()
    print(f"window {elapsed:.1f} s after {args.warmup:.0f} s warm-up, refresh 1 s, light steady load, 2-core host")
    for name, seconds in used.items():
        print(f"{name:>18}: {100 * seconds / elapsed:5.2f} % of one core ({seconds:.2f} CPU s)")
    verdict = "meets" if 100 * used["appliance console"] / elapsed <= 3.0 else "misses"
    print(f"console {verdict} the <= 3 % target; viewers still running at the end: {alive}")


if __name__ == "__main__":
    main()
