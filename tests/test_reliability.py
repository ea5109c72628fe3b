"""Faults and planned stops against the real CPU engine (issue: reliability and security).

One appliance, serving with an OpenAI API key, takes five kill -9s of its engine under load and then
a SIGTERM with 50 requests in flight; a second one is itself killed with kill -9; boot failures run
through the real supervisor with the real engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from appliance.plan import LaunchPlan
from appliance.runtime.engine_log import EngineLog
from appliance.runtime.lifecycle import EngineState
from appliance.runtime.supervisor import EngineSupervisor
from appliance.serve import ensure_model

from .appliance_process import ENGINE_TESTS, Served, running_appliance, start_appliance
from .helpers import cpu_plan, free_port, group_gone, wait_for
from .test_engine_cpu import MODEL

pytestmark = ENGINE_TESTS

API_KEY = "sk-reliability-test"


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("keyed")
    with running_appliance(tmp, "serving.api_key_env=SITE_OPENAI_KEY", env={"SITE_OPENAI_KEY": API_KEY}) as served:
        yield served


def client(served: Served, key: str = API_KEY) -> openai.OpenAI:
    return served.client(key)


def test_the_engine_port_takes_the_sites_api_key(keyed: Served) -> None:
    with pytest.raises(openai.AuthenticationError):
        client(keyed, "wrong").completions.create(model=MODEL, prompt="x", max_tokens=1)
    assert client(keyed).completions.create(model=MODEL, prompt="x", max_tokens=1).choices
    assert API_KEY not in keyed.output.read_text()
    assert API_KEY not in keyed.control("GET", "/state").text
    assert API_KEY not in keyed.control("GET", "/logs?tail=5000").text


def test_five_kill_9s_of_the_engine_under_load_give_five_restarts_and_no_orphans(keyed: Served) -> None:
    stop = threading.Event()
    outcomes: list[bool] = []

    def load() -> None:
        while not stop.is_set():
            try:
                client(keyed).completions.create(model=MODEL, prompt="load", max_tokens=8)
                outcomes.append(True)
            except openai.OpenAIError:
                outcomes.append(False)  # the engine is down between a kill and its restart
                time.sleep(0.2)

    loader = threading.Thread(target=load)
    loader.start()
    try:
        pids = []
        for _ in range(5):
            state = keyed.wait_for("ready")
            pids.append(state.pid)
            os.kill(state.pid, signal.SIGKILL)
            keyed.wait_for("restarting", "starting", "loading", "warming", timeout=60)
        final = keyed.wait_for("ready")
    finally:
        stop.set()
        loader.join()
    assert final.restarts == 5
    assert all(group_gone(pid) for pid in pids)
    assert outcomes.count(True) > 5


def test_malformed_control_requests_get_4xx_and_the_appliance_keeps_serving(keyed: Served) -> None:
    for method, path in (("GET", "/logs?tail=-x"), ("PUT", "/state"), ("DELETE", "/drain"), ("GET", "/../etc"),
                         ("GET", "/logs?tail=" + "9" * 400)):  # fmt: skip
        reply = keyed.control(method, path)
        assert 400 <= reply.status_code < 500, (method, path, reply.status_code)
    assert keyed.state().state == "ready"


def test_sigterm_with_50_requests_in_flight_lets_all_50_complete(keyed: Served) -> None:
    pgid = keyed.state().pid
    done_before = engine_counts(keyed)["vllm:request_success_total"]

    def generate(i: int) -> str | None:
        finish = None
        with client(keyed).completions.create(
            model=MODEL, prompt=f"request {i}", max_tokens=64, stream=True, extra_body={"ignore_eos": True}
        ) as stream:
            for chunk in stream:
                if chunk.choices and chunk.choices[0].finish_reason:
                    finish = chunk.choices[0].finish_reason
        return finish

    def accepted() -> float:
        counts = engine_counts(keyed)
        finished = counts["vllm:request_success_total"] - done_before
        return counts["vllm:num_requests_running"] + counts["vllm:num_requests_waiting"] + finished

    with ThreadPoolExecutor(50) as pool:
        futures = [pool.submit(generate, i) for i in range(50)]
        deadline = time.monotonic() + 180
        while accepted() < 50:  # every request reached the engine: none of them is "new" at SIGTERM
            assert time.monotonic() < deadline
            time.sleep(0.05)
        keyed.proc.send_signal(signal.SIGTERM)
        finishes = [f.result(timeout=180) for f in futures]
    assert finishes == ["length"] * 50
    assert keyed.proc.wait(timeout=120) == 143
    assert group_gone(pgid)


def engine_counts(served: Served) -> dict[str, float]:
    """Sample totals from the engine's own /metrics page, summed over labels."""
    totals: dict[str, float] = {}
    page = httpx.get(f"{served.engine_url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def test_kill_9_of_the_appliance_takes_the_engine_with_it(tmp_path: Path) -> None:
    served = start_appliance(tmp_path)
    pgid = served.state().pid
    served.proc.kill()
    served.proc.wait()
    assert group_gone(pgid, timeout=60)


def with_engine_args(plan: LaunchPlan, *args: str, model: str | None = None) -> LaunchPlan:
    argv = list(plan.argv)
    if model is not None:
        argv[argv.index("--model") + 1] = model
    return replace(plan, argv=(*argv, *args))


async def expect_boot_failure(plan: LaunchPlan, cause: str, tmp: Path) -> None:
    error, restarts = await boot_failure(plan, tmp)
    assert restarts == 0, cause
    assert "during boot" in error and cause in error.lower(), (cause, error)


async def boot_failure(plan: LaunchPlan, tmp: Path) -> tuple[str, int]:
    log = EngineLog(tmp / "logs")
    sup = EngineSupervisor(plan, log)
    run = asyncio.create_task(sup.run())
    try:
        await wait_for(sup, EngineState.FAILED, timeout=240)
        await asyncio.sleep(1.0)  # a restart storm would show up here
        snap = sup.snapshot()
        assert snap.state is EngineState.FAILED
        return snap.last_error or "", snap.restarts
    finally:
        sup.request("stop")
        await run
        log.close()


async def test_boot_failures_end_in_failed_with_the_cause_and_no_restart(tmp_path: Path) -> None:
    plan = cpu_plan(tmp_path, f"serving.port={free_port()}")
    ensure_model(plan)
    cases: dict[str, tuple[LaunchPlan, str]] = {
        "bad model directory": (with_engine_args(plan, model=str(tmp_path / "no-such-model")), "no-such-model"),
        "too much KV memory": (
            replace(
                with_engine_args(plan, "--kv-cache-memory-bytes", str(1 << 50)),
                env={k: v for k, v in plan.env.items() if k != "VLLM_CPU_KVCACHE_SPACE"},
            ),
            "requested memory for kv",
        ),  # fmt: skip
    }
    for name, (case, cause) in cases.items():
        await expect_boot_failure(case, cause, tmp_path / name.replace(" ", "-"))
    with socket_taken(plan.port):
        await expect_boot_failure(plan, "address already in use", tmp_path / "port-taken")


@contextlib.contextmanager
def socket_taken(port: int) -> Iterator[None]:
    """A listening socket on `port`, so the engine cannot bind it."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen()
        yield


def test_a_truncated_model_cache_is_detected_and_rebuilt(tmp_path: Path) -> None:
    plan = cpu_plan(tmp_path, f"paths.cache_dir={tmp_path}/cache")
    ensure_model(plan)
    weights = Path(plan.model_path) / "model.safetensors"
    intact = weights.read_bytes()
    weights.write_bytes(intact[: len(intact) // 2])
    ensure_model(plan)
    assert weights.read_bytes() == intact
