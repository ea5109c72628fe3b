"""The one client of the control API: async for the console and the scheduler comparison,
blocking for `appliance status`, the benches and the tests.

Both send the same requests and read the answers the same way (`_Reply`): a document from
`appliance.control.documents`, or ApiError with one line naming the appliance and the reason.
The async client is aiohttp's, as the load generator's is: a console polls once a second all
day, and an aiohttp GET costs it about 0.8 ms of CPU against httpx's 3 ms (measured side by side,
paced as a console polls), a fifth of the console's whole budget. It polls conditionally: it keeps
the last document of each GET with its ETag and sends If-None-Match, so an unchanged document
comes back as a bodiless 304 and is handed out again, the very object, without parsing (an
appliance that sends no ETag is read as before). The blocking client is httpx's, whose
`transport` seam lets tests pass `httpx.MockTransport`; the async one is tested over real HTTP.
The bearer header is built in `_headers` alone. The async client also reads the site gateway's exporter page, so the
console's one connection pool serves it too (appliance.control.gateway_view).
"""

from __future__ import annotations

import codecs
import json
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import Literal, TypeVar, cast

import aiohttp
import httpx

from appliance.control.documents import (
    AcceptedDocument,
    ChecksDocument,
    HostDocument,
    LiveDocument,
    LoadDocument,
    SlotsDocument,
    StateDocument,
    parse,
)
from appliance.control.gateway_view import GatewayReading, read_gateway
from appliance.control.tls import client_context
from appliance.control.upgrade_documents import UpgradeDocument
from appliance.errors import ApiError

__all__ = ["Action", "ApiError", "ControlClient", "SyncControlClient", "Target", "expand_slots", "slot_target"]

Action = Literal["drain", "restart"]
D = TypeVar("D")
_UNREACHABLE = "unreachable: "


@dataclass(frozen=True, slots=True)
class Target:
    """One appliance: the name it is shown under, its control API's URL, and its bearer token."""

    name: str
    url: str
    token: str = field(repr=False)
    ca_file: str | None = None
    """The CA bundle an https control API is verified with (None: the system's trust store)."""


def slot_target(appliance: Target, slot: str) -> Target:
    """The target of one slot of an appliance serving slots: its routes under /slots/<slot>."""
    return Target(f"{appliance.name}/{slot}", f"{appliance.url}/slots/{slot}", appliance.token, appliance.ca_file)


