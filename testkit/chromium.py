"""A headless Chromium (Debian's, `make chromium`) driven over the DevTools protocol, for the docs site test.

One browser serves every page visit (a browser start per page would cost a second each): a page is opened in a
new target, loaded to its load event (every image fetched by then), and asked what it shows. The protocol travels
on aiohttp's WebSocket client (a dependency already), in Chromium's flat session mode.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp

_FACTS = """JSON.stringify({
  images: [...document.images].map(i => ({src: i.currentSrc || i.src, loaded: i.complete && i.naturalWidth > 0})),
  links: [...document.querySelectorAll('a[href]')].map(a => a.href),
})"""


@dataclass(frozen=True, slots=True)
class PageFacts:
    images: tuple[tuple[str, bool], ...]
    """Each image's URL and whether the browser loaded and decoded it."""
    links: tuple[str, ...]


class Browser:
    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self._socket, self._ids = socket, itertools.count(1)
        self._replies: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._events: list[tuple[str, str, asyncio.Future[None]]] = []
        self._reader = asyncio.create_task(self._read())

    async def visit(self, url: str, screenshot: bool = False) -> tuple[PageFacts, bytes]:
        """What the page at `url` shows once loaded, and (if asked) a PNG of its first screen."""
        target = (await self.call("Target.createTarget", url="about:blank"))["targetId"]
        session = (await self.call("Target.attachToTarget", targetId=target, flatten=True))["sessionId"]
        try:
            await self.call("Page.enable", session=session)
            await self.call(
                "Emulation.setDeviceMetricsOverride",
                session=session,
                width=1280,
                height=900,
                deviceScaleFactor=1,
                mobile=False,
            )
            loaded = self._event("Page.loadEventFired", session)
            await self.call("Page.navigate", session=session, url=url)
            await asyncio.wait_for(loaded, 30)
            found = await self.call("Runtime.evaluate", session=session, expression=_FACTS, returnByValue=True)
            facts = json.loads(found["result"]["value"])
            png = b""
            if screenshot:
                png = base64.b64decode((await self.call("Page.captureScreenshot", session=session))["data"])
        finally:
            await self.call("Target.closeTarget", targetId=target)
        images = tuple((i["src"], i["loaded"]) for i in facts["images"])
        return PageFacts(images, tuple(facts["links"])), png

    async def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        reply = self._replies[ident] = asyncio.get_running_loop().create_future()
        message = {"id": ident, "method": method, "params": params, **({"sessionId": session} if session else {})}
        await self._socket.send_json(message)
        answer = await asyncio.wait_for(reply, 30)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        result: dict[str, Any] = answer["result"]
        return result

    def _event(self, method: str, session: str) -> asyncio.Future[None]:
        fired: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._events.append((method, session, fired))
        return fired

    async def _read(self) -> None:
        async for message in self._socket:
            data = json.loads(message.data)
            if "id" in data:
                self._replies.pop(data["id"]).set_result(data)
            for method, session, fired in [
                e for e in self._events if e[:2] == (data.get("method"), data.get("sessionId"))
            ]:
                self._events.remove((method, session, fired))
                fired.set_result(None)


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    """Debian's Chromium, headless, in a process group and profile of its own, gone when the block ends."""
    binary = shutil.which("chromium")
    assert binary, "chromium is missing: `make chromium` installs Debian's chromium package"
    with tempfile.TemporaryDirectory() as profile:
        process = subprocess.Popen(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert process.stderr is not None
        drain = threading.Thread(target=process.stderr.read, daemon=True)  # its log must not fill the pipe
        try:
            url = await asyncio.to_thread(_devtools_url, process)
            drain.start()
            async with aiohttp.ClientSession() as client, client.ws_connect(url, max_msg_size=0) as socket:
                yield Browser(socket)
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            if drain.is_alive():
                drain.join(timeout=10)
            process.stderr.close()


def _devtools_url(process: subprocess.Popen[str]) -> str:
    """The browser's DevTools WebSocket URL, from the line Chromium prints when it listens."""
    assert process.stderr is not None
    for line in process.stderr:
        if line.startswith("DevTools listening on "):
            return line.split()[-1]
    raise AssertionError(f"chromium exited {process.wait()} before it listened")
