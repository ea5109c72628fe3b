"""Benchmark: does the control plane answer while its engine saturates the host? `/readyz` latency and
the appliance's main thread's share of the CPU and of the run queue, idle and under load, in one run.

Boots `appliance serve` (CPU engine, model=tiny, per-step logging: the engine tier's read-only
appliance), then measures two windows on it: idle, and under closed-loop streams sent to the engine
port. `/readyz` is what a balancer checks (HAProxy: 2 s); it reads only the supervisor's state, so
its latency is the appliance's scheduling delay. Run-queue wait is from /proc/<pid>/schedstat.
Session 8 found the appliance's thread waiting 78.7 % of the time beside an engine in a session of
its own (Linux's autogroup scheduler), so the engine now stays in the appliance's session.
Run from the repository root: `PYTHONPATH=. .venv/bin/python bench/control_latency.py`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from appliance.loadtest.stats import distribution
from testkit.appliance_process import READ_ONLY_EXTRA, ClosedLoop, running_appliance


@dataclass(frozen=True)
class Window:
    name: str
    latencies: list[float]
    on_cpu: float
    run_queue: float
    completions: int

    def row(self) -> str:
        ms = distribution(self.latencies)  # the load tester's summary, in milliseconds
        return (
            f"{self.name:<22} {ms.count:>5} {ms.p50:>9.1f} {ms.p99:>9.1f} {ms.max:>9.1f} "
            f"{self.on_cpu:>8.1%} {self.run_queue:>10.1%} {self.completions:>7}"
        )


def schedstat(pid: int) -> tuple[float, float]:
    """Seconds on the CPU and waiting in the run queue, of the process's main thread."""
    on_cpu, waiting, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
    return int(on_cpu) / 1e9, int(waiting) / 1e9


def measure(name: str, pid: int, control_url: str, seconds: float, load: ClosedLoop | None) -> Window:
    latencies: list[float] = []
    cpu0, wait0 = schedstat(pid)
    start = time.monotonic()
    done0 = load.outcomes["ok"] if load else 0
    with httpx.Client(base_url=control_url, timeout=30.0) as http:
        while time.monotonic() - start < seconds:
            sent = time.monotonic()
            http.get("/readyz")
            latencies.append(time.monotonic() - sent)
            time.sleep(0.25)
    elapsed = time.monotonic() - start
    cpu1, wait1 = schedstat(pid)
    done = (load.outcomes["ok"] if load else 0) - done0
    return Window(name, latencies, (cpu1 - cpu0) / elapsed, (wait1 - wait0) / elapsed, done)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=40.0, help="length of each window")
    parser.add_argument("--streams", type=int, default=4, help="closed-loop streams in the loaded window")
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in psutil.getloadavg())}")
    with (
        tempfile.TemporaryDirectory(prefix="control-latency-") as tmp,
        running_appliance(Path(tmp), *READ_ONLY_EXTRA) as served,
    ):
        pid = served.proc.pid
        idle = measure("idle", pid, served.control_url, args.seconds, None)
        with ClosedLoop(served.engine_url, streams=args.streams) as load:
            time.sleep(5)  # every stream in flight before the window opens
            loaded = measure(f"{args.streams} closed-loop streams", pid, served.control_url, args.seconds, load)
    print(
        f"{'window':<22} {'polls':>5} {'median ms':>9} {'p99 ms':>9} {'max ms':>9} {'on CPU':>8} "
        f"{'run queue':>10} {'done':>7}"
    )
    for window in (idle, loaded):
        print(window.row())
    ratio = statistics.median(loaded.latencies) / statistics.median(idle.latencies)
    print(
        f"/readyz median, loaded / idle: {ratio:.2f}x; worst under load {max(loaded.latencies):.3f} s "
        f"(a balancer's check times out at 2 s)"
    )


if __name__ == "__main__":
    main()