class ControlClient:
    """The control APIs of the appliances in `targets`, async, over one connection pool."""

    def __init__(self, targets: Sequence[Target], *, timeout_s: float = 3.0) -> None:
        self.targets: Mapping[str, Target] = MappingProxyType({t.name: t for t in targets})
        self._tls = {t.name: client_context(t.ca_file) or True for t in targets}
        self._timeout = timeout_s
        self._http: aiohttp.ClientSession | None = None
        self._kept: dict[tuple[str, str], tuple[str, object]] = {}

    def _session(self) -> aiohttp.ClientSession:
        # Created on first use, inside the caller's event loop, and closed by aclose() on that loop.
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._timeout))
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.close()

    async def __aenter__(self) -> ControlClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def _send(
        self, name: str, method: str, path: str, failed: str = _UNREACHABLE, held: str | None = None
    ) -> _Reply:
        target = self.targets[name]
        headers = _headers(target) | ({"If-None-Match": held} if held else {})
        try:
            async with self._session().request(
                method, f"{target.url}{path}", headers=headers, ssl=self._tls[name]
            ) as reply:
                return _Reply(reply.status, reply.url.path, await reply.read(), reply.headers.get("ETag"))
        except _TRANSPORT_ERRORS as err:
            raise ApiError(name, f"{failed}{_reason(err)}{_tls_hint(target, err)}") from None

    async def _get(self, name: str, path: str, kind: type[D], *, optional: bool = False) -> D | None:
        """GET a document, conditionally: the kept one again when the appliance answers 304."""
        kept = self._kept.get((name, path))
        reply = await self._send(name, "GET", path, held=None if kept is None else kept[0])
        if reply.status == 304 and kept is not None:
            return cast(D, kept[1])
        target = self.targets[name]
        document = _optional(target, kind, reply) if optional else _read(target, kind, reply)
        if reply.etag and document is not None:
            self._kept[(name, path)] = reply.etag, document
        else:
            self._kept.pop((name, path), None)
        return document

    async def state(self, name: str) -> StateDocument:
        return cast(StateDocument, await self._get(name, "/state", StateDocument))

    async def slots(self, name: str) -> SlotsDocument | None:
        """Each slot's state, or None when the appliance serves one engine, not slots."""
        return await self._get(name, "/slots", SlotsDocument, optional=True)

    async def load(self, name: str) -> LoadDocument:
        """The engine's load over the appliance's window, with its alerts (the appliance scrapes now)."""
        return cast(LoadDocument, await self._get(name, "/load", LoadDocument))

    async def host(self, name: str) -> HostDocument | None:
        return await self._get(name, "/host", HostDocument, optional=True)

    async def live(self, name: str, *, detail: bool) -> LiveDocument:
        """State and load in one request; with `detail`, host facts and checks too (GET /live)."""
        path = "/live?detail=1" if detail else "/live"
        return cast(LiveDocument, await self._get(name, path, LiveDocument))

    async def checks(self, name: str) -> ChecksDocument | None:
        """The preflight results; None when the appliance ran none."""
        return await self._get(name, "/checks", ChecksDocument, optional=True)

    async def engine_metrics(self, name: str) -> str:
        """The engine's own /metrics page, relayed."""
        return _text(self.targets[name], await self._send(name, "GET", "/engine/metrics"))

    async def follow_logs(self, name: str, tail: int) -> AsyncIterator[list[str]]:
        """Batches of engine log lines: the last `tail`, then new ones as the engine writes them."""
        target = self.targets[name]
        url = f"{target.url}/logs?tail={tail}&follow=1"
        endless = aiohttp.ClientTimeout(total=None, sock_connect=self._timeout)  # the stream has no end to wait for
        try:
            async with self._session().get(
                url, headers=_headers(target), timeout=endless, ssl=self._tls[name]
            ) as reply:
                if reply.status != 200:
                    refused = _Reply(reply.status, reply.url.path, await reply.read())
                    raise ApiError(name, _refusal(refused), reply.status)
                decoder, partial = codecs.getincrementaldecoder("utf-8")(errors="replace"), ""
                async for chunk in reply.content.iter_any():
                    *lines, partial = (partial + decoder.decode(chunk)).split("\n")
                    if lines:
                        yield lines
        except _TRANSPORT_ERRORS as err:  # at connect or mid-stream
            raise ApiError(name, f"{_UNREACHABLE}{_reason(err)}") from None

    async def gateway(self, url: str) -> GatewayReading:
        """The site gateway's exporter page (`appliance gateway --metrics-listen`), read now; ApiError named
        "gateway" when it cannot be reached or read."""
        try:
            async with self._session().get(url) as reply:
                status, page = reply.status, await reply.text(errors="replace")
        except _TRANSPORT_ERRORS as err:
            raise ApiError("gateway", f"{_UNREACHABLE}{_reason(err)}") from None
        if status != 200:
            raise ApiError("gateway", f"{url} answered {status}", status)
        try:
            return read_gateway(page, time.monotonic())
        except ValueError as err:  # not the Prometheus text format
            raise ApiError("gateway", f"{url} is not an exporter page: {err}", status) from None

    async def act(self, name: str, action: Action) -> str:
        """POST /drain or /restart; the state the appliance reports having accepted it in."""
        reply = await self._send(name, "POST", f"/{action}", failed=f"{action} not sent, ")
        return _accepted(self.targets[name], action, reply)


