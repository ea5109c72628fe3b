"""The media gate: a vision engine reaches the network only through it, and only the hosts the site lists.

vLLM fetches an image URL with aiohttp in a session made with `trust_env=True` (vllm/connections.py), so the
engine's HTTP_PROXY and HTTPS_PROXY (compat/media.py) send every fetch here: a plain request in absolute form, an
https one as CONNECT. The gate admits a request only when its host is listed in serving.allowed_media_domains,
resolves the host itself and connects to an address it has checked (public, or listed by the site as an address),
so a name that resolves to loopback, link-local or a private range, or re-resolves between a check and a connect,
reaches nothing. A redirect is a new request through the gate, checked again. A refusal is a 403 whose body says
nothing of the address, which vLLM answers with a 422; the reason is in the appliance's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import h11

from appliance.compat.media import MEDIA_GATE_VAR, MediaPolicy
from appliance.plan import LaunchPlan

__all__ = ["MediaGate", "Refused", "open_media_gate"]

log = logging.getLogger(__name__)

_HEAD_TIMEOUT_S = 10.0
_CONNECT_TIMEOUT_S = 10.0
_CHUNK = 1 << 16
_MIB = 1 << 20
_HEADERS = 1 << 16
"""Room for the response's head (and TLS records' overhead in a tunnel) on top of the image's cap."""
_HOP_BY_HOP = {b"connection", b"keep-alive", b"proxy-connection", b"proxy-authorization", b"te", b"upgrade"}


class Refused(Exception):
    """The request is not admitted; the message is for the appliance's log only."""


@dataclass(frozen=True, slots=True)
class _Target:
    host: str
    port: int
    head: bytes | None
    """The request to forward in origin form; None for a CONNECT tunnel."""


async def open_media_gate(plan: LaunchPlan, environ: MutableMapping[str, str] = os.environ) -> MediaGate | None:
    """The media gate of `plan`'s engine, named in `environ` for every spawn of that engine; None: a text model.
    Where the site names no local folder, the engine's is made here, empty."""
    media = plan.media
    if media is None:
        return None
    if not media.site_local_dir:
        Path(media.local_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
    gate = await MediaGate(lambda: media).start()
    environ[MEDIA_GATE_VAR.format(port=plan.port)] = gate.url
    return gate


class MediaGate:
    """A forward proxy on a loopback port that admits what `policy()` allows (read per request, so an upgraded
    generation's policy applies from its first request) and relays at most its download cap per fetch (the only
    cap where the engine's vLLM has none: 0.26.0)."""

    def __init__(self, policy: Callable[[], MediaPolicy | None]) -> None:
        self.policy = policy
        self._server: asyncio.Server | None = None
        self.refused = 0
        """Requests refused since start (each logged with its reason)."""

    @property
    def url(self) -> str:
        assert self._server is not None, "start() first"
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    async def start(self) -> MediaGate:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            target = await asyncio.wait_for(_read_target(reader), _HEAD_TIMEOUT_S)
            address, cap = await self._admit(target)
        except (Refused, TimeoutError, h11.ProtocolError, ConnectionError) as why:
            self.refused += 1
            log.warning("media gate refused a fetch: %s", why)
            await _answer(writer, 403, b"refused by the site's media policy\n")
            return
        try:
            # The address checked, never the name again: a second resolution could answer otherwise.
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(address, target.port), _CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError) as why:  # the site's listed store did not answer: not the client's fault
            log.warning("media gate could not reach %s: %s", target.host, why)
            await _answer(writer, 502, b"the media host could not be reached\n")
            return
        if target.head is None:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            up_writer.write(target.head)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer, cap))

    async def _admit(self, target: _Target) -> tuple[str, int]:
        """The address to connect to for a listed host, and how many bytes the fetch may bring back."""
        policy = self.policy()
        allowed = set(policy.allowed_hosts) if policy else set()
        if policy is None or target.host not in allowed:
            raise Refused(f"host {target.host} is not in serving.allowed_media_domains")
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
        except OSError as why:
            raise Refused(f"{target.host} does not resolve: {why}") from None
        addresses = [str(info[4][0]) for info in infos]
        permitted = [a for a in addresses if _permitted(a, allowed)]
        if not permitted:
            raise Refused(f"{target.host} resolves to {', '.join(sorted(set(addresses)))}, none public or listed")
        return permitted[0], policy.max_download_mb * _MIB + _HEADERS


def _permitted(address: str, allowed: set[str]) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip) in allowed or (ip.is_global and not ip.is_multicast)


async def _read_target(reader: asyncio.StreamReader) -> _Target:
    """The request's target, parsed by h11; a GET/HEAD in absolute form becomes origin form, closing after one
    response (the engine opens a new connection per fetch through a proxy anyway)."""
    conn = h11.Connection(h11.SERVER)
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await reader.read(_CHUNK)
            if not data:
                raise Refused("the client closed before a request")
            conn.receive_data(data)
            continue
        if not isinstance(event, h11.Request):
            raise Refused("not a request")
        break
    method, target = event.method.decode(), event.target.decode("ascii", "replace")
    if method == "CONNECT":
        host, _, port = target.rpartition(":")
        if not host or not port.isdigit():
            raise Refused(f"CONNECT to {target!r}")
        return _Target(host.lower(), int(port), None)
    url = urlsplit(target)
    if method not in ("GET", "HEAD") or url.scheme != "http" or not url.hostname:
        raise Refused(f"{method} {url.scheme or 'relative'} request")
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    headers = [(name, value) for name, value in event.headers if name.lower() not in _HOP_BY_HOP]
    lines = [f"{method} {path} HTTP/1.1".encode(), *(b"%s: %s" % header for header in headers), b"Connection: close"]
    return _Target(url.hostname.lower(), url.port or 80, b"\r\n".join(lines) + b"\r\n\r\n")


async def _answer(writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
    reason = {403: b"Forbidden", 502: b"Bad Gateway"}[status]
    writer.write(
        b"HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
        % (status, reason, len(body), body)
    )
    await _closed(writer)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cap: int | None = None) -> None:
    """Relay until either side closes, or past `cap` bytes: the fetch is then cut short, and fails."""
    sent = 0
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(_CHUNK):
            sent += len(data)
            if cap is not None and sent > cap:
                log.warning("media gate cut a fetch off past its cap of %d bytes", cap)
                break
            writer.write(data)
            await writer.drain()
    await _closed(writer)


async def _closed(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        writer.close()
        await writer.wait_closed()
