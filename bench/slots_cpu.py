"""Benchmark: two slots of one core each (`serve slots=cpu-pair`) against one engine on both cores.

Both set-ups get the same closed-loop load: `--streams` concurrent requests in total (split evenly
over the slots), each a fixed prompt generating `--tokens` tokens with EOS ignored, for
`--seconds`. Prints generated tokens/s of each set-up. Run it on a quiet machine: on a loaded
one the figures measure the other load.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from appliance.control.client import ApiError, SyncControlClient, Target

APPLIANCE = str(Path(sys.executable).with_name("appliance"))


def serve(args: Sequence[str], cache: Path, control: int, token: str) -> subprocess.Popen[bytes]:
    env = os.environ | {"APPLIANCE_TOKEN": token, "APPLIANCE_CACHE_DIR": str(cache)}
    command = [APPLIANCE, "serve", f"control.port={control}", *args]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def ready(target: Target, slots: bool, timeout: float = 900.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with SyncControlClient(target) as api:
                found = api.slots() if slots else None
                states = [d.state for d in found.slots.values()] if found else [api.state().state]
            if states and all(s == "ready" for s in states):
                return
        except ApiError:
            pass
        time.sleep(1.0)
    raise SystemExit(f"{target.url} not ready within {timeout:.0f}s")


def load(engines: Sequence[tuple[str, str]], streams: int, tokens: int, seconds: float) -> float:
    """Generated tokens/s over `seconds` with `streams` closed-loop streams spread over `engines`."""
    stop = time.monotonic() + seconds

    def stream(index: int) -> int:
        url, model = engines[index % len(engines)]
        body = {"model": model, "prompt": "Once upon a time", "max_tokens": tokens, "ignore_eos": True}
        done = 0
        with httpx.Client(timeout=300.0) as http:
            while time.monotonic() < stop:
                reply = http.post(f"{url}/v1/completions", json=body).json()
                done += int(reply["usage"]["completion_tokens"])
        return done

    started = time.monotonic()
    with ThreadPoolExecutor(streams) as pool:
        total = sum(pool.map(stream, range(streams)))
    return total / (time.monotonic() - started)


def run(name: str, args: Sequence[str], engines: Sequence[tuple[str, str]], slots: bool, o: argparse.Namespace) -> None:
    control, token = o.control_port, secrets.token_urlsafe(16)
    with tempfile.TemporaryDirectory(prefix="bench-slots-") as tmp:
        proc = serve(args, Path(tmp), control, token)
        try:
            ready(Target(name, f"http://127.0.0.1:{control}", token), slots)
            rate = load(engines, o.streams, o.tokens, o.seconds)
        finally:
            proc.terminate()
            proc.wait(timeout=180)
    print(f"{name}: {rate:.1f} generated tokens/s ({o.streams} streams, {o.tokens} tokens each, {o.seconds:.0f} s)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=4, help="concurrent requests in total")
    parser.add_argument("--tokens", type=int, default=64, help="tokens generated per request")
    parser.add_argument("--seconds", type=float, default=60.0, help="load duration per set-up")
    parser.add_argument("--control-port", type=int, default=18190)
    o = parser.parse_args()
    pair = [("http://127.0.0.1:18191", "tiny-left"), ("http://127.0.0.1:18192", "tiny-right")]
    run(
        "two slots, one core each",
        ["slots=cpu-pair", "slots.left.serving.port=18191", "slots.right.serving.port=18192"],
        pair,
        True,
        o,
    )
    single = [
        "serving.port=18191",
        "model.served_name=tiny-left",
        "engine.env.VLLM_CPU_OMP_THREADS_BIND=0-1",
        "engine.env.VLLM_CPU_KVCACHE_SPACE=2",
    ]
    run("one engine, both cores", single, pair[:1], False, o)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
