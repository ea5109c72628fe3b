"""Image hosts on loopback addresses for the media-gate tests: real HTTP servers that record every connection.

`/red.png` is a small PNG, `/bytes/<n>` is n bytes, `/redirect?to=<url>` answers 302 to the URL.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from PIL import Image

__all__ = ["ImageHost", "image_host", "red_png"]


def red_png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (56, 56), (200, 30, 30)).save(buffer, "PNG")
    return buffer.getvalue()


@dataclass
class ImageHost:
    address: str
    port: int
    connections: list[str] = field(default_factory=list)
    """The path of every request that reached this host."""

    def url(self, path: str, host: str | None = None) -> str:
        return f"http://{host or self.address}:{self.port}{path}"


@contextmanager
def image_host(address: str = "127.0.0.1") -> Iterator[ImageHost]:
    png = red_png()
    host = ImageHost(address, 0)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            host.connections.append(self.path)
            url = urlsplit(self.path)
            if url.path == "/redirect":
                self.send_response(302)
                self.send_header("Location", parse_qs(url.query)["to"][0])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = png if url.path == "/red.png" else b"\0" * int(url.path.rsplit("/", 1)[-1])
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            pass

    server = ThreadingHTTPServer((address, 0), Handler)
    host.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield host
    finally:
        server.shutdown()
        server.server_close()
