"""The one client of the control API: async for the console and the scheduler comparison,
blocking for `appliance status`, the benches and the tests.

Both send the same requests and read the answers the same way: a document from
`appliance.control.documents`, or ApiError with one line naming the appliance and the reason.
The async client polls conditionally: it keeps the last document of each GET with its ETag and
sends If-None-Match, so an unchanged document comes back as a bodiless 304 and is handed out
again, the very object, without parsing (an appliance that sends no ETag is read as before).
The bearer header is built in `_headers` alone. `transport` is httpx's seam: tests pass
`httpx.ASGITransport(app=create_app(...))` (async) or `httpx.MockTransport` (either).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import Literal, TypeVar, cast

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


def slot_target(appliance: Target, slot: str) -> Target:
    """The target of one slot of an appliance serving slots: its routes under /slots/<slot>."""
    return Target(f"{appliance.name}/{slot}", f"{appliance.url}/slots/{slot}", appliance.token)


class ControlClient:
    """The control APIs of the appliances in `targets`, async, over one connection pool."""

    def __init__(
        self, targets: Sequence[Target], *, transport: httpx.AsyncBaseTransport | None = None, timeout_s: float = 3.0
    ) -> None:
        self.targets: Mapping[str, Target] = MappingProxyType({t.name: t for t in targets})
        self._transport = transport
        self._timeout = timeout_s
        self._http: httpx.AsyncClient | None = None
        self._kept: dict[tuple[str, str], tuple[str, object]] = {}

    def _session(self) -> httpx.AsyncClient:
        # Created on first use, inside the caller's event loop, and closed by aclose() on that loop.
        if self._http is None:
            self._http = httpx.AsyncClient(transport=self._transport, timeout=self._timeout, trust_env=False)
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()

    async def __aenter__(self) -> ControlClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def _send(
        self, name: str, method: str, path: str, failed: str = _UNREACHABLE, held: str | None = None
    ) -> httpx.Response:
        target = self.targets[name]
        headers = _headers(target) | ({"If-None-Match": held} if held else {})
        try:
            return await self._session().request(method, f"{target.url}{path}", headers=headers)
        except httpx.HTTPError as err:
            raise ApiError(name, f"{failed}{_reason(err)}") from None

    async def _get(self, name: str, path: str, kind: type[D], *, optional: bool = False) -> D | None:
        """GET a document, conditionally: the kept one again when the appliance answers 304."""
        kept = self._kept.get((name, path))
        reply = await self._send(name, "GET", path, held=None if kept is None else kept[0])
        if reply.status_code == 304 and kept is not None:
            return cast(D, kept[1])
        target = self.targets[name]
        document = _optional(target, kind, reply) if optional else _read(target, kind, reply)
        tag = reply.headers.get("etag")
        if tag and document is not None:
            self._kept[(name, path)] = tag, document
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
        try:
            async with self._session().stream("GET", url, headers=_headers(target), timeout=None) as reply:
                if reply.status_code != 200:
                    await reply.aread()
                    raise ApiError(name, _refusal(reply), reply.status_code)
                partial = ""
                async for chunk in reply.aiter_text():
                    *lines, partial = (partial + chunk).split("\n")
                    if lines:
                        yield lines
        except httpx.HTTPError as err:  # at connect or mid-stream
            raise ApiError(name, f"{_UNREACHABLE}{_reason(err)}") from None

    async def act(self, name: str, action: Action) -> str:
        """POST /drain or /restart; the state the appliance reports having accepted it in."""
        reply = await self._send(name, "POST", f"/{action}", failed=f"{action} not sent, ")
        return _accepted(self.targets[name], action, reply)


class SyncControlClient:
    """One appliance's control API, blocking."""

    def __init__(self, target: Target, *, transport: httpx.BaseTransport | None = None, timeout_s: float = 5.0) -> None:
        self.target = target
        self._http = httpx.Client(transport=transport, timeout=timeout_s, trust_env=False)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> SyncControlClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def request(self, method: str, path: str, failed: str = _UNREACHABLE) -> httpx.Response:
        """The raw answer to any request (tests of the API itself read status codes and pages)."""
        try:
            return self._http.request(method, f"{self.target.url}{path}", headers=_headers(self.target))
        except httpx.HTTPError as err:
            raise ApiError(self.target.name, f"{failed}{_reason(err)}") from None

    def state(self) -> StateDocument:
        return _read(self.target, StateDocument, self.request("GET", "/state"))

    def slots(self) -> SlotsDocument | None:
        return _optional(self.target, SlotsDocument, self.request("GET", "/slots"))

    def load(self) -> LoadDocument:
        return _read(self.target, LoadDocument, self.request("GET", "/load"))

    def host(self) -> HostDocument | None:
        return _optional(self.target, HostDocument, self.request("GET", "/host"))

    def checks(self) -> ChecksDocument | None:
        return _optional(self.target, ChecksDocument, self.request("GET", "/checks"))

    def engine_metrics(self) -> str:
        return _text(self.target, self.request("GET", "/engine/metrics"))

    def act(self, action: Action) -> str:
        return _accepted(self.target, action, self.request("POST", f"/{action}", failed=f"{action} not sent, "))


def _headers(target: Target) -> dict[str, str]:
    return {"Authorization": f"Bearer {target.token}"} if target.token else {}


def _read(target: Target, kind: type[D], reply: httpx.Response) -> D:
    if reply.status_code != 200:
        raise ApiError(target.name, _refusal(reply), reply.status_code)
    return _parse(target, kind, reply)


def _optional(target: Target, kind: type[D], reply: httpx.Response) -> D | None:
    """The document, or None where the appliance has none (404: e.g. no preflight run)."""
    return None if reply.status_code == 404 else _read(target, kind, reply)


def _parse(target: Target, kind: type[D], reply: httpx.Response) -> D:
    try:
        return parse(kind, reply.content)
    except ValueError as err:  # not JSON, or not this document (ValidationError is a ValueError)
        raise ApiError(target.name, f"unexpected answer: {str(err).splitlines()[0]}", reply.status_code) from None


def _text(target: Target, reply: httpx.Response) -> str:
    if reply.status_code != 200:
        raise ApiError(target.name, _refusal(reply), reply.status_code)
    return reply.text


def _accepted(target: Target, action: Action, reply: httpx.Response) -> str:
    if reply.status_code != 202:
        raise ApiError(target.name, f"{action} refused, {_refusal(reply)}", reply.status_code)
    return _parse(target, AcceptedDocument, reply).state


def _refusal(reply: httpx.Response) -> str:
    if reply.status_code == 401:
        return "401: wrong or missing control token (set its token_env or --token-file)"
    try:
        body = reply.json()
        detail = str(body.get("error", "")) if isinstance(body, dict) else ""
    except ValueError:
        detail = reply.text.strip()[:120]
    return f"{reply.request.url.path} answered {reply.status_code} {detail}".rstrip()


def _reason(err: httpx.HTTPError) -> str:
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
