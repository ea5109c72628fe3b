"""Prompts of exact token lengths, built with the target server's own tokenizer.

vLLM serves its tokenizer as /tokenize and /detokenize. A prompt is a slice of token ids from a
seeded word corpus, detokenized and counted again by the server (chat template included), then
lengthened or shortened until the count is exact: byte-level merges at the slice edges can move
the count by a token or two.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from appliance.errors import EngineError
from appliance.loadtest.workload import Api, PlannedRequest

__all__ = ["BuiltPrompt", "ServerTokenizer", "build_prompts", "chat_messages", "word_prompts"]

_CORPUS = (
    "the river carried light across a quiet valley where farmers counted seasons by the color of "
    "wheat and old stories about engines ships towers markets rain letters bridges gardens numbers "
    "winter songs maps lanterns orchards harbors clocks mountains ledgers kitchens forests signals "
    "travelers silver paper glass copper wind morning evening distant careful simple ancient modern "
    "measure build follow return open gather explain remember answer wander notice borrow repair"
)
_WORDS = tuple(_CORPUS.split())
_ATTEMPTS = 8
_CORPUS_PIECES, _PIECE_WORDS = 20, 200


@dataclass(frozen=True, slots=True)
class BuiltPrompt:
    index: int
    text: str
    tokens: int
    """Prompt length as the server counts it (equals the planned length unless the tokenizer refused)."""
    shared_prefix: bool
    image_urls: tuple[str, ...] = ()
    """The request's images as `data:` URLs, sent before the text in the same user message."""
    image_tokens: int | None = None
    """What the server counts for those images (None: it could not count them); `tokens` is the text's."""


def chat_messages(text: str, image_urls: Sequence[str] = ()) -> list[dict[str, Any]]:
    """One user message; with images, a list of content parts (images first, as vLLM's examples put them)."""
    if not image_urls:
        return [{"role": "user", "content": text}]
    parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": url}} for url in image_urls]
    return [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]


class ServerTokenizer:
    """The target's /tokenize and /detokenize endpoints."""

    def __init__(self, http: aiohttp.ClientSession, url: str, model: str) -> None:
        self._http = http
        self._url = url
        self._model = model

    async def count(self, api: Api, text: str) -> int:
        body: dict[str, Any] = {"messages": chat_messages(text)} if api == "chat" else {"prompt": text}
        return int((await self._post("/tokenize", body))["count"])

    async def ids(self, text: str) -> list[int]:
        reply = await self._post("/tokenize", {"prompt": text, "add_special_tokens": False})
        return [int(t) for t in reply["tokens"]]

    async def text(self, ids: list[int]) -> str:
        return str((await self._post("/detokenize", {"tokens": ids}))["prompt"])

    async def max_model_len(self) -> int:
        return int((await self._post("/tokenize", {"prompt": "a"}))["max_model_len"])

    async def image_tokens(self, image_url: str) -> int | None:
        """Prompt tokens one image adds to a chat message (its placeholders included); None when the
        server refuses to count it (a text-only model answers 400)."""
        path = "/tokenize"
        status, data = await self._answer(path, {"messages": chat_messages("", [image_url])})
        if status in (400, 422):
            return None
        return int(self._checked(path, status, data)["count"]) - await self.count("chat", "")

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._checked(path, *await self._answer(path, body))

    async def _answer(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        async with self._http.post(path, json={"model": self._model, **body}) as reply:
            return reply.status, await reply.json() if reply.status == 200 else (await reply.text())[:200]

    def _checked(self, path: str, status: int, data: Any) -> dict[str, Any]:
        if status == 404:
            raise EngineError(
                f"{self._url}{path} does not exist; the load tester builds exact prompts with the "
                "server's tokenizer, which vLLM serves at /tokenize and /detokenize"
            )
        if status != 200:
            raise EngineError(f"{self._url}{path} answered {status}: {data}")
        checked: dict[str, Any] = data
        return checked


async def build_prompts(
    tokenizer: ServerTokenizer, planned: tuple[PlannedRequest, ...], prefix_tokens: int, seed: int, parallel: int = 8
) -> tuple[BuiltPrompt, ...]:
    """One prompt per planned request, each exactly its planned length as the server counts it."""
    rng = random.Random(f"{seed}:text")
    pool: list[int] = []
    for _ in range(_CORPUS_PIECES):  # pieces, as one long text would exceed the server's context
        pool += await tokenizer.ids(" " + " ".join(rng.choice(_WORDS) for _ in range(_PIECE_WORDS)))
    prefix = await tokenizer.text(pool[:prefix_tokens]) + " " if prefix_tokens > 0 else ""
    gate = asyncio.Semaphore(parallel)
    builder = _Builder(tokenizer, pool, prefix)

    async def one(request: PlannedRequest) -> BuiltPrompt:
        async with gate:
            return await builder.build(request, rng_start=random.Random(f"{seed}:text:{request.index}"))

    return tuple(await asyncio.gather(*(one(r) for r in planned)))


def word_prompts(planned: tuple[PlannedRequest, ...], seed: int) -> tuple[BuiltPrompt, ...]:
    """One prompt per planned request of as many corpus words as its planned tokens, without a tokenizer.

    For a target that serves no /tokenize, such as a site's gateway (it routes only /v1/): the corpus's plain
    words are about a token each, close enough where arrivals, not exact lengths, are measured.
    """
    rng = random.Random(f"{seed}:words")
    return tuple(
        BuiltPrompt(p.index, " ".join(rng.choice(_WORDS) for _ in range(p.prompt_tokens)), p.prompt_tokens, False)
        for p in planned
    )


class _Builder:
    def __init__(self, tokenizer: ServerTokenizer, pool: list[int], prefix: str) -> None:
        self._tok = tokenizer
        self._pool = pool
        self._prefix = prefix
        self._base: dict[tuple[Api, str], int] = {}

    async def build(self, request: PlannedRequest, rng_start: random.Random) -> BuiltPrompt:
        head = self._prefix if request.shared_prefix else ""
        base = await self._base_count(request.api, head)
        if base >= request.prompt_tokens:  # too short to carry the shared prefix
            head, base = "", await self._base_count(request.api, "")
        start = rng_start.randrange(len(self._pool))
        length = max(1, request.prompt_tokens - base)
        text, got = "", 0
        for _ in range(_ATTEMPTS):
            text = head + await self._tok.text(self._slice(start, length))
            got = await self._tok.count(request.api, text)
            if got == request.prompt_tokens:
                break
            # A slice edge that merges differently can oscillate; move the slice on as well.
            length, start = max(1, length + request.prompt_tokens - got), start + 1
        return BuiltPrompt(request.index, text, got, bool(head))

    async def _base_count(self, api: Api, head: str) -> int:
        if (api, head) not in self._base:
            self._base[api, head] = await self._tok.count(api, head)
        return self._base[api, head]

    def _slice(self, start: int, length: int) -> list[int]:
        pool = self._pool
        return [pool[(start + i) % len(pool)] for i in range(length)]
