"""The recorded appliance: the real control API (`create_app`) over real HTTP, fed with captures.

The captures in testkit/data/console/ were taken from a live `appliance serve` on the CPU engine
(see the README there). What their real sources cannot give twice alike enters at the API's
seams (`Sources`, and the supervisor it is handed):
- the engine: an httpx.MockTransport answering each GET /metrics with the next recorded page (the
  last repeats), the app's clock one second on per page, so a console sees the load change as it did;
- the host: the recorded GET /host;
- the supervisor: `RecordedSupervisor`, the recorded lifecycle and plan of GET /state and a real
  EngineLog holding the recorded log; drain and restart are noted, not carried out.
uvicorn serves the app on a free port, as `appliance serve` does: httpx.ASGITransport collects a
whole response before returning it, so the endless /logs?follow=1 stream could not pass through it.
Every request the served app receives is counted by path, so a test can see what a console asked for.
"""

from __future__ import annotations

import asyncio
import functools
import json
import socket
import tempfile
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from appliance.compat.matrix import load_matrix
from appliance.compat.validate import validate
from appliance.config.compose import compose_config
from appliance.config.schema import ControlTls
from appliance.control.api import create_app
from appliance.control.sources import Sources
from appliance.control.tls import uvicorn_tls
from appliance.host.discovery import HostFacts
from appliance.observe.board_health import BoardsView
from appliance.observe.host_usage import HostUsage
from appliance.plan import LaunchPlan, build_plan
from appliance.preflight.results import CheckResult
from appliance.runtime.engine_log import EngineLog
from appliance.runtime.lifecycle import EngineEvent, EngineState
from appliance.runtime.supervisor import Command, Listener, SupervisorSnapshot

DATA = Path(__file__).parent / "data" / "console"
PAGES = tuple((DATA / f"metrics-{i}.txt").read_text() for i in range(10))
LOG_LINES = (DATA / "logs.txt").read_text().splitlines()
STATE: dict[str, Any] = json.loads((DATA / "state.json").read_text())
HOST: dict[str, Any] = json.loads((DATA / "host.json").read_text())


@functools.cache
def recorded_plan() -> LaunchPlan:
    """The plan the capture ran: composed as it was, with what only that machine had (paths,
    interpreter, ports, config hash) taken from its recorded /state."""
    plan = build_plan(validate(compose_config(["mesh=cpu", "engine=cpu"]), load_matrix()))
    return replace(
        plan,
        argv=tuple(STATE["plan"]["argv"]),
        env=STATE["plan"]["env"],
        secret_env=STATE["plan"]["secret_env"],
        base_url=STATE["engine_url"],
        health_url=STATE["health_url"],
        site=STATE["site"],
        family=STATE["family"],
        checkpoint=STATE["checkpoint"],
        served_name=STATE["served_name"],
        mesh=STATE["mesh"],
        engine=STATE["engine"],
        config_hash=STATE["config_hash"],
        max_context=STATE["max_context"],
        choices=STATE["choices"],
        max_concurrency=STATE["max_concurrency"],
        provenance=STATE["provenance"],
        resolved=STATE["config"],
    )


class RecordedSupervisor:
    """The recorded appliance's supervisor: its lifecycle as /state recorded it, which never changes."""

    def __init__(self, log_dir: Path) -> None:
        self.plan = recorded_plan()
        self.log = EngineLog(log_dir)
        for line in LOG_LINES:
            self.log.write(line)
        self.actions: list[Command] = []
        events = tuple(
            EngineEvent(e["at"], EngineState(e["from"]), EngineState(e["to"]), e["reason"]) for e in STATE["events"]
        )
        self._snapshot = SupervisorSnapshot(
            EngineState(STATE["state"]), STATE["pid"], STATE["uptime_s"], STATE["restarts"], STATE["last_error"], events
        )

    def snapshot(self) -> SupervisorSnapshot:
        return self._snapshot

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        return lambda: None  # a recording has no new events

    def request(self, command: Command) -> None:
        self.actions.append(command)


class RecordedEngine:
    """Answers GET /metrics with the next recorded page; its clock reads one second per page served."""

    def __init__(self, pages: Sequence[str]) -> None:
        self.pages = pages
        self.served = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        page = self.pages[min(self.served, len(self.pages) - 1)]
        self.served += 1
        return httpx.Response(200, text=page, headers={"content-type": "text/plain; version=0.0.4"})

    def clock(self) -> float:
        return float(max(self.served - 1, 0))


