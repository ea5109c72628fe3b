"""Soak: the `mixed` workload against a real `appliance serve` of the embedded default (smollm2) for a
long run, with the console's poller and `appliance status` attached, watching the appliance's memory
and file descriptors.

Halfway through, the engine is restarted once through the control API (`--no-restart` skips it).
Prints the appliance process's RSS and open fds at the start, the middle and the end, their
growth, the number of console polls and status calls, the restart's downtime, and the load test's
errors inside and outside it (with no balancer in front, requests sent while the engine restarts
are refused: `tests/test_gateway.py` is the zero-error case).
Targets: RSS and fds flat across the restart (growth within noise), 0 errors outside the restart
window. Default 10 minutes.
Run from the repository root: `PYTHONPATH=. .venv/bin/python bench/soak.py [--duration S]`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from appliance.control.client import ControlClient, Target
from appliance.loadtest.report import load_report
from tests.appliance_process import start_appliance, stop_appliance
from tui.poll import poll


def rss_kib(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss // 1024)


def open_fds(pid: int) -> int:
    return int(psutil.Process(pid).num_fds())


@dataclass
class Watched:
    samples: list[tuple[float, int, int]] = field(default_factory=list)
    """(seconds in, appliance RSS KiB, open fds), every 10th poll."""
    polls: int = 0
    statuses: int = 0
    restart: tuple[float, float] | None = None
    """Wall-clock (requested, ready again) of the one restart."""


async def watch(target: Target, seconds: float, pid: int, restart_at: float | None) -> Watched:
    """Poll like the console (1 s, detail every 3rd), run `appliance status` every 10 s, and restart
    the engine once at `restart_at` seconds in."""
    client = ControlClient([target])
    seen = Watched()
    requested: float | None = None
    went_down = False
    start = time.monotonic()
    try:
        while time.monotonic() - start < seconds:
            polled = await poll(client, target.name, detail=seen.polls % 3 == 0)
            seen.polls += 1
            polls = seen.polls
            ready = polled.state is not None and polled.state.state == "ready"
            if restart_at is not None and requested is None and time.monotonic() - start >= restart_at:
                requested = time.time()
                await client.act(target.name, "restart")
            elif requested is not None and seen.restart is None:
                went_down = went_down or not ready
                if went_down and ready:
                    seen.restart = (requested, time.time())
            if polls % 10 == 0:
                env = os.environ | {"APPLIANCE_TOKEN": target.token}
                status = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "appliance.cli", "status", "--url", target.url, "--json", env=env,
                    stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
                )  # fmt: skip
                seen.statuses += await status.wait() == 0
                seen.samples.append((time.monotonic() - start, rss_kib(pid), open_fds(pid)))
            await asyncio.sleep(1.0)
    finally:
        await client.aclose()
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=600.0)
    parser.add_argument("--no-restart", action="store_true", help="no engine restart halfway")
    parser.add_argument("--model", default="smollm2", help="the model group option to serve (default smollm2)")
    args = parser.parse_args()
    restart_at = None if args.no_restart else args.duration / 2
    with tempfile.TemporaryDirectory() as tmp:
        served = start_appliance(Path(tmp), model=args.model)
        try:
            pid = served.proc.pid
            target = Target("soak", served.control_url, served.token)
            load = subprocess.Popen(
                [sys.executable, "-m", "appliance.cli", "loadtest", "workload=mixed", "--url", served.engine_url,
                 "--duration", str(args.duration), "--max-requests", "100000", "--out", f"{tmp}/report"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            seen = asyncio.run(watch(target, args.duration, pid, restart_at))
            load.wait(timeout=args.duration + 600)
            report = load_report(Path(tmp) / "report" / "report.json")
        finally:
            stop_appliance(served)
    samples = seen.samples
    first, middle, last = samples[0], samples[len(samples) // 2], samples[-1]
    for label, (at, rss, fds) in (("start", first), ("middle", middle), ("end", last)):
        print(f"{label:>6} t={at:6.0f}s  appliance RSS {rss / 1024:7.1f} MiB  open fds {fds}")
    print(f"growth start->end: RSS {(last[1] - first[1]) / 1024:+.1f} MiB, fds {last[2] - first[2]:+d}; "
          f"max RSS {max(s[1] for s in samples) / 1024:.1f} MiB")  # fmt: skip
    print(f"console polls {seen.polls}, status calls {seen.statuses} ok")
    print(f"load: {report.sent} sent, {report.completed} completed, {report.failed} failed, "
          f"{report.request_throughput:.2f} req/s; errors {dict(report.errors)}")  # fmt: skip
    if seen.restart is not None:
        began, ready = seen.restart
        inside = [t for t in report.traces if began <= report.run.started_at + t.sent_s <= ready]
        outside = [t for t in report.traces if t not in inside]
        print(f"restart: engine down {ready - began:.1f} s; failed {sum(not t.ok for t in inside)} of {len(inside)} "
              f"sent meanwhile, {sum(not t.ok for t in outside)} of {len(outside)} outside it")  # fmt: skip
    elif restart_at is not None:
        print("restart: requested, but the engine was not ready again before the end")


if __name__ == "__main__":
    main()
