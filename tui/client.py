"""The console's only way out: the control API of each appliance, over HTTP with its bearer token.

Engine metrics come through the control API's /engine/metrics relay, so a console on a laptop
needs only each appliance's control port. Every call returns typed data or raises ApiError with
one line an operator can act on.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from pydantic import ConfigDict, TypeAdapter

from appliance.errors import ApplianceError
from appliance.observe.engine_metrics import EngineSample, parse_metrics
from appliance.observe.fleet import Target
from appliance.observe.metrics_window import FAMILIES

__all__ = ["Action", "ApiError", "ConsoleClient", "EventDoc", "PlanDoc", "Polled", "StateDoc"]

Action = Literal["drain", "restart"]
_LENIENT = ConfigDict(extra="ignore")  # newer appliances may add keys; older consoles ignore them


class ApiError(ApplianceError):
    """A control API call failed; the message names the appliance and the reason."""


@dataclass(frozen=True, slots=True)
class PlanDoc:
    __pydantic_config__ = _LENIENT

    argv: tuple[str, ...]
    env: Mapping[str, str]
    secret_env: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class EventDoc:
    __pydantic_config__ = ConfigDict(extra="ignore", populate_by_name=True)

    at: float
    to: str
    reason: str


@dataclass(frozen=True, slots=True)
class StateDoc:
    """GET /state, typed."""

    __pydantic_config__ = _LENIENT

    state: str
    pid: int | None
    uptime_s: float | None
    restarts: int
    last_error: str | None
    site: str
    family: str
    checkpoint: str
    served_name: str
    mesh: str
    engine: str
    config_hash: str
    plan: PlanDoc
    provenance: Mapping[str, str]
    max_context: int | None = None
    max_concurrency: int | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    events: tuple[EventDoc, ...] = ()


_STATE = TypeAdapter(StateDoc)


@dataclass(frozen=True, slots=True)
class Polled:
    """One poll of one appliance; `error` set means it could not be reached or read."""

    name: str
    url: str
    state: StateDoc | None = None
    sample: EngineSample | None = None
    metrics_error: str | None = None
    host: Mapping[str, Any] | None = None
    checks: Any = None
    """GET /checks as the appliance answers it; None when it has none yet (404)."""
    error: str | None = None
    detailed: bool = False
    """Host facts and checks were asked for (they are polled less often than state and metrics)."""


class ConsoleClient:
    """Talks to every watched appliance through one HTTP connection pool."""

    def __init__(
        self, targets: Sequence[Target], *, timeout_s: float = 3.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.targets = {t.name: t for t in targets}
        self._timeout = timeout_s
        self._clock = clock
        self._http: httpx.AsyncClient | None = None

    def _session(self) -> httpx.AsyncClient:
        # Created on first use, inside the app's event loop, and closed by aclose() on that loop.
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=self._timeout, trust_env=False)
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()

    async def _get(self, name: str, path: str) -> httpx.Response:
        t = self.targets[name]
        return await self._session().get(f"{t.url}{path}", headers=_auth(t))

    async def poll(self, name: str, *, detail: bool) -> Polled:
        """State and engine metrics; with `detail`, host facts and preflight checks too."""
        url = self.targets[name].url
        try:
            reply = await self._get(name, "/state")
            if reply.status_code != 200:
                return Polled(name, url, error=_refusal(reply))
            state = _STATE.validate_python(reply.json())
            sample, metrics_error = await self._metrics(name)
            host = await self._document(name, "/host") if detail else None
            checks = await self._document(name, "/checks") if detail else None
        except httpx.HTTPError as err:
            return Polled(name, url, error=f"unreachable: {_reason(err)}")
        except ValueError as err:  # bad JSON or a /state this console cannot read (ValidationError is one)
            return Polled(name, url, error=f"unexpected answer: {str(err).splitlines()[0]}")
        return Polled(name, url, state, sample, metrics_error, host, checks, detailed=detail)

    async def _metrics(self, name: str) -> tuple[EngineSample | None, str | None]:
        reply = await self._get(name, "/engine/metrics")
        if reply.status_code != 200:
            return None, _refusal(reply)
        return parse_metrics(reply.text, self._clock(), keep=FAMILIES), None

    async def _document(self, name: str, path: str) -> Any:
        """A JSON document, or None where the appliance has none (404: e.g. no preflight run yet)."""
        reply = await self._get(name, path)
        return reply.json() if reply.status_code == 200 else None

    async def follow_logs(self, name: str, tail: int) -> AsyncIterator[list[str]]:
        """Batches of engine log lines: the last `tail`, then new ones as the engine writes them."""
        t = self.targets[name]
        url = f"{t.url}/logs?tail={tail}&follow=1"
        async with self._session().stream("GET", url, headers=_auth(t), timeout=None) as reply:
            if reply.status_code != 200:
                raise ApiError(f"{name}: {_refusal(reply)}")
            partial = ""
            async for chunk in reply.aiter_text():
                *lines, partial = (partial + chunk).split("\n")
                if lines:
                    yield lines

    async def act(self, name: str, action: Action) -> str:
        """POST /drain or /restart; the state the appliance reports having accepted it in."""
        t = self.targets[name]
        try:
            reply = await self._session().post(f"{t.url}/{action}", headers=_auth(t))
        except httpx.HTTPError as err:
            raise ApiError(f"{name}: {action} not sent, {_reason(err)}") from None
        if reply.status_code != 202:
            raise ApiError(f"{name}: {action} refused, {_refusal(reply)}")
        return str(reply.json().get("state", "?"))


def _auth(target: Target) -> dict[str, str]:
    return {"Authorization": f"Bearer {target.token}"} if target.token else {}


def _refusal(reply: httpx.Response) -> str:
    if reply.status_code == 401:
        return "401: wrong or missing control token (set its token_env or --token-file)"
    try:
        detail = str(reply.json().get("error", ""))
    except ValueError:
        detail = reply.text.strip()[:120]
    return f"{reply.request.url.path} answered {reply.status_code} {detail}".rstrip()


def _reason(err: httpx.HTTPError) -> str:
    return f"{type(err).__name__} {err}".strip()
