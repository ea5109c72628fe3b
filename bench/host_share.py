"""Benchmark: does the host stay operable beside two saturated CPU engines, with the engine's bounded share off and on?

In one run, for each setting (`engine.host_share=null`, then the default weight 10): two `appliance serve` of the
embedded default (SmolLM2-135M-Instruct), each engine on a core of its own, each under a closed loop of two
streams straight at its OpenAI port. Then:
1. the engines' output tokens/s with nothing else running (the price of the bound, when there is nothing to yield
   to);
2. beside the same load, at once: a busy loop in a fresh session (`setsid`, as an ssh login or an Ansible worker
   is) and its share of a core; one Ansible ad-hoc `command` task (ansible-core, local connection) against its
   time on the idle host; `GET /state` from each appliance's control API, its p95.
Targets (issue 41): a fresh session >= 0.9 of a core, the Ansible task <= 1.3x idle, /state p95 <= 50 ms,
tokens/s with the bound >= 0.95x without. Run from the repository root with nothing else running:
`PYTHONPATH=. .venv/bin/python bench/host_share.py`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from testkit.appliance_process import ROOT, ClosedLoop, Served, running_appliance

MAX_TOKENS = 16
BODY = {
    "model": "appliance/smollm2-135m-instruct",
    "prompt": "The capital of France is",
    "max_tokens": MAX_TOKENS,
    "ignore_eos": True,
}
WINDOW_S = 20.0
ANSIBLE = ROOT / ".tools" / "ansible" / "bin"
BUSY = (
    "import time, os\nend = time.monotonic() + {s}\nwhile time.monotonic() < end: pass\nt = os.times()\n"
    "print(t.user + t.system)"
)


def ansible_task_s(home: Path) -> float:
    """One ad-hoc `command` task on localhost (local connection), as a fleet roll runs each of its tasks."""
    env = os.environ | {"ANSIBLE_HOME": str(home), "ANSIBLE_NOCOLOR": "1"}
    started = time.monotonic()
    subprocess.run(
        [
            str(ANSIBLE / "ansible"),
            "localhost",
            "-i",
            "localhost,",
            "-c",
            "local",
            "-m",
            "command",
            "-a",
            "true",
            "-e",
            f"ansible_python_interpreter={ANSIBLE / 'python'}",
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    return time.monotonic() - started


def fresh_session_share(seconds: float) -> float:
    """The share of a core a busy loop gets in a session of its own (`setsid`)."""
    done = subprocess.run(
        ["setsid", sys.executable, "-c", BUSY.format(s=seconds)], capture_output=True, text=True, check=True
    )
    return float(done.stdout) / seconds


def state_latencies(appliances: list[Served], stop: threading.Event, into: list[float]) -> None:
    clients = [served.api() for served in appliances]
    while not stop.is_set():
        for client in clients:
            started = time.monotonic()
            client.state()
            into.append(time.monotonic() - started)
        time.sleep(0.2)


@contextmanager
def pair(tmp: Path, share: str) -> Iterator[list[Served]]:
    with ExitStack() as stack:
        yield [
            stack.enter_context(
                running_appliance(
                    tmp / f"{share.rpartition('=')[2]}-{core}",
                    share,
                    f"engine.env.VLLM_CPU_OMP_THREADS_BIND={core}",
                    model="smollm2",
                )
            )
            for core in (0, 1)
        ]


def tokens_per_s(loops: list[ClosedLoop], seconds: float) -> float:
    before = sum(loop.outcomes["ok"] for loop in loops)
    time.sleep(seconds)
    return (sum(loop.outcomes["ok"] for loop in loops) - before) * MAX_TOKENS / seconds


def measure(tmp: Path, share: str, idle_ansible: float) -> dict[str, float]:
    with pair(tmp, share) as appliances, ExitStack() as stack:
        placements = [served.state().host_share for served in appliances]
        print(f"  {share}: {placements[0]}", flush=True)
        loops = [stack.enter_context(ClosedLoop(s.engine_url, streams=2, body=BODY)) for s in appliances]
        time.sleep(10)  # warm: both loops serving
        alone = tokens_per_s(loops, WINDOW_S)
        latencies: list[float] = []
        stop = threading.Event()
        poller = threading.Thread(target=state_latencies, args=(appliances, stop, latencies))
        poller.start()
        session = fresh_session_share(10.0)
        print(f"    tokens/s alone {alone:.1f}; a fresh session's share of a core {session:.2f}", flush=True)
        task = ansible_task_s(tmp / "ansible-home")  # one: beside unbounded engines it can take minutes
        stop.set()
        poller.join()
        p95 = statistics.quantiles(latencies, n=20)[18] * 1000
        print(f"    Ansible task {task:.1f} s; /state p95 {p95:.0f} ms over {len(latencies)} calls", flush=True)
        assert all(not loop.failures() for loop in loops), [loop.failures() for loop in loops]
        return {
            "tokens/s, nothing else running": alone,
            "fresh session, share of a core": session,
            "Ansible task / idle": task / idle_ansible,
            "/state p95 ms": p95,
        }


def main() -> None:
    argparse.ArgumentParser(description=__doc__).parse_args()  # --help, and no stray arguments
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
        ansible_task_s(tmp / "ansible-home")  # the first run writes Ansible's caches
        idle = statistics.median(ansible_task_s(tmp / "ansible-home") for _ in range(3))
        print(f"Ansible task on the idle host: {idle:.2f} s; idle fresh session: {fresh_session_share(3.0):.2f} core")
        off = measure(tmp, "engine.host_share=null", idle)
        on = measure(tmp, "engine.host_share.weight=10", idle)
        print(f"{'':34} {'bound off':>10} {'bound on':>10}")
        for key in off:
            print(f"{key:34} {off[key]:10.2f} {on[key]:10.2f}")
        ratio = on["tokens/s, nothing else running"] / off["tokens/s, nothing else running"]
        print(f"tokens/s on / off: {ratio:.3f}; load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
