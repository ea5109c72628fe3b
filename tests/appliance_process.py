"""A real `appliance serve` process for end-to-end tests, and the marker that skips them
where the CPU engine environment has not been built."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from .helpers import free_port

ROOT = Path(__file__).resolve().parent.parent
ENGINE_TESTS = [
    pytest.mark.engine,
    pytest.mark.skipif(
        not (ROOT / ".engines" / "cpu" / ".appliance-engine-ok").is_file(),
        reason="the CPU engine environment is not built (make engine-cpu)",
    ),
]


@dataclass
class Served:
    proc: subprocess.Popen[bytes]
    engine_url: str
    control_url: str
    token: str
    cache: Path
    output: Path

    def control(self, method: str, path: str, token: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token if token is None else token}"}
        return httpx.request(method, f"{self.control_url}{path}", headers=headers, timeout=30.0)

    def state(self) -> dict[str, Any]:
        document: dict[str, Any] = self.control("GET", "/state").json()
        return document

    def wait_for(self, *states: str, timeout: float = 300.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        state: dict[str, Any] = {"state": "unreachable"}
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"appliance exited {self.proc.returncode}:\n{self.output.read_text()[-3000:]}")
            try:
                state = self.state()
            except httpx.HTTPError:
                state = {"state": "unreachable"}
            if state["state"] in states:
                return state
            time.sleep(0.5)
        raise AssertionError(f"never reached {states}; last state {state['state']}")

    def client(self, api_key: str = "unused") -> OpenAI:
        return OpenAI(base_url=f"{self.engine_url}/v1", api_key=api_key, max_retries=0, timeout=120.0)


def serve_command(engine_port: int, control_port: int, *extra: str, model: str = "tiny") -> list[str]:
    """The installed `appliance` console script, as operators run it (not `python -m`, which would
    put the working directory on the appliance's own import path); the tiny model unless told."""
    return [str(Path(sys.executable).parent / "appliance"), "serve", f"model={model}", f"serving.port={engine_port}",
            f"control.port={control_port}", "supervisor.backoff_initial_s=0.5", *extra]  # fmt: skip


def start_appliance(
    tmp: Path, *extra: str, env: dict[str, str] | None = None, cwd: Path | None = None, model: str = "tiny"
) -> Served:
    """`appliance serve` of `model` on free ports with its cache under `tmp`, run in `cwd`, once it is ready."""
    engine_port, control_port = free_port(), free_port()
    token = secrets.token_urlsafe(16)
    environ = os.environ | {"APPLIANCE_TOKEN": token, "APPLIANCE_CACHE_DIR": str(tmp / "cache")} | (env or {})
    output = tmp / "serve.out"
    with output.open("wb") as sink:
        proc = subprocess.Popen(serve_command(engine_port, control_port, *extra, model=model), env=environ,
                                stdout=sink, stderr=sink, cwd=cwd)  # fmt: skip
    served = Served(proc, f"http://127.0.0.1:{engine_port}", f"http://127.0.0.1:{control_port}", token,
                    tmp / "cache", output)  # fmt: skip
    try:
        served.wait_for("ready")
    except BaseException:
        stop_appliance(served)
        raise
    return served


def stop_appliance(served: Served, timeout: float = 120.0) -> None:
    if served.proc.poll() is None:
        served.proc.terminate()
        try:
            served.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            served.proc.kill()
            served.proc.wait()


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
