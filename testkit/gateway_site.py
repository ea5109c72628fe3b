"""A site behind the real gateway, fast: real appliances (supervisor + control API over HTTP) on fake engines.

Each appliance is the real `EngineSupervisor` and `create_app` served by uvicorn, supervising
testkit/fake_engine.py as its engine (a model name of its own, a chosen concurrency and a chosen slowness), in an
event loop on a thread of its own. The gateway is the real `appliance gateway` command (a child process) running
the real HAProxy; clients are httpx. Only the engine is a stand-in: the gateway is what is under test.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

from appliance.control.api import create_app
from appliance.runtime.engine_log import EngineLog
from appliance.runtime.lifecycle import EngineState
from appliance.runtime.supervisor import EngineSupervisor

from .helpers import fake_plan, free_ports, stop_process, wait_for
from .recorded_appliance import serving_here

TOKEN = "site-token"


@dataclass(frozen=True)
class Engine:
    """One appliance of the site: its name, the model it serves, what its plan runs at once, seconds per answer."""

    name: str
    model: str
    max_concurrency: int = 4
    delay_s: float = 0.0


@asynccontextmanager
async def _appliance(engine: Engine, folder: Path) -> AsyncIterator[str]:
    plan = fake_plan(folder, "--served-name", engine.model, "--delay", str(engine.delay_s))
    plan = replace(plan, served_name=engine.model, max_concurrency=engine.max_concurrency)
    log = EngineLog(folder / "logs")
    sup = EngineSupervisor(plan, log)
    run = asyncio.create_task(sup.run())
    try:
        await wait_for(sup, EngineState.READY)
        async with serving_here(create_app(sup, TOKEN)) as url:
            yield url
    finally:
        sup.request("stop")
        await run
        log.close()


@contextmanager
def running_site(engines: Sequence[Engine], folder: Path) -> Iterator[Path]:
    """The appliances up and ready, on a thread of their own; the site file listing them."""
    ready, stop = threading.Event(), threading.Event()
    site = folder / "site.yaml"
    failed: list[BaseException] = []

    async def serve() -> None:
        async with AsyncExitStack() as stack:
            urls = [await stack.enter_async_context(_appliance(e, folder / e.name)) for e in engines]
            site.write_text("".join(f"- {{name: {e.name}, url: {u}}}\n" for e, u in zip(engines, urls, strict=True)))
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.05)

    def thread_main() -> None:
        try:
            asyncio.run(serve())
        except BaseException as error:  # reported to the test below
            failed.append(error)
            ready.set()

    thread = threading.Thread(target=thread_main, daemon=True)
    thread.start()
    ready.wait(timeout=60)
    if failed:
        raise failed[0]
    try:
        yield site
    finally:
        stop.set()
        thread.join(timeout=30)


def gateway_command(site: Path, *args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "appliance"), "gateway", "--site-file", str(site), *args]


@contextmanager
def running_gateway(
    site: Path,
    folder: Path,
    *overrides: str,
    models: Sequence[str] = (),
    headers: dict[str, str] | None = None,
    metrics_listen: str | None = None,
    env: Mapping[str, str] | None = None,
    check_interval_ms: int = 100,
    within_s: float = 30,
) -> Iterator[str]:
    """`appliance gateway` with `overrides` in front of the site (its control tokens in `env`, else the fake site's),
    its readiness checks every `check_interval_ms`, its exporter on `metrics_listen` (else a free port: HAProxy binds
    with SO_REUSEPORT, so two gateways on one port would share its scrapes); its URL once every model in `models`
    has a ready engine behind it."""
    listen, metrics = (f"127.0.0.1:{port}" for port in free_ports(2))
    args = ["--listen", listen, "--metrics-listen", metrics_listen or metrics]
    args += ["--check-interval-ms", str(check_interval_ms), "--out", str(folder), *overrides]
    tokens = {"APPLIANCE_TOKEN": TOKEN} if env is None else dict(env)
    gateway = subprocess.Popen(gateway_command(site, *args), env=os.environ | tokens)
    url = f"http://{listen}"
    try:
        deadline = time.monotonic() + within_s
        waiting: Sequence[str | None] = models or [None]
        while not all(_ready(url, m, headers or {}) for m in waiting):
            assert gateway.poll() is None, "the gateway exited"
            assert time.monotonic() < deadline, "the gateway never routed to every model"
            time.sleep(0.1)
        yield url
    finally:
        stop_process(gateway, timeout=10)


@contextmanager
def metered_gateway(engines: Sequence[Engine], folder: Path, *overrides: str) -> Iterator[tuple[Path, str, str]]:
    """The site of `engines` behind `appliance gateway` with `overrides`, each model routed: the site file, the
    gateway's URL and its metrics listener's host:port (known before it starts, for a scrape config)."""
    metrics = f"127.0.0.1:{free_ports(1)[0]}"
    models = [e.model for e in engines]
    with (
        running_site(engines, folder) as site,
        running_gateway(site, folder / "gw", *overrides, models=models, metrics_listen=metrics) as url,
    ):
        yield site, url, metrics


def _ready(url: str, model: str | None, headers: dict[str, str]) -> bool:
    try:
        if model is None:
            return httpx.get(f"{url}/v1/models", headers=headers, timeout=5).status_code == 200
        body = {"model": model, "prompt": "x"}
        reply = httpx.post(f"{url}/v1/completions", json=body, headers=headers, timeout=5)
    except httpx.HTTPError:
        return False
    return reply.status_code != 503
