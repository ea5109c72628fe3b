"""A real HTTP server that answers chat requests with images as vLLM 0.32 did, from its recorded answers.

The answers are testkit/data/vllm-cpu-vision-exchanges.json, recorded from vLLM's OpenAI server
(its `source` says which); this server only picks which one a request earns, by the checks vLLM
made before answering them: more images than the limit, a `data:` URL that is not base64, bytes
Pillow cannot open, an image sent to a text-only model. A request that passes gets vLLM's recorded
stream of a real image request. The fast tier uses it where booting a vision engine per test would
cost minutes: the load tester's client side (sending, classifying, going on) is what is tested.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from aiohttp import web
from PIL import Image, UnidentifiedImageError

from .helpers import free_port

EXCHANGES: dict[str, Any] = json.loads((Path(__file__).parent / "data" / "vllm-cpu-vision-exchanges.json").read_text())[
    "exchanges"
]
IMAGE_LIMIT = 2
"""The recorded server's --limit-mm-per-prompt."""


def _answer(name: str) -> web.Response:
    exchange = EXCHANGES[name]
    kind = "text/event-stream" if exchange["status"] == 200 else "application/json"
    return web.Response(status=exchange["status"], text=exchange["body"], content_type=kind)


def _refusal(content: Any, multimodal: bool) -> str | None:
    """The recorded exchange vLLM answered such a message with, or None when it served it."""
    urls = [p["image_url"]["url"] for p in content if p["type"] == "image_url"] if isinstance(content, list) else []
    if urls and not multimodal:
        return "image-to-text-only-model"
    if len(urls) > IMAGE_LIMIT:
        return "too-many-images"
    for url in urls:
        try:
            data = base64.b64decode(url.split(",", 1)[1], validate=True)
        except binascii.Error:
            return "not-base64"
        try:
            Image.open(io.BytesIO(data)).load()
        except UnidentifiedImageError:
            return "undecodable-image"
    return None


@asynccontextmanager
async def recorded_vision_server(*, multimodal: bool = True) -> AsyncIterator[str]:
    """The server on a free port until the block ends; yields its base URL. `multimodal=False` answers as
    vLLM serving a text-only model did."""

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        refusal = _refusal(body["messages"][0]["content"], multimodal)
        return _answer(refusal or "image-stream")

    async def tokenize(request: web.Request) -> web.Response:
        body = await request.json()
        if not multimodal and _refusal(body["messages"][0]["content"], multimodal):
            return _answer("tokenize-image-on-text-only-model")
        return web.Response(status=501, text="only the text-only model's refusal is recorded")

    app = web.Application(client_max_size=64 << 20)  # vLLM takes bodies of any size; aiohttp stops at 1 MB
    app.add_routes([web.post("/v1/chat/completions", chat), web.post("/tokenize", tokenize)])
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
