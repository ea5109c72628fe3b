"""Benchmark: what supervision costs. Time to ready of `appliance serve` vs the bare engine command,
and requests/s through the engine port with and without the appliance supervising, side by side.

Ready means the same in both: /health answers 200 and a one-token completion succeeds.
Target: appliance time-to-ready / bare time-to-ready <= 1.10.
Run from the repository root: `PYTHONPATH=. .venv/bin/python bench/serve_overhead.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable

import httpx

from appliance.compat.matrix import load_matrix
from appliance.compat.validate import validate
from appliance.config.compose import compose_config
from appliance.control.client import ApiError, SyncControlClient, Target
from appliance.plan import LaunchPlan, build_plan
from appliance.runtime.spawn import engine_environment
from appliance.serve import ensure_model
from testkit.helpers import stop_process

MODEL = "appliance/tiny-llama"
# The tiny model: what supervision costs shows best where the engine's own work is smallest.
TINY = ("mesh=cpu", "engine=cpu", "model=tiny")


def engine_ready(base: str) -> bool:
    try:
        if httpx.get(f"{base}/health", timeout=2).status_code != 200:
            return False
        body = {"model": MODEL, "prompt": "ping", "max_tokens": 1}
        return httpx.post(f"{base}/v1/completions", json=body, timeout=30).status_code == 200
    except httpx.HTTPError:
        return False


def wait(check: Callable[[], bool], proc: subprocess.Popen[bytes], timeout: float = 600) -> float:
    start = time.perf_counter()
    while not check():
        if proc.poll() is not None or time.perf_counter() - start > timeout:
            raise SystemExit(f"process exited or timed out (code {proc.poll()})")
        time.sleep(0.2)
    return time.perf_counter() - start


async def throughput(base: str, requests: int, concurrency: int) -> float:
    limit = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=120) as client:

        async def one(i: int) -> None:
            async with limit:
                body = {"model": MODEL, "prompt": f"Request {i}", "max_tokens": 16, "ignore_eos": True}
                (await client.post(f"{base}/v1/completions", json=body)).raise_for_status()

        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(requests)))
        return requests / (time.perf_counter() - start)


def bare(plan: LaunchPlan, requests: int, concurrency: int) -> tuple[float, float]:
    proc = subprocess.Popen(
        plan.argv,
        env=engine_environment(plan, dict(os.environ)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        ready = wait(lambda: engine_ready(plan.base_url), proc)
        return ready, asyncio.run(throughput(plan.base_url, requests, concurrency))
    finally:
        stop_process(proc)


def supervised(plan: LaunchPlan, requests: int, concurrency: int) -> tuple[float, float]:
    token = secrets.token_urlsafe(16)
    control = f"http://{plan.control.host}:{plan.control.port}"

    def ready() -> bool:
        try:
            with SyncControlClient(Target("appliance", control, token), timeout_s=2) as api:
                return api.state().state == "ready"
        except ApiError:
            return False

    proc = subprocess.Popen(
        [sys.executable, "-m", "appliance.cli", "serve", *TINY],
        env=os.environ | {"APPLIANCE_TOKEN": token},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        seconds = wait(ready, proc)
        return seconds, asyncio.run(throughput(plan.base_url, requests, concurrency))
    finally:
        stop_process(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    plan = build_plan(validate(compose_config(list(TINY)), load_matrix()))
    ensure_model(plan)
    rows: list[tuple[str, float, float]] = []
    for round_ in range(args.rounds):  # alternate so drift on a noisy machine hits both alike
        rows.append(("bare", *bare(plan, args.requests, args.concurrency)))
        rows.append(("appliance", *supervised(plan, args.requests, args.concurrency)))
        print(f"round {round_ + 1}: " + ", ".join(f"{n} ready {r:.1f}s {q:.1f} req/s" for n, r, q in rows[-2:]))
    mean = {
        n: [sum(v) / len(v) for v in zip(*[(r, q) for m, r, q in rows if m == n], strict=True)]
        for n in ("bare", "appliance")
    }
    print(
        f"time to ready: bare {mean['bare'][0]:.1f} s, appliance {mean['appliance'][0]:.1f} s, "
        f"ratio {mean['appliance'][0] / mean['bare'][0]:.3f} (target <= 1.10)"
    )
    print(
        f"requests/s ({args.requests} x 16 tokens, concurrency {args.concurrency}): bare "
        f"{mean['bare'][1]:.1f}, supervised {mean['appliance'][1]:.1f}, "
        f"ratio {mean['appliance'][1] / mean['bare'][1]:.3f}"
    )


if __name__ == "__main__":
    main()