class CountedRequests:
    """An ASGI app that counts the HTTP requests each path (with its query) receives, and the statuses it answers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.paths: Counter[str] = Counter()
        self.answers: Counter[tuple[str, int]] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        query = scope["query_string"].decode()
        path = f"{scope['path']}?{query}" if query else scope["path"]
        self.paths[path] += 1

        async def answer(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.answers[path, message["status"]] += 1
            await send(message)

        await self.app(scope, receive, answer)


@dataclass
class Recorded:
    token: str
    url: str
    supervisor: RecordedSupervisor
    engine: RecordedEngine
    requests: Counter[str]
    """Requests received so far, by path (a test may clear it)."""
    answers: Counter[tuple[str, int]]
    """Answers given so far, by path and status."""

    @property
    def actions(self) -> list[Command]:
        """The drains and restarts the appliance was asked for."""
        return self.supervisor.actions


def recorded_sources(engine: RecordedEngine) -> Sources:
    usage = HostUsage(**HOST["usage"])
    facts = HostFacts(boards=(), kmd_version=HOST["devices"]["kmd_version"])  # the capture's host had no boards
    return Sources(
        engine=httpx.MockTransport(engine), host=lambda: facts, usage=lambda _: usage, clock=engine.clock, share_s=0.0
    )


@dataclass
class RecordedApi:
    app: Starlette
    supervisor: RecordedSupervisor
    engine: RecordedEngine


@contextmanager
def recorded_api(
    token: str = "recorded-token",
    checks: Sequence[CheckResult] = (),
    pages: Sequence[str] = PAGES,
    boards: Callable[[], BoardsView] | None = None,
) -> Iterator[RecordedApi]:
    """The real create_app of the recorded appliance, not served (for httpx.ASGITransport); `boards`: the view of a
    board monitor (on a recorded host tree) for it to report."""
    with tempfile.TemporaryDirectory(prefix="recorded-appliance-") as tmp:
        supervisor = RecordedSupervisor(Path(tmp))
        engine = RecordedEngine(pages)
        sources = replace(recorded_sources(engine), boards=boards)
        try:
            yield RecordedApi(create_app(supervisor, token, checks, sources), supervisor, engine)
        finally:
            supervisor.log.close()


@contextmanager
def recorded_appliance(
    token: str = "recorded-token",
    checks: Sequence[CheckResult] = (),
    pages: Sequence[str] = PAGES,
    boards: Callable[[], BoardsView] | None = None,
) -> Iterator[Recorded]:
    """The recorded appliance served over real HTTP (`boards`: as recorded_api's)."""
    with recorded_api(token, checks, pages, boards) as api:
        counted = CountedRequests(api.app)
        with serving(counted) as url:
            yield Recorded(token, url, api.supervisor, api.engine, counted.paths, counted.answers)


@contextmanager
def not_an_appliance() -> Iterator[str]:
    """A real HTTP server whose GET /state answers JSON that is no appliance's, and GET /load an error."""

    async def state(_: Request) -> Response:
        return JSONResponse({"hello": "world"})

    async def load(_: Request) -> Response:
        return JSONResponse({"error": "boom"}, status_code=500)

    with serving(Starlette(routes=[Route("/state", state), Route("/load", load)])) as url:
        yield url


def _server(app: ASGIApp, tls: ControlTls | None = None) -> tuple[uvicorn.Server, socket.socket]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1, **uvicorn_tls(tls))
    return uvicorn.Server(config), sock


def _url(sock: socket.socket, tls: ControlTls | None = None) -> str:
    return f"{'https' if tls else 'http'}://127.0.0.1:{sock.getsockname()[1]}"


@contextmanager
def serving(app: ASGIApp, tls: ControlTls | None = None) -> Iterator[str]:
    """`app` served by uvicorn on a free loopback port, in a thread of its own, until the block ends (over TLS with
    `tls`, as `appliance serve` serves it with control.tls)."""
    server, sock = _server(app, tls)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield _url(sock, tls)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@asynccontextmanager
async def serving_here(app: ASGIApp) -> AsyncIterator[str]:
    """`app` served by uvicorn on a free loopback port in the running event loop, until the block ends:
    an app whose supervisor runs in the test's loop is served from that loop, as `appliance serve` does."""
    server, sock = _server(app)
    served = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not served.done():
        await asyncio.sleep(0.01)
    try:
        yield _url(sock)
    finally:
        server.should_exit = True
        await served
        sock.close()
