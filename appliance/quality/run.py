"""Ask a served model every question of an evaluation set and grade its replies.

The one entry point, `run_eval`, sends each question as a chat message with greedy decoding
(temperature 0), a few at a time, to any OpenAI-compatible server, and returns an `EvalReport`. A question about
an image carries it as a PNG `data:` URL content part. With `grade=False` (a model whose weights are noise) a
reply counts when the engine answered it with at least one token: the serving path is checked, not the answer.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from typing import Any

import httpx

from appliance.data_urls import data_url
from appliance.errors import EngineError
from appliance.quality.evalset import EvalImage, EvalItem, EvalSet, is_correct

__all__ = ["EvalReport", "EvalResult", "run_eval"]


@dataclass(frozen=True, slots=True)
class EvalResult:
    question: str
    answers: tuple[str, ...]
    reply: str
    correct: bool
    seconds: float
    """From sending the question to the whole reply."""


@dataclass(frozen=True, slots=True)
class EvalReport:
    eval_set: str
    url: str
    model: str
    results: tuple[EvalResult, ...]
    duration_s: float
    graded: bool = True
    """False: `correct` means answered (random weights), not right."""

    @property
    def correct(self) -> int:
        return sum(r.correct for r in self.results)

    @property
    def accuracy(self) -> float:
        return self.correct / len(self.results)


async def run_eval(
    evalset: EvalSet,
    url: str,
    *,
    api_key_env: str | None = None,
    concurrency: int = 4,
    timeout_s: float = 300.0,
    grade: bool = True,
) -> EvalReport:
    """Every question of `evalset` asked of the first model `url` serves, `concurrency` at a time; graded, or
    (`grade=False`) only required to be answered."""
    key = os.environ.get(api_key_env, "") if api_key_env else ""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    limit = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=timeout_s) as http:
        model = await _served_model(http)

        async def ask(item: EvalItem) -> EvalResult:
            async with limit:
                return await _ask(http, model, item, evalset.max_tokens, grade)

        start = time.perf_counter()
        results = await asyncio.gather(*(ask(item) for item in evalset.items))
        return EvalReport(evalset.name, url, model, tuple(results), time.perf_counter() - start, grade)


async def _served_model(http: httpx.AsyncClient) -> str:
    reply = await _request(http, "GET", "/v1/models")
    models = reply.get("data") or []
    if not models:
        raise EngineError(f"{http.base_url}/v1/models lists no model")
    return str(models[0]["id"])


async def _ask(http: httpx.AsyncClient, model: str, item: EvalItem, max_tokens: int, grade: bool) -> EvalResult:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": _content(item)}],
        "temperature": 0.0,
        "max_tokens": max_tokens,
    }
    start = time.perf_counter()
    reply = await _request(http, "POST", "/v1/chat/completions", body)
    text = reply["choices"][0]["message"]["content"] or ""
    correct = is_correct(text, item.answers) if grade else int(reply["usage"]["completion_tokens"]) > 0
    return EvalResult(item.question, item.answers, text, correct, time.perf_counter() - start)


def _content(item: EvalItem) -> str | list[dict[str, Any]]:
    """The question, or the question and its image as chat content parts."""
    if item.image is None:
        return item.question
    return [{"type": "text", "text": item.question}, {"type": "image_url", "image_url": {"url": _png(item.image)}}]


def _png(image: EvalImage) -> str:
    from PIL import Image  # Pillow: only for sets with images

    return data_url(Image.new("RGB", (image.width, image.height), image.colour), "png")


async def _request(http: httpx.AsyncClient, method: str, path: str, body: object = None) -> dict[str, Any]:
    try:
        reply = await http.request(method, path, json=body)
    except httpx.HTTPError as error:
        raise EngineError(f"cannot reach {http.base_url}{path}: {error or type(error).__name__}") from None
    if reply.status_code != 200:
        raise EngineError(f"{http.base_url}{path} answered {reply.status_code}: {reply.text.strip()[:200]}")
    document: dict[str, Any] = reply.json()
    return document
