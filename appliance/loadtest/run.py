"""Run a workload against an OpenAI-compatible server and return a LoadReport.

The entry point, `run_loadtest`, finds the served model, checks the workload against the
server's context limit (images included, as the server counts them), builds exact-length prompts
with the server's tokenizer and the workload's images, and warms each request kind up (all before
the clock starts), sends the requests and summarizes what came back. `run_step_load` sends a traffic step
(appliance.loadtest.steps) instead, and reports each step and priority class as well.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace

import aiohttp

from appliance.config.schema import WorkloadConfig
from appliance.errors import ConfigError, EngineError
from appliance.loadtest.generator import LoadProgress, Requests, RunWindow, drive, warm_up
from appliance.loadtest.images import attach_images, build_images, probe_urls
from appliance.loadtest.prompts import ServerTokenizer, build_prompts, word_prompts
from appliance.loadtest.report import LoadReport, RunFacts, summarize
from appliance.loadtest.steps import StepPlan, plan_step_requests, step_rows
from appliance.loadtest.workload import check_workload, plan_requests

__all__ = ["LoadTarget", "run_loadtest", "run_step_load"]

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
    async with _session(target) as http:
        async with _reaching(target):
            model, requests = await _prepare(http, target.url, workload, window, progress)
        if ready is not None:
            await ready()
        started, cpu = time.time(), time.process_time()
        traces, duration = await drive(http, model, workload, requests, window, progress)
        cpu = time.process_time() - cpu
    return summarize(RunFacts(target.label, target.url, model, started, duration, cpu), workload, traces)


async def run_step_load(
    workload: WorkloadConfig, plan: StepPlan, target: LoadTarget, drain_s: float, progress: ProgressFn = lambda _: None
) -> LoadReport:
    """Send the traffic step `plan` with the workload's lengths and features at `target` and report each step.

    Prompts are words, not built with the server's tokenizer: a site's gateway serves no /tokenize.
    """
    workload = replace(workload, arrival="poisson")  # the plan's arrival times, sent open loop
    async with _session(target) as http:
        async with _reaching(target):
            model = await _served_model(http, target.url)
            planned = plan_step_requests(workload, plan)
            requests = tuple(zip(planned, word_prompts(planned, workload.seed), strict=True))
            progress(LoadProgress("warm-up", len(planned), 0, 0, 0))
            await warm_up(http, model, requests)
        window = RunWindow(plan.duration_s, len(requests), drain_s)
        started, cpu = time.time(), time.process_time()
        traces, duration = await drive(http, model, workload, requests, window, progress, plan.priority_header)
        cpu = time.process_time() - cpu
    report = summarize(RunFacts(target.label, target.url, model, started, duration, cpu), workload, traces)
    rows = step_rows(traces, plan, workload.slo_ttft_ms, workload.slo_itl_ms)
    return replace(report, step_plan=plan, steps=rows)


@asynccontextmanager
async def _session(target: LoadTarget) -> AsyncIterator[aiohttp.ClientSession]:
    key = os.environ.get(target.api_key_env, "") if target.api_key_env else ""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    # One connection per stream, however many. Idle ones are dropped before uvicorn's 5 s keep-alive
    # would close them under a new request (seen as "Server disconnected").
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=3.0)
    async with aiohttp.ClientSession(target.url, headers=headers, timeout=_TIMEOUT, connector=connector) as http:
        yield http


@asynccontextmanager
async def _reaching(target: LoadTarget) -> AsyncIterator[None]:
    """Before the clock starts, a target that cannot be reached is an EngineError naming it."""
    try:
        yield
    except (aiohttp.ClientError, TimeoutError) as error:
        reason = str(error) or type(error).__name__
        raise EngineError(f"cannot reach the OpenAI API at {target.url}: {reason}") from None


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
