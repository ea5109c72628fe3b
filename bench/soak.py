"""Soak: the `mixed` workload against a real `appliance serve` of the embedded default (smollm2) for a
long run, with the console's poller and `appliance status` attached, watching the appliance's memory
and file descriptors.

Prints the appliance process's RSS and open fds at the start, the middle and the end, their
growth, the number of console polls and status calls, and the load test's error rate.
Targets: RSS and fds flat (growth within noise), error rate 0. Default 10 minutes.
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


async def watch(target: Target, seconds: float, pid: int) -> tuple[list[tuple[float, int, int]], int, int]:
    """Poll like the console (1 s, detail every 3rd) and run `appliance status` every 10 s."""
    client = ControlClient([target])
    samples: list[tuple[float, int, int]] = []
    polls = statuses = 0
    start = time.monotonic()
    try:
        while time.monotonic() - start < seconds:
            await poll(client, target.name, detail=polls % 3 == 0)
            polls += 1
            if polls % 10 == 0:
                env = os.environ | {"APPLIANCE_TOKEN": target.token}
                status = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "appliance.cli", "status", "--url", target.url, "--json", env=env,
                    stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
                )  # fmt: skip
                statuses += await status.wait() == 0
                samples.append((time.monotonic() - start, rss_kib(pid), open_fds(pid)))
            await asyncio.sleep(1.0)
    finally:
        await client.aclose()
    return samples, polls, statuses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=600.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        served = start_appliance(Path(tmp), model="smollm2")
        try:
            pid = served.proc.pid
            target = Target("soak", served.control_url, served.token)
            load = subprocess.Popen(
                [sys.executable, "-m", "appliance.cli", "loadtest", "workload=mixed", "--url", served.engine_url,
                 "--duration", str(args.duration), "--max-requests", "100000", "--out", f"{tmp}/report"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            samples, polls, statuses = asyncio.run(watch(target, args.duration, pid))
            load.wait(timeout=args.duration + 600)
            report = load_report(Path(tmp) / "report" / "report.json")
        finally:
            stop_appliance(served)
    first, middle, last = samples[0], samples[len(samples) // 2], samples[-1]
    for label, (at, rss, fds) in (("start", first), ("middle", middle), ("end", last)):
        print(f"{label:>6} t={at:6.0f}s  appliance RSS {rss / 1024:7.1f} MiB  open fds {fds}")
    print(f"growth start->end: RSS {(last[1] - first[1]) / 1024:+.1f} MiB, fds {last[2] - first[2]:+d}; "
          f"max RSS {max(s[1] for s in samples) / 1024:.1f} MiB")  # fmt: skip
    print(f"console polls {polls}, status calls {statuses} ok")
    error_rate = report.failed / report.sent if report.sent else 0.0
    print(f"load: {report.sent} sent, {report.completed} completed, {report.failed} failed "
          f"(error rate {error_rate:.2%}), {report.request_throughput:.2f} req/s")  # fmt: skip


if __name__ == "__main__":
    main()
