"""The control API: state, load, the appliance's own metrics, engine logs, drain and restart.
GET /live answers state and load (and host facts and checks) in one request, for live views.

Clients send inference to the engine's OpenAI port directly; this API only observes and acts.
Every route but /livez and /readyz needs the bearer token. JSON routes answer the documents of
`appliance.control.documents`, which `appliance.control.client` parses; GET routes carry an ETag
and answer 304 to a client that already holds that version (`appliance.control.versions`).
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import replace

import httpx
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route

from appliance.control.board_metrics import BoardCollector, boards_document
from appliance.control.capabilities import CapabilityView
from appliance.control.documents import (
    AcceptedDocument,
    BootDocument,
    CheckDocument,
    ChecksDocument,
    DevicesDocument,
    EventDocument,
    FaultDocument,
    HostDocument,
    LiveDocument,
    PlanDocument,
    SlotsDocument,
    StateDocument,
    TensorCacheDocument,
    UsageDocument,
    WeightsDocument,
    render,
    validate,
)
from appliance.control.load import LoadTracker
from appliance.control.metrics import ApplianceMetrics
from appliance.control.sources import EngineMetrics, Sources, Supervised, Upgrades
from appliance.control.upgrade_route import upgrade_handler, with_generations
from appliance.control.versions import versioned
from appliance.host.discovery import HostFacts
from appliance.observe.board_health import BoardsView
from appliance.observe.host_usage import HostUsage, UsageSampler
from appliance.plan import LaunchPlan
from appliance.preflight.results import CheckResult
from appliance.runtime.lifecycle import EngineEvent, EngineState
from appliance.runtime.supervisor import Command, SupervisorSnapshot
from appliance.runtime.tensor_cache import cache_state

__all__ = ["checks_document", "create_app", "create_slots_app", "host_document", "state_document"]

Handler = Callable[[Request], Awaitable[Response]]
_MAX_TAIL = 10_000
_STATE_EVENTS = 50  # the latest lifecycle changes /state carries


def state_document(snapshot: SupervisorSnapshot, plan: LaunchPlan) -> StateDocument:
    """What GET /state returns: lifecycle, identity of the config, and the plan without secrets."""
    return StateDocument(
        state=snapshot.state.value,
        pid=snapshot.pid,
        uptime_s=snapshot.uptime_s,
        restarts=snapshot.restarts,
        last_error=snapshot.last_error,
        engine_url=plan.base_url,
        health_url=plan.health_url,
        site=plan.site,
        family=plan.family,
        checkpoint=plan.checkpoint,
        served_name=plan.served_name,
        mesh=plan.mesh,
        engine=plan.engine,
        config_hash=plan.config_hash,
        max_context=plan.max_context,
        max_concurrency=plan.max_concurrency,
        choices=dict(plan.choices),
        provenance=dict(plan.provenance),
        config=dict(plan.resolved),
        plan=PlanDocument(plan.argv, dict(plan.env), dict(plan.secret_env)),
        events=tuple(_event(e) for e in snapshot.events[-_STATE_EVENTS:]),
        fault=None if snapshot.fault is None else validate(FaultDocument, snapshot.fault),
        quarantined=snapshot.quarantined,
        boot=None if snapshot.boot is None else validate(BootDocument, snapshot.boot),
        drain_cancelled=snapshot.drain_cancelled,
        host_share=snapshot.host_share,
        weights=None if plan.weights is None else validate(WeightsDocument, plan.weights),
        tensor_cache=None
        if plan.tensor_cache is None
        else validate(TensorCacheDocument, cache_state(plan.tensor_cache)),
    )


def host_document(facts: HostFacts, usage: HostUsage) -> HostDocument:
    """What GET /host returns: the boards as host discovery reports them, and CPU and memory use."""
    return HostDocument(validate(DevicesDocument, facts), validate(UsageDocument, usage))


def checks_document(checks: Sequence[CheckResult]) -> ChecksDocument:
    """What GET /checks returns: the preflight results serve ran."""
    return ChecksDocument(tuple(validate(CheckDocument, c) for c in checks))


def _event(event: EngineEvent) -> EventDocument:
    return EventDocument(event.at, event.previous.value, event.state.value, event.reason)


def _json(document: object, status_code: int = 200) -> Response:
    return Response(render(document), status_code=status_code, media_type="application/json")


def _guard(token: str) -> Callable[[Handler], Handler]:
    expected = token.encode()

    def guarded(handler: Handler) -> Handler:
        async def check(request: Request) -> Response:
            scheme, _, given = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), expected):
                return JSONResponse({"error": "missing or wrong bearer token"}, status_code=401)
            return await handler(request)

        return check

    return guarded


def create_app(
    sup: Supervised,
    token: str,
    checks: Sequence[CheckResult] = (),
    sources: Sources | None = None,
    upgrades: Upgrades | None = None,
) -> Starlette:
    """The ASGI app for one supervised engine; `checks` are the preflight results serve ran."""
    sources = sources or Sources()
    engine = EngineMetrics(sup.plan.base_url, sources.engine)
    capabilities = CapabilityView(sup)
    load = LoadTracker(sup, engine, sources.clock, capabilities, sources.share_s)
    metrics = ApplianceMetrics(sup, load, capabilities, upgrades=upgrades)
    boards = sources.boards
    if boards is not None:
        metrics.registry.register(BoardCollector(boards, sup.plan.boards.trip_c))
    usage = sources.usage or UsageSampler().read
    checks_now = checks_document(checks) if checks else None  # the preflight ran before serve: it never changes
    checks_body = b"" if checks_now is None else render(checks_now)
    guarded = _guard(token)

    async def livez(_: Request) -> Response:
        return PlainTextResponse("ok")

    async def readyz(_: Request) -> Response:
        # For load balancers (no token): 503 the moment a drain, restart, stop or upgrade begins.
        state = sup.snapshot().state
        held = upgrades is not None and not upgrades.in_rotation()
        ready = state is EngineState.READY and not held
        return PlainTextResponse("upgrading" if held else state.value, status_code=200 if ready else 503)

    def state_now() -> StateDocument:
        document = replace(
            state_document(sup.snapshot(), sup.plan),
            capabilities=capabilities.document(),
            boards=None if boards is None else boards_document(boards()),
        )
        return with_generations(document, upgrades)

    def host_now() -> HostDocument:
        return host_document(sources.host(), usage(sup.snapshot().pid))

    async def state(request: Request) -> Response:
        return versioned(request, render(state_now()))

    async def load_now(request: Request) -> Response:
        return versioned(request, render(await load.document()))

    async def live(request: Request) -> Response:
        # The load first: its scrape can move the capabilities that the state reports.
        now = await load.document()
        if request.query_params.get("detail") not in ("1", "true"):
            return versioned(request, render(LiveDocument(state_now(), now)))
        return versioned(request, render(LiveDocument(state_now(), now, host_now(), checks_now)))

    async def prometheus(_: Request) -> Response:
        return Response(await metrics.page(), media_type=CONTENT_TYPE_LATEST)

    async def host(request: Request) -> Response:
        return versioned(request, render(host_now()))

    async def engine_metrics(_: Request) -> Response:
        # Relayed so a remote reader needs only the control port, whatever serving.host binds.
        try:
            reply = await engine.fetch()
        except httpx.HTTPError as error:
            return JSONResponse({"error": f"engine /metrics unreachable: {error}"}, status_code=502)
        return Response(reply.content, status_code=reply.status_code, media_type=reply.headers.get("content-type"))

    async def preflight(request: Request) -> Response:
        if checks_now is None:
            return JSONResponse({"error": "no preflight checks were run"}, status_code=404)
        return versioned(request, checks_body)

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
            return _json(AcceptedDocument(command, sup.snapshot().state.value), status_code=202)

        return act

    return Starlette(
        routes=[
            Route("/livez", livez),
            Route("/readyz", readyz),
            Route("/state", guarded(state)),
            Route("/load", guarded(load_now)),
            Route("/live", guarded(live)),
            Route("/metrics", guarded(prometheus)),
            Route("/engine/metrics", guarded(engine_metrics)),
            Route("/host", guarded(host)),
            Route("/checks", guarded(preflight)),
            Route("/logs", guarded(logs)),
            Route("/drain", guarded(action("drain")), methods=["POST"]),
            Route("/restart", guarded(action("restart")), methods=["POST"]),
            Route("/upgrade", guarded(upgrade_handler(upgrades)), methods=["POST"]),
        ]
    )


def create_slots_app(
    name: str,
    sups: Mapping[str, Supervised],
    token: str,
    checks: Sequence[CheckResult] = (),
    sources: Sources | None = None,
    boards: Mapping[str, Callable[[], BoardsView]] | None = None,
) -> Starlette:
    """The ASGI app for several slots: GET /slots, and each slot's own app under /slots/<slot>/ (with the view of
    its own boards' monitor, from `boards`).

    The single-engine routes at the root answer 404 naming the slot routes, so a client that
    expects one engine learns why instead of reading one slot as the whole host.
    """
    guarded = _guard(token)

    async def livez(_: Request) -> Response:
        return PlainTextResponse("ok")

    async def slots(request: Request) -> Response:
        states = {slot: state_document(sup.snapshot(), sup.plan) for slot, sup in sups.items()}
        return versioned(request, render(SlotsDocument(name, states)))

    async def single(request: Request) -> Response:
        where = ", ".join(f"/slots/{slot}{request.url.path}" for slot in sups)
        return JSONResponse({"error": f"this appliance serves slots ({name}); ask {where}"}, status_code=404)

    roots = (
        "/state",
        "/load",
        "/live",
        "/metrics",
        "/engine/metrics",
        "/host",
        "/checks",
        "/logs",
        "/drain",
        "/restart",
    )
    return Starlette(
        routes=[
            Route("/livez", livez),
            Route("/slots", guarded(slots)),
            *(Route(path, guarded(single), methods=["GET", "POST"]) for path in roots),
            *(
                Mount(f"/slots/{slot}", app=create_app(sup, token, checks, _slot_sources(sources, boards, slot)))
                for slot, sup in sups.items()
            ),
        ]
    )


def _slot_sources(sources: Sources | None, boards: Mapping[str, Callable[[], BoardsView]] | None, slot: str) -> Sources:
    return replace(sources or Sources(), boards=(boards or {}).get(slot))
