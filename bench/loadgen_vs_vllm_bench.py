"""Accuracy: the appliance's load tester against `vllm bench serve`, same workload, same server.

Boots the CPU engine through `appliance serve` (or uses --url) and runs both tools on a closed
loop of fixed-length completions, one after the other, for --rounds paired rounds (alternating
which goes first). For each metric it prints both tools' medians over the rounds and the median
of the per-round ratios, the figure judged against the 10 % target.

Why paired rounds: on a shared 2-core host the engine's speed drifts by 2x within minutes (other
processes, and an API server that, when starved, delivers tokens in bursts), so two long runs
compare two different servers; two short runs back to back see nearly the same one. Means, not
medians, are compared: burst delivery makes TTFT bimodal, and a median jumps between the modes.

    .venv/bin/python bench/loadgen_vs_vllm_bench.py [--url URL] [--rounds 8] [--requests 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from appliance.compose import compose_config
from appliance.loadgen import RunWindow
from appliance.loadreport import LoadReport
from appliance.loadtest import LoadTarget, run_loadtest
from appliance.schedcompare import serve_appliance

ROOT = Path(__file__).resolve().parent.parent
ENGINE_PYTHON = ROOT / ".engines" / "cpu" / "bin" / "python"
# The appliance's request options (per-chunk usage gives it exact token counts), sent by both tools.
SAME_STREAM_OPTIONS = {"include_usage": True, "continuous_usage_stats": True}
METRICS = ("mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "output_throughput", "request_throughput")


def ours(report: LoadReport) -> dict[str, float]:
    values = {
        "mean_ttft_ms": report.ttft.mean, "mean_tpot_ms": report.tpot.mean,
        "mean_itl_ms": report.itl.mean, "output_throughput": report.output_throughput,
        "request_throughput": report.request_throughput,
    }  # fmt: skip
    return {k: float(v) for k, v in values.items() if v is not None}


async def run_ours(url: str, args: argparse.Namespace) -> dict[str, float]:
    workload = compose_config([
        "workload=chat", "workload.chat_share=0", f"workload.concurrency={args.concurrency}",
        f"workload.prompt_tokens={{kind: fixed, mean: {args.input}, min: {args.input}, max: {args.input}}}",
        f"workload.output_tokens={{kind: fixed, mean: {args.output}, min: {args.output}, max: {args.output}}}",
    ]).config.workload  # fmt: skip
    report = await run_loadtest(workload, LoadTarget(url, "loadgen"), RunWindow(600.0, args.requests))
    if report.failed:
        details = {t.detail for t in report.traces if t.error}
        raise SystemExit(f"appliance loadtest: {report.failed} requests failed: {dict(report.errors)} {details}")
    return ours(report)


async def run_vllm_bench(url: str, tokenizer: str, args: argparse.Namespace) -> dict[str, float]:
    """`vllm bench serve` in the engine interpreter, its result dict read from its last JSON line."""
    argv = ["--backend", "vllm", "--base-url", url, "--endpoint", "/v1/completions", "--model", args.model,
            "--tokenizer", tokenizer, "--dataset-name", "random", "--random-input-len", str(args.input),
            "--random-output-len", str(args.output), "--random-range-ratio", "0", "--num-prompts", str(args.requests),
            "--max-concurrency", str(args.concurrency), "--ignore-eos", "--seed", "0", "--disable-tqdm",
            "--extra-body", json.dumps({"stream_options": SAME_STREAM_OPTIONS})]  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        str(ENGINE_PYTHON), "-I", str(ROOT / "bench" / "vllm_bench_serve.py"), *argv,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    stdout, _ = await proc.communicate()
    result = json.loads(next(x for x in reversed(stdout.decode().splitlines()) if x.startswith("{")))
    if result["failed"]:
        raise SystemExit(f"vllm bench serve: {result['failed']} requests failed")
    return {k: float(result[k]) for k in METRICS}


@asynccontextmanager
async def server(url: str | None) -> AsyncIterator[str]:
    if url:
        yield url
        return
    with tempfile.TemporaryDirectory() as tmp:
        async with serve_appliance(["mesh=cpu", "engine=cpu"], Path(tmp) / "serve.log", 900.0) as served:
            yield served


async def main(args: argparse.Namespace) -> int:
    async with server(args.url) as url:
        async with httpx.AsyncClient() as http:
            model = (await http.get(f"{url}/v1/models")).json()["data"][0]
        args.model, tokenizer = model["id"], model["root"]
        theirs: list[dict[str, float]] = []
        mine: list[dict[str, float]] = []
        for round_ in range(args.rounds):
            if round_ % 2 == 0:  # alternate who goes first
                a, b = await run_vllm_bench(url, tokenizer, args), await run_ours(url, args)
            else:
                b, a = await run_ours(url, args), await run_vllm_bench(url, tokenizer, args)
            theirs.append(a)
            mine.append(b)
            print(f"round {round_ + 1}: " + ", ".join(f"{m} {a[m]:.2f}/{b[m]:.2f}" for m in METRICS), flush=True)
    return report(args, theirs, mine)


def report(args: argparse.Namespace, theirs: list[dict[str, float]], mine: list[dict[str, float]]) -> int:
    print(f"{args.requests} completions per tool x {args.rounds} paired rounds, closed loop of {args.concurrency}, "
          f"{args.input} prompt + {args.output} output tokens")  # fmt: skip
    print(f"{'metric':20} {'vllm bench serve':>17} {'appliance loadtest':>19} {'median ratio':>13}")
    worst = 0.0
    for metric in METRICS:
        a = statistics.median(r[metric] for r in theirs)
        b = statistics.median(r[metric] for r in mine)
        ratio = statistics.median(y[metric] / x[metric] for x, y in zip(theirs, mine, strict=True))
        worst = max(worst, abs(ratio - 1))
        print(f"{metric:20} {a:17.2f} {b:19.2f} {ratio:13.3f}")
    print(f"largest deviation {100 * worst:.1f} % ({'within' if worst <= 0.10 else 'outside'} 10 %)")
    return 0 if worst <= 0.10 else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="an OpenAI server to measure (default: boot the CPU engine)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--input", type=int, default=256)
    parser.add_argument("--output", type=int, default=128)
    sys.exit(asyncio.run(main(parser.parse_args())))
