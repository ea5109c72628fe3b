"""One planned stop, recorded for several tests: a real `appliance serve` under a real sd_notify
datagram socket is booted, given 50 streaming requests and, once the engine holds all 50, SIGTERM.

test_notify.py reads the notifications, test_reliability.py the requests' fate and what is left of
the engine; conftest's `sigtermed` fixture runs it once per session. test_drain_deadline.py runs it
again with answers longer than its drain deadline.
"""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families

from appliance.control.documents import StateDocument

from .appliance_process import MODEL, Served, start_appliance, stop_appliance
from .helpers import group_gone

STREAMS = 50


@dataclass(frozen=True)
class SigtermRun:
    booted: list[str]
    """sd_notify datagrams up to and including READY=1."""
    stopped: list[str]
    """sd_notify datagrams after the SIGTERM, until serve exited."""
    ready_state: StateDocument
    finishes: list[str | None]
    exit_code: int
    engine_group_gone: bool
    output: str
    """What serve wrote (its log) from boot to exit."""


def sigterm_under_load(tmp: Path, *extra: str, max_tokens: int = 64) -> SigtermRun:
    """Boot (with `extra` overrides), load with STREAMS requests of `max_tokens`, SIGTERM once the engine has
    accepted every one, and record it."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(tmp / "notify.sock"))
        env = {
            "NOTIFY_SOCKET": str(tmp / "notify.sock"),
            "APPLIANCE_STATE_DIR": str(tmp / "state"),
            "APPLIANCE_LOG_DIR": str(tmp / "logs"),
        }
        served = start_appliance(tmp, "mesh=cpu", *extra, env=env)
        try:
            booted = receive(sock, served, until="READY=1")
            state = served.state()
            finishes = stop_under_load(served, max_tokens)
            stopped = receive(sock, served, until=None)
        finally:
            stop_appliance(served)
    return SigtermRun(
        booted, stopped, state, finishes, served.proc.returncode, group_gone(state.pid or 0), served.output.read_text()
    )


def stop_under_load(served: Served, max_tokens: int) -> list[str | None]:
    """The finish reason of each of STREAMS streams that were all in the engine when SIGTERM came (None: the
    stream broke off)."""
    done_before = engine_counts(served)["vllm:request_success_total"]

    def generate(i: int) -> str | None:
        finish = None
        try:
            with served.client().completions.create(
                model=MODEL, prompt=f"request {i}", max_tokens=max_tokens, stream=True, extra_body={"ignore_eos": True}
            ) as stream:
                for chunk in stream:
                    if chunk.choices and chunk.choices[0].finish_reason:
                        finish = chunk.choices[0].finish_reason
        except (openai.APIError, httpx.HTTPError):
            return None  # the engine went away mid-answer
        return finish

    def accepted() -> float:
        counts = engine_counts(served)
        finished = counts["vllm:request_success_total"] - done_before
        return counts["vllm:num_requests_running"] + counts["vllm:num_requests_waiting"] + finished

    with ThreadPoolExecutor(STREAMS) as pool:
        futures = [pool.submit(generate, i) for i in range(STREAMS)]
        deadline = time.monotonic() + 180
        while accepted() < STREAMS:  # every request reached the engine: none of them is "new" at SIGTERM
            assert time.monotonic() < deadline, "the engine never held every request"
            time.sleep(0.05)
        served.proc.terminate()
        finishes = [f.result(timeout=180) for f in futures]
    served.proc.wait(timeout=120)
    return finishes


def engine_counts(served: Served) -> dict[str, float]:
    """Sample totals from the engine's own /metrics page, summed over labels."""
    totals: dict[str, float] = {}
    page = httpx.get(f"{served.engine_url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def receive(sock: socket.socket, served: Served, until: str | None, timeout: float = 300.0) -> list[str]:
    """Datagrams until one contains `until`, or (until=None) until serve has exited and the socket is drained."""
    messages: list[str] = []
    deadline = time.monotonic() + timeout
    sock.settimeout(0.5)
    while time.monotonic() < deadline:
        try:
            messages.append(sock.recv(4096).decode())
        except TimeoutError:
            if served.proc.poll() is not None:
                if until is None:
                    return messages
                raise AssertionError(f"serve exited {served.proc.returncode}; notifications: {messages}") from None
            continue
        if until is not None and until in messages[-1]:
            return messages
    raise AssertionError(f"gave up after {timeout}s; notifications: {messages}")
