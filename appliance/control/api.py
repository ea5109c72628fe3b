"""The control API: state, the appliance's own metrics, engine logs, drain and restart.

Clients send inference to the engine's OpenAI port directly; this API only observes and acts.
Every route but /livez needs the bearer token.
"""

from __future__ import annotations

import hmac
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import httpx
from prometheus_client import CollectorRegistry, Counter, Gauge, Info
from prometheus_client import Enum as EnumMetric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from pydantic_core import to_jsonable_python
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from appliance.host import discover_host
from appliance.observe.host_usage import UsageSampler
from appliance.preflight.checks import CheckResult
from appliance.runtime.lifecycle import EngineState
from appliance.runtime.supervisor import Command, EngineEvent, EngineSupervisor

__all__ = ["create_app", "host_document", "state_document"]

Handler = Callable[[Request], Awaitable[Response]]
_MAX_TAIL = 10_000
_BOOT = (EngineState.STARTING, EngineState.LOADING, EngineState.WARMING)


def state_document(sup: EngineSupervisor) -> dict[str, Any]:
    """What GET /state returns: lifecycle, identity of the config, and the plan without secrets."""
    plan = sup.plan
    return {
        "state": sup.state.value,
        "pid": sup.pid,
        "uptime_s": sup.uptime(),
        "restarts": sup.restarts,
        "last_error": sup.last_error,
        "engine_url": plan.base_url,
        "health_url": plan.health_url,
        "site": plan.site,
        "family": plan.family,
        "checkpoint": plan.checkpoint,
        "served_name": plan.served_name,
        "mesh": plan.mesh,
        "engine": plan.engine,
        "config_hash": plan.config_hash,
        "max_context": plan.max_context,
        "max_concurrency": plan.max_concurrency,
        "choices": dict(plan.choices),
        "provenance": dict(plan.provenance),
        "config": dict(plan.resolved),
        "plan": {"argv": list(plan.argv), "env": dict(plan.env), "secret_env": dict(plan.secret_env)},
        "events": [_event(e) for e in sup.events[-50:]],
    }


def host_document(sup: EngineSupervisor, usage: UsageSampler) -> dict[str, Any]:
    """What GET /host returns: the boards as host discovery reports them, and CPU and memory use."""
    return {
        "devices": to_jsonable_python(discover_host(), fallback=dict),
        "usage": to_jsonable_python(usage.read(sup.pid)),
    }


def _event(event: EngineEvent) -> dict[str, Any]:
    return {"at": event.at, "from": event.previous.value, "to": event.state.value, "reason": event.reason}


class _Metrics:
    """The appliance's own Prometheus metrics, in a registry of its own (no global state)."""

    def __init__(self, sup: EngineSupervisor) -> None:
        self.registry = CollectorRegistry()
        self._state = EnumMetric(
            "appliance_engine_state", "Engine lifecycle state", states=[s.value for s in EngineState],
            registry=self.registry,
        )  # fmt: skip
        self._ready = Gauge("appliance_engine_ready", "1 when the engine is ready", registry=self.registry)
        self._restarts = Counter("appliance_engine_restarts", "Crash restarts", registry=self.registry)
        self._phase = Gauge(
            "appliance_boot_phase_seconds", "Duration of the last boot's phases", ["phase"], registry=self.registry
        )
        info = Info("appliance_config", "The running config", registry=self.registry)
        plan = sup.plan
        info.info({"config_hash": plan.config_hash, "site": plan.site, "checkpoint": plan.checkpoint,
                   "mesh": plan.mesh, "engine": plan.engine})  # fmt: skip
        self._state.state(sup.state.value)
        self._entered = time.monotonic()
        sup.listeners.append(self.on_event)

    def on_event(self, event: EngineEvent) -> None:
        now = time.monotonic()
        if event.previous in _BOOT:
            self._phase.labels(event.previous.value).set(now - self._entered)
        self._entered = now
        self._state.state(event.state.value)
        self._ready.set(1 if event.state is EngineState.READY else 0)
        if event.state is EngineState.RESTARTING and event.previous is not EngineState.FAILED:
            self._restarts.inc()


def create_app(sup: EngineSupervisor, token: str, checks: Sequence[CheckResult] = ()) -> Starlette:
    """The ASGI app for one supervised engine; `checks` are the preflight results serve ran."""
    metrics = _Metrics(sup)
    expected = token.encode()
    usage = UsageSampler()
    tls = ssl.create_default_context()  # built once: a client building its own costs ~50 ms of CPU

    def guarded(handler: Handler) -> Handler:
        async def check(request: Request) -> Response:
            scheme, _, given = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), expected):
                return JSONResponse({"error": "missing or wrong bearer token"}, status_code=401)
            return await handler(request)

        return check

    async def livez(_: Request) -> Response:
        return PlainTextResponse("ok")

    async def state(_: Request) -> Response:
        return JSONResponse(state_document(sup))

    async def prometheus(_: Request) -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def host(_: Request) -> Response:
        return JSONResponse(host_document(sup, usage))

    async def engine_metrics(_: Request) -> Response:
        # Relayed so a remote console needs only the control port, whatever serving.host binds.
        try:
            async with httpx.AsyncClient(verify=tls, timeout=5.0, trust_env=False) as http:
                reply = await http.get(f"{sup.plan.base_url}/metrics")
        except httpx.HTTPError as error:
            return JSONResponse({"error": f"engine /metrics unreachable: {error}"}, status_code=502)
        return Response(reply.content, status_code=reply.status_code, media_type=reply.headers.get("content-type"))

    async def preflight(_: Request) -> Response:
        if not checks:
            return JSONResponse({"error": "no preflight checks were run"}, status_code=404)
        return JSONResponse({"checks": to_jsonable_python(list(checks), fallback=dict)})

    async def logs(request: Request) -> Response:
        text = request.query_params.get("tail", "200")
        if not text.isdigit() or int(text) > _MAX_TAIL:
            return JSONResponse({"error": f"tail must be an integer from 0 to {_MAX_TAIL}"}, status_code=400)
        lines = sup.log.tail(int(text))
        if request.query_params.get("follow") not in ("1", "true"):
            return PlainTextResponse("".join(f"{line}\n" for line in lines))

        async def stream() -> AsyncIterator[str]:
            for line in lines:
                yield f"{line}\n"
            async for line in sup.log.follow():
                yield f"{line}\n"

        return StreamingResponse(stream(), media_type="text/plain")

    def action(command: Command) -> Handler:
        async def act(_: Request) -> Response:
            sup.request(command)
            return JSONResponse({"accepted": command, "state": sup.state.value}, status_code=202)

        return act

    return Starlette(
        routes=[
            Route("/livez", livez),
            Route("/state", guarded(state)),
            Route("/metrics", guarded(prometheus)),
            Route("/engine/metrics", guarded(engine_metrics)),
            Route("/host", guarded(host)),
            Route("/checks", guarded(preflight)),
            Route("/logs", guarded(logs)),
            Route("/drain", guarded(action("drain")), methods=["POST"]),
            Route("/restart", guarded(action("restart")), methods=["POST"]),
        ]
    )
