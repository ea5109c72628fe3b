"""Run a workload against an OpenAI-compatible server and return a LoadReport.

The one entry point, `run_loadtest`, finds the served model, checks the workload against the
server's context limit (images included, as the server counts them), builds exact-length prompts
with the server's tokenizer and the workload's images, and warms each request kind up (all before
the clock starts), sends the requests and summarizes what came back.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp

from appliance.config.schema import WorkloadConfig
from appliance.errors import ConfigError, EngineError
from appliance.loadtest.generator import LoadProgress, Requests, RunWindow, drive, warm_up
from appliance.loadtest.images import attach_images, build_images, probe_urls
from appliance.loadtest.prompts import ServerTokenizer, build_prompts
from appliance.loadtest.report import LoadReport, RunFacts, summarize
from appliance.loadtest.workload import check_workload, plan_requests

__all__ = ["LoadTarget", "run_loadtest"]

ProgressFn = Callable[[LoadProgress], None]
_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=300.0)


@dataclass(frozen=True, slots=True)
class LoadTarget:
    url: str
    """Base URL of the OpenAI API (without /v1)."""
    label: str
    """Name of this run in reports and comparisons."""
    api_key_env: str | None = None
    """Environment variable holding the API key to send (never its value)."""


async def run_loadtest(
    workload: WorkloadConfig,
    target: LoadTarget,
    window: RunWindow,
    progress: ProgressFn = lambda _: None,
    ready: Callable[[], Awaitable[object]] | None = None,
) -> LoadReport:
    """Drive `workload` at `target` within `window` and report what the server did.

    `ready`, when given, is awaited once the prompts are built and warmed up, just before the clock
    starts: it lets several generators start sending together.
    """
    key = os.environ.get(target.api_key_env, "") if target.api_key_env else ""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    # One connection per stream, however many. Idle ones are dropped before uvicorn's 5 s keep-alive
    # would close them under a new request (seen as "Server disconnected").
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=3.0)
    async with aiohttp.ClientSession(target.url, headers=headers, timeout=_TIMEOUT, connector=connector) as http:
        try:
            model, requests = await _prepare(http, target.url, workload, window, progress)
        except (aiohttp.ClientError, TimeoutError) as error:
            reason = str(error) or type(error).__name__
            raise EngineError(f"cannot reach the OpenAI API at {target.url}: {reason}") from None
        if ready is not None:
            await ready()
        started, cpu = time.time(), time.process_time()
        traces, duration = await drive(http, model, workload, requests, window, progress)
        cpu = time.process_time() - cpu
    return summarize(RunFacts(target.label, target.url, model, started, duration, cpu), workload, traces)


async def _prepare(
    http: aiohttp.ClientSession, url: str, workload: WorkloadConfig, window: RunWindow, progress: ProgressFn
) -> tuple[str, Requests]:
    """The served model and the run's requests with their prompts, warmed up."""
    model = await _served_model(http, url)
    tokenizer = ServerTokenizer(http, url, model)
    probes = probe_urls(workload) if workload.images.share > 0 else {}
    image_tokens = {size: await tokenizer.image_tokens(probe) for size, probe in probes.items()}
    counted = {size: n for size, n in image_tokens.items() if n is not None}
    problems = check_workload(workload, await tokenizer.max_model_len(), counted)
    if problems:
        raise ConfigError(tuple(problems))
    # Only arrivals inside the send window get a prompt (a long soak passes a huge --max-requests).
    planned = tuple(p for p in plan_requests(workload, window.max_requests) if (p.at_s or 0.0) < window.duration_s)
    progress(LoadProgress("prompts", len(planned), 0, 0, 0))
    prompts = await build_prompts(tokenizer, planned, workload.shared_prefix_tokens, workload.seed)
    texts = tuple(zip(planned, prompts, strict=True))
    images = build_images(workload, planned)
    requests = attach_images(texts, lambda image: images[image.key], image_tokens)
    progress(LoadProgress("warm-up", len(planned), 0, 0, 0))
    await warm_up(http, model, attach_images(texts, lambda image: probes[image.size], image_tokens))
    return model, requests


async def _served_model(http: aiohttp.ClientSession, url: str) -> str:
    async with http.get("/v1/models") as reply:
        if reply.status != 200:
            raise EngineError(f"{url}/v1/models answered {reply.status}: {(await reply.text())[:200]}")
        models = (await reply.json()).get("data") or []
    if not models:
        raise EngineError(f"{url}/v1/models lists no model")
    return str(models[0]["id"])
