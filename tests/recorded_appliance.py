"""A real HTTP server that answers like one appliance's control API, from recorded captures.

The captures in tests/data/console/ were taken from a live `appliance serve` on the CPU engine
(see the README there). Each GET /engine/metrics serves the next recorded page, so a console
sees the load change as it did; the last page repeats. This stands in only where the live
engine cannot give the same answers twice (snapshots, exact maths).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .helpers import free_port

DATA = Path(__file__).parent / "data" / "console"
PAGES = tuple((DATA / f"metrics-{i}.txt").read_text() for i in range(10))
LOG_LINES = (DATA / "logs.txt").read_text().splitlines()


@dataclass
class Recorded:
    """What the server answers, and what it was asked to do."""

    token: str
    pages: tuple[str, ...] = PAGES
    state: dict[str, Any] = field(default_factory=lambda: json.loads((DATA / "state.json").read_text()))
    host: dict[str, Any] = field(default_factory=lambda: json.loads((DATA / "host.json").read_text()))
    checks: Any = None
    """None answers 404, as an appliance without preflight results does."""
    served: int = 0
    actions: list[str] = field(default_factory=list)
    url: str = ""
    closing: threading.Event = field(default_factory=threading.Event)

    def next_page(self) -> str:
        page = self.pages[min(self.served, len(self.pages) - 1)]
        self.served += 1
        return page


def _handler(rec: Recorded) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            if url.path == "/livez":
                return self._send(200, "ok")
            if not self._authorized():
                return None
            routes = {"/state": lambda: rec.state, "/host": lambda: rec.host}
            if url.path in routes:
                return self._send(200, json.dumps(routes[url.path]()), "application/json")
            if url.path == "/engine/metrics":
                return self._send(200, rec.next_page())
            if url.path == "/checks":
                return self._send(404, "{}") if rec.checks is None else self._send(200, json.dumps(rec.checks))
            if url.path == "/logs":
                return self._logs(int(parse_qs(url.query).get("tail", ["200"])[0]))
            return self._send(404, "{}")

        def do_POST(self) -> None:
            if self._authorized():
                rec.actions.append(self.path.strip("/"))
                self._send(202, json.dumps({"accepted": self.path.strip("/"), "state": rec.state["state"]}))

        def _authorized(self) -> bool:
            if self.headers.get("authorization") == f"Bearer {rec.token}":
                return True
            self._send(401, json.dumps({"error": "missing or wrong bearer token"}))
            return False

        def _logs(self, tail: int) -> None:
            # Like the real API: the tail, then the stream stays open for new lines.
            self.send_response(200)
            self.send_header("content-type", "text/plain")
            self.end_headers()
            lines = LOG_LINES[-tail:] if tail > 0 else []
            self.wfile.write("".join(f"{line}\n" for line in lines).encode())
            self.wfile.flush()
            rec.closing.wait(30)

        def _send(self, code: int, body: str, kind: str = "text/plain") -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@contextmanager
def recorded_appliance(token: str = "recorded-token", **answers: Any) -> Iterator[Recorded]:
    rec = Recorded(token, **answers)
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _handler(rec))
    server.daemon_threads = True
    rec.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield rec
    finally:
        rec.closing.set()
        server.shutdown()
        server.server_close()
        thread.join()
