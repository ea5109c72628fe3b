"""Benchmark: CPU the operator console uses at a 1 s refresh against a live engine, beside
vllm-htop polling the same engine at the same interval, and the appliance's CPU serving the
console's polls, in one run.

Boots `appliance serve` (CPU engine, model=tiny), keeps a light steady load on it (so rates,
histograms and the log all move), then measures three windows in turn on that one appliance:
the appliance alone; the console (dashboard) polling it; vllm-htop polling the engine. Each
viewer runs as a real process in its own pseudo-terminal (140x48), exactly as an operator would
start it, and is measured after a warm-up that excludes start-up imports. CPU is user+system time
from /proc. The appliance's CPU with the console, less its CPU alone, is what serving the
console's polls costs (/state, /load, for which it scrapes and summarises its engine's /metrics,
and now and then /host and /checks). Target: console <= 1 % of one core and <= 2x vllm-htop.
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
from testkit.helpers import free_ports

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
    proc = subprocess.Popen(
        argv, stdin=slave, stdout=slave, stderr=slave, env=env | {"TERM": "xterm-256color"}, start_new_session=True
    )
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


def measure(pids: dict[str, int], window: float) -> dict[str, float]:
    """Percent of one core each process used over the next `window` seconds."""
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    started = time.monotonic()
    time.sleep(window)
    elapsed = time.monotonic() - started
    return {name: 100 * (cpu_seconds(pid) - before[name]) / elapsed for name, pid in pids.items()}


def watched(argv: Sequence[str], env: dict[str, str], serve: Popen, args: argparse.Namespace) -> dict[str, float]:
    """The viewer's and the appliance's CPU while the viewer runs, after its warm-up."""
    with in_pty(argv, env) as viewer:
        time.sleep(args.warmup)  # start-up imports and the first screen are not the steady state
        used = measure({"viewer": viewer.pid, "appliance": serve.pid}, args.window)
        if viewer.poll() is not None:
            raise SystemExit(f"{argv[0]} exited early ({viewer.returncode}); the figures would mean nothing")
    return used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=60.0, help="measured seconds per phase (default 60)")
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds before each measurement (default 15)")
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
        time.sleep(args.warmup)
        alone = measure({"appliance": serve.pid}, args.window)["appliance"]
        with_console = watched(console, env, serve, args)
        with_htop = watched(viewer, env, serve, args)
        stop.set()
        load.join()
    report(args, alone, with_console, with_htop)


def report(args: argparse.Namespace, alone: float, console: dict[str, float], htop: dict[str, float]) -> None:
    print(
        f"three {args.window:.0f} s windows, each after {args.warmup:.0f} s, refresh 1 s, light steady load, "
        f"{os.cpu_count()}-core host; % of one core"
    )
    print(f"{'appliance console':>18}: {console['viewer']:5.2f} %")
    print(f"{'vllm-htop':>18}: {htop['viewer']:5.2f} %   (polls the engine's /metrics directly)")
    ratio = console["viewer"] / htop["viewer"] if htop["viewer"] > 0 else float("inf")
    print(f"{'console / htop':>18}: {ratio:5.2f} x")
    print(
        f"{'appliance serve':>18}: {alone:5.2f} % alone, {console['appliance']:5.2f} % while the console polls it "
        f"(+{console['appliance'] - alone:.2f}), {htop['appliance']:5.2f} % beside vllm-htop"
    )
    met = console["viewer"] <= 1.0 and ratio <= 2.0
    print(f"console {'meets' if met else 'misses'} the target: <= 1 % of a core and <= 2x vllm-htop")


if __name__ == "__main__":
    main()