class SyncControlClient:
    """One appliance's control API, blocking."""

    def __init__(self, target: Target, *, transport: httpx.BaseTransport | None = None, timeout_s: float = 5.0) -> None:
        self.target = target
        self._http = httpx.Client(
            transport=transport, timeout=timeout_s, trust_env=False, verify=client_context(target.ca_file) or True
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> SyncControlClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def request(self, method: str, path: str, failed: str = _UNREACHABLE, body: object = None) -> httpx.Response:
        """The raw answer to any request (tests of the API itself read status codes and pages)."""
        try:
            return self._http.request(method, f"{self.target.url}{path}", headers=_headers(self.target), json=body)
        except httpx.HTTPError as err:
            raise ApiError(self.target.name, f"{failed}{_reason(err)}{_tls_hint(self.target, err)}") from None

    def _reply(self, method: str, path: str, failed: str = _UNREACHABLE, body: object = None) -> _Reply:
        reply = self.request(method, path, failed, body)
        return _Reply(reply.status_code, reply.request.url.path, reply.content)  # it polls nothing: no ETag kept

    def state(self) -> StateDocument:
        return _read(self.target, StateDocument, self._reply("GET", "/state"))

    def slots(self) -> SlotsDocument | None:
        return _optional(self.target, SlotsDocument, self._reply("GET", "/slots"))

    def load(self) -> LoadDocument:
        return _read(self.target, LoadDocument, self._reply("GET", "/load"))

    def host(self) -> HostDocument | None:
        return _optional(self.target, HostDocument, self._reply("GET", "/host"))

    def checks(self) -> ChecksDocument | None:
        return _optional(self.target, ChecksDocument, self._reply("GET", "/checks"))

    def engine_metrics(self) -> str:
        return _text(self.target, self._reply("GET", "/engine/metrics"))

    def act(self, action: Action) -> str:
        return _accepted(self.target, action, self._reply("POST", f"/{action}", failed=f"{action} not sent, "))

    def upgrade(
        self, overrides: Sequence[str], against: str | None, gates: Mapping[str, object], *, check: bool
    ) -> UpgradeDocument:
        """POST /upgrade: the upgrade the appliance judged and (unless `check`) started; ApiError with its one-line
        refusal otherwise."""
        body = {"overrides": list(overrides), "against": against, "gates": dict(gates), "check": check}
        reply = self._reply("POST", "/upgrade", failed="upgrade not sent, ", body=body)
        if reply.status not in (200, 202):
            raise ApiError(self.target.name, f"upgrade refused, {_refusal(reply)}", reply.status)
        return _parse(self.target, UpgradeDocument, reply)


@dataclass(frozen=True, slots=True)
class _Reply:
    """One answer as both clients read it: its status, the route that gave it, its body, its ETag."""

    status: int
    path: str
    body: bytes
    etag: str | None = None
    """The async client keeps a document under it; the blocking one does not ask conditionally."""


_TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError)
"""What aiohttp raises when an appliance cannot be reached or stops answering (a timeout is not a ClientError)."""


def _tls_hint(target: Target, err: BaseException) -> str:
    """A plain-HTTP request that a TLS port cut off: say so, not only that the connection dropped."""
    dropped = (httpx.RemoteProtocolError, httpx.ReadError, aiohttp.ServerDisconnectedError)
    if target.url.startswith("http://") and isinstance(err, dropped):
        return "; a control API serving TLS drops plain HTTP: use its https:// URL (with --ca-file)"
    return ""


def _headers(target: Target) -> dict[str, str]:
    return {"Authorization": f"Bearer {target.token}"} if target.token else {}


def _read(target: Target, kind: type[D], reply: _Reply) -> D:
    if reply.status != 200:
        raise ApiError(target.name, _refusal(reply), reply.status)
    return _parse(target, kind, reply)


def _optional(target: Target, kind: type[D], reply: _Reply) -> D | None:
    """The document, or None where the appliance has none (404: e.g. no preflight run)."""
    return None if reply.status == 404 else _read(target, kind, reply)


def _parse(target: Target, kind: type[D], reply: _Reply) -> D:
    try:
        return parse(kind, reply.body)
    except ValueError as err:  # not JSON, or not this document (ValidationError is a ValueError)
        raise ApiError(target.name, f"unexpected answer: {str(err).splitlines()[0]}", reply.status) from None


def _text(target: Target, reply: _Reply) -> str:
    if reply.status != 200:
        raise ApiError(target.name, _refusal(reply), reply.status)
    return reply.body.decode("utf-8", errors="replace")


def _accepted(target: Target, action: Action, reply: _Reply) -> str:
    if reply.status != 202:
        raise ApiError(target.name, f"{action} refused, {_refusal(reply)}", reply.status)
    return _parse(target, AcceptedDocument, reply).state


def _refusal(reply: _Reply) -> str:
    if reply.status == 401:
        return "401: wrong or missing control token (set its token_env or --token-file)"
    try:
        body = json.loads(reply.body)
        detail = str(body.get("error", "")) if isinstance(body, dict) else ""
    except ValueError:  # not JSON (UnicodeDecodeError is a ValueError too)
        detail = reply.body.decode("utf-8", errors="replace").strip()[:120]
    return f"{reply.path} answered {reply.status} {detail}".rstrip()


def _reason(err: Exception) -> str:
    return f"{type(err).__name__} {err}".strip()


def expand_slots(appliance: Target) -> list[Target]:
    """One target per slot of an appliance serving slots; any other (or unreachable) one as itself,
    so a console shows the slots like a fleet and an unreachable appliance as unreachable."""
    try:
        with SyncControlClient(appliance) as api:
            slots = api.slots()
    except ApiError:
        return [appliance]
    return [slot_target(appliance, name) for name in slots.slots] if slots else [appliance]
