"""Host usage read from the real machine: CPU busy between reads, memory, an engine group's RSS."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil

from appliance.observe.host_usage import UsageSampler, group_rss


def test_cpu_busy_is_unknown_on_the_first_read_and_a_fraction_after() -> None:
    sampler = UsageSampler()
    first = sampler.read(None)
    sum(i * i for i in range(2_000_000))  # some CPU between the reads
    second = sampler.read(None)
    assert first.cpu_busy is None and second.cpu_busy is not None and 0.0 <= second.cpu_busy <= 1.0
    assert second.cores == os.cpu_count() and 0 < second.memory_available_bytes <= second.memory_total_bytes
    assert second.engine_rss_bytes is None


def test_the_engine_rss_sums_every_process_of_its_group_and_nothing_else() -> None:
    child = "import time; time.sleep(60)"
    script = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(60)"
    leader = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        members: list[psutil.Process] = []
        while len(members) < 2 or any(m.status() != psutil.STATUS_SLEEPING for m in members):
            members = [p for p in psutil.process_iter() if _group(p) == leader.pid]  # both started and asleep
        expected = sum(p.memory_info().rss for p in members)
        measured = UsageSampler().read(leader.pid).engine_rss_bytes
        assert measured is not None and abs(measured - expected) <= 0.05 * expected
        assert group_rss(os.getpgid(0)) < psutil.virtual_memory().total
    finally:
        os.killpg(leader.pid, 9)
        leader.wait()


def _group(proc: psutil.Process) -> int | None:
    try:
        return os.getpgid(proc.pid)
    except ProcessLookupError:
        return None
