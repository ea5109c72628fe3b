"""Capacity: can the load generator hold >= 256 concurrent streams on 2 cores without being the bottleneck?

Runs a tiny streaming OpenAI-style server of its own in a separate process (one token every
--interval-ms per stream, whatever the load, plus /tokenize and /detokenize with one token per
word), drives it with `run_loadtest` at each concurrency, and prints the generator's CPU use next
to what the server offered. The generator keeps up when it receives the offered token rate and the
inter-token gaps it measures stay at the server's interval.

    .venv/bin/python bench/loadgen_capacity.py [--streams 64 256 512] [--interval-ms 40] [--tokens 150]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import time

import psutil
from aiohttp import web

from appliance.config.compose import compose_config
from appliance.loadtest.generator import RunWindow
from appliance.loadtest.run import LoadTarget, run_loadtest

_CHAT_OVERHEAD = 5  # template tokens the fake chat template adds


class FakeServer:
    """Streams `max_tokens` tokens at a fixed interval per request; words are tokens."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.vocab: dict[str, int] = {}
        self.words: list[str] = []

    def ids(self, text: str) -> list[int]:
        for word in text.split():
            if word not in self.vocab:
                self.vocab[word] = len(self.words)
                self.words.append(word)
        return [self.vocab[w] for w in text.split()]

    async def models(self, _: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "fake", "root": "fake", "max_model_len": 4096}]})

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        if "messages" in body:
            return web.json_response({"count": len(self.ids(body["messages"][0]["content"])) + _CHAT_OVERHEAD})
        ids = self.ids(body["prompt"])
        special = 1 if body.get("add_special_tokens", True) else 0
        return web.json_response({"count": len(ids) + special, "tokens": ids, "max_model_len": 4096})

    async def detokenize(self, request: web.Request) -> web.Response:
        return web.json_response({"prompt": " ".join(self.words[i] for i in (await request.json())["tokens"])})

    async def complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        prompt = len(self.ids(body.get("prompt", ""))) + 1
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for k in range(1, body["max_tokens"] + 1):
            await asyncio.sleep(self.interval_s)
            usage = {"prompt_tokens": prompt, "completion_tokens": k, "total_tokens": prompt + k}
            finish = "length" if k == body["max_tokens"] else None
            chunk = {"choices": [{"index": 0, "text": " tok", "finish_reason": finish}], "usage": usage}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response


def serve(port: int, interval_s: float) -> None:
    fake = FakeServer(interval_s)
    app = web.Application()
    app.add_routes(
        [
            web.get("/v1/models", fake.models),
            web.post("/tokenize", fake.tokenize),
            web.post("/detokenize", fake.detokenize),
            web.post("/v1/completions", fake.complete),
        ]
    )
    web.run_app(app, host="127.0.0.1", port=port, print=None, backlog=2048)


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process."""
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


async def measure(url: str, streams: int, args: argparse.Namespace, server_pid: int) -> None:
    workload = compose_config(
        [
            "workload=chat",
            "workload.chat_share=0",
            f"workload.concurrency={streams}",
            "workload.prompt_tokens={kind: fixed, mean: 64, min: 64, max: 64}",
            f"workload.output_tokens={{kind: fixed, mean: {args.tokens}, min: {args.tokens}, max: {args.tokens}}}",
        ]
    ).config.workload
    server_cpu, started = cpu_seconds(server_pid), time.perf_counter()
    report = await run_loadtest(workload, LoadTarget(url, f"{streams} streams"), RunWindow(120.0, 2 * streams))
    server_share = (cpu_seconds(server_pid) - server_cpu) / (time.perf_counter() - started)
    offered = streams / args.interval_ms * 1000
    steady = sum(b.output_tokens_per_s for b in report.timeline[10:-10]) / max(1, len(report.timeline) - 20)
    print(
        f"{streams:>7} {report.completed:>9} {100 * report.generator_cpu_share:>12.0f}% {100 * server_share:>10.0f}% "
        f"{offered:>12.0f} {steady:>12.0f} {report.itl.mean:>10.1f} {report.itl.p99:>9.1f} {report.failed:>6}",
        flush=True,
    )


async def main(args: argparse.Namespace) -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--serve", str(port), "--interval-ms", str(args.interval_ms)
    )
    url = f"http://127.0.0.1:{port}"
    try:
        await asyncio.sleep(2.0)
        print(
            f"fake server: one token per stream every {args.interval_ms} ms, {args.tokens} tokens per request; "
            "generator CPU is its process time over the run (100 % = one core)"
        )
        print(
            f"{'streams':>7} {'completed':>9} {'generator CPU':>13} {'server CPU':>11} {'offered tok/s':>12} "
            f"{'steady tok/s':>12} {'ITL mean':>10} {'ITL p99':>9} {'failed':>6}"
        )
        for streams in args.streams:
            await measure(url, streams, args, server.pid)
    finally:
        server.terminate()
        await server.wait()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, nargs="+", default=[64, 256, 512])
    parser.add_argument("--interval-ms", type=float, default=40.0)
    parser.add_argument("--tokens", type=int, default=150)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    cli = parser.parse_args()
    if cli.serve:
        serve(cli.serve, cli.interval_ms / 1000)
        sys.exit(0)
    sys.exit(asyncio.run(main(cli)))
