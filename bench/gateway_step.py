"""Benchmark: a site under a traffic step, behind the gateway and behind plain HAProxy, in one run (issue 52).

Two appliances of the embedded default (the CPU engine, each on a core of its own) serve one model. First the
site's capacity is measured: a closed loop at the site's full planned concurrency, completed
requests per second. Then the same open-loop step (`appliance loadtest --steps`: Poisson arrivals at 0.5, 1, 2 and
3 times that capacity, two priority classes in X-Priority) goes to (a) `appliance gateway` with
gateway.ttft_slo_s=--slo-ttft-s and (b) plain HAProxy with leastconn and no admission (the gateway's behaviour
before issue 52: a config rendered here, as the gateway's own settings cannot turn admission off). The gateway's own
added latency is measured apart, on the idle site: one-token completions sent back to back through the gateway and
straight to an appliance, in alternating order, the median of their differences (a step's TTFT would mostly measure
the load, not HAProxy).
It prints each run's step table and the issue's targets, and writes the plot of admitted TTFT p99 and shed rate
against offered load to --plot.
Run from the repository root: `PYTHONPATH=. .venv/bin/python bench/gateway_step.py --step-s 60`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import httpx

from appliance.config.compose import compose_config
from appliance.config.schema import WorkloadConfig
from appliance.deploy.gateway import run_haproxy
from appliance.errors import ConfigError
from appliance.loadtest.generator import RunWindow
from appliance.loadtest.plots import write_step_plot
from appliance.loadtest.render import STEP_COLUMNS, step_cells
from appliance.loadtest.report import LoadReport
from appliance.loadtest.run import LoadTarget, run_loadtest, run_step_load
from appliance.loadtest.steps import StepPlan, StepRow, step_plan
from testkit.appliance_process import Served, running_appliance
from testkit.gateway_site import running_gateway
from testkit.helpers import free_ports, stop_process

ENGINE = 'engine.extra_args=[--gpu-memory-utilization,"0.2",--enforce-eager,--dtype,float32]'
# Short requests, so each step holds enough of them: a ~64-token prompt prefills in about a second beside running
# decodes on this engine, and 32 tokens decode in a few more.
WORKLOAD = (
    "workload.prompt_tokens={kind:fixed,mean:64,min:64,max:64}",
    "workload.output_tokens={kind:fixed,mean:32,min:32,max:32}",
)
PLAIN = """global
    maxconn 4096
defaults
    mode http
    timeout connect 2s
    timeout client 10m
    timeout server 10m
frontend openai
    bind {listen}
    default_backend engines
backend engines
    balance leastconn
{servers}
"""


def plain_haproxy(folder: Path, appliances: list[Served]) -> tuple[str, Path]:
    """A plain HAProxy config in front of the engines (leastconn, no limit, no queue bound): its listen URL and
    path."""
    listen = f"127.0.0.1:{free_ports(1)[0]}"
    servers = "\n".join(f"    server e{i} {a.engine_url.removeprefix('http://')}" for i, a in enumerate(appliances))
    config = folder / "plain.cfg"
    config.write_text(PLAIN.format(listen=listen, servers=servers))
    return f"http://{listen}", config


def capacity(url: str, workload: WorkloadConfig, streams: int, seconds: float) -> float:
    """Completed requests per second of a closed loop of `streams` (the site's planned concurrency)."""
    closed = replace(workload, arrival="concurrency", concurrency=streams)
    # Each request's prompt is built before the clock starts: a bound above what this engine completes (~1/s).
    window = RunWindow(seconds, streams + round(seconds * 10), drain_s=120.0)
    report = asyncio.run(run_loadtest(closed, LoadTarget(url, "capacity"), window))
    return report.request_throughput


def step_run(url: str, label: str, workload: WorkloadConfig, plan: StepPlan) -> LoadReport:
    report = asyncio.run(run_step_load(workload, plan, LoadTarget(url, label), drain_s=max(30.0, plan.step_s)))
    print(f"\n{label}\n{' | '.join(STEP_COLUMNS)}")
    for row in report.steps:
        print(" | ".join(step_cells(row)))
    return report


def totals(rows: tuple[StepRow, ...]) -> tuple[StepRow, ...]:
    return tuple(r for r in rows if r.priority is None)


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def added_latency_ms(gateway_url: str, engines: list[str], model: str, pairs: int) -> float:
    """The gateway's own added time: the median, over `pairs`, of one tiny completion through it minus one straight
    to an engine, sent back to back on one keep-alive client, their order alternating."""
    body = {"model": model, "prompt": "Hi", "max_tokens": 1}
    differences = []
    with httpx.Client(timeout=30) as client:
        for i in range(pairs):
            legs = [("gateway", gateway_url), ("direct", engines[i % len(engines)])]
            took: dict[str, float] = {}
            for leg, base in legs if i % 2 == 0 else legs[::-1]:
                start = time.perf_counter()
                client.post(f"{base}/v1/completions", json=body).raise_for_status()
                took[leg] = time.perf_counter() - start
            differences.append(took["gateway"] - took["direct"])
    return statistics.median(differences) * 1000


def targets(gateway: LoadReport, plain: LoadReport, added_ms: float, wait_s: float) -> list[str]:
    """The issue's targets, one line each: the figure(s), then the target."""
    slo = gateway.workload.slo_ttft_ms
    lines = [f"{'target':<46} {'gateway':>12} {'plain':>12}  wanted"]
    for g, p in zip(totals(gateway.steps), totals(plain.steps), strict=True):
        lines.append(
            f"{f'admitted TTFT p99 at {g.multiple:g}x (ms)':<46} {ms(g.ttft.p99):>12} {ms(p.ttft.p99):>12}  <= {slo:g}"
        )
    for g in totals(gateway.steps):
        lines.append(
            f"{f'429 latency p99 / max at {g.multiple:g}x (ms)':<46} "
            f"{ms(g.shed_latency.p99) + ' / ' + ms(g.shed_latency.max):>12} {'':>12}"
            f"  <= 50 when full, never > {wait_s * 1000:g}"
        )
    for label, attr in (("5xx", "server_errors"), ("lost or unanswered", "lost")):
        g, p = (sum(getattr(r, attr) for r in totals(rep.steps)) for rep in (gateway, plain))
        lines.append(f"{label:<46} {g:>12} {p:>12}  0")
    top = len(gateway.step_plan.multiples) - 1 if gateway.step_plan else 0
    high = [next((r for r in rep.steps if r.step == top and r.priority == "high"), None) for rep in (gateway, plain)]
    shares = [f"{100 * h.admitted_share:.1f} %" if h else "-" for h in high]
    lines.append(f"{'high class admitted at the top step':<46} {shares[0]:>12} {shares[1]:>12}  >= 95 %")
    lines.append(f"{'gateway added latency p50, idle, paired (ms)':<46} {added_ms:>12.2f} {'':>12}  <= 1")
    for label, rep in (("gateway", gateway), ("plain", plain)):
        rows = totals(rep.steps)
        at_1 = next((r.goodput_per_s for r in rows if r.multiple == 1.0), None)
        ratio = "-" if not at_1 else f"{rows[-1].goodput_per_s / at_1:.2f}"
        lines.append(f"{f'goodput top step / 1x ({label})':<46} {ratio:>12} {'':>12}  >= 0.9")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", default="0.5,1,2,3", help="multiples of the measured capacity (default 0.5,1,2,3)")
    parser.add_argument("--step-s", type=float, default=60.0, help="seconds each step sends (default 60)")
    parser.add_argument("--capacity-s", type=float, default=60.0, help="closed-loop capacity window (default 60)")
    parser.add_argument("--classes", default="high=1,low=3", help="priority classes and weights (default high=1,low=3)")
    parser.add_argument("--slo-ttft-s", type=float, default=4.0, help="the site's TTFT SLO, seconds (default 4)")
    parser.add_argument("--pairs", type=int, default=200, help="paired requests for the added latency (default 200)")
    parser.add_argument("--model", default="smollm2", help="the model group option to serve (default smollm2)")
    parser.add_argument(
        "--plot",
        type=Path,
        default=Path(time.strftime(".cache/gateway-step-%Y%m%d-%H%M%S.png")),
        help="where the plot goes (default .cache/gateway-step-<time>.png)",
    )
    parser.add_argument("overrides", nargs="*", help="workload overrides, after the bench's short requests")
    args = parser.parse_args()
    try:
        step_plan(args.steps, args.step_s, 1.0, args.classes)  # the flags checked before minutes of boots
    except ConfigError as error:
        parser.error(str(error))
    workload = compose_config([*WORKLOAD, *args.overrides]).config.workload
    workload = replace(workload, slo_ttft_ms=args.slo_ttft_s * 1000)
    wait_s = args.slo_ttft_s * 0.5  # gateway.queue_share's default
    with tempfile.TemporaryDirectory(prefix="gateway-step-") as tmp, ExitStack() as stack:
        folder = Path(tmp)
        appliances = [
            stack.enter_context(
                running_appliance(
                    folder / f"a{core}", ENGINE, f"engine.env.VLLM_CPU_OMP_THREADS_BIND={core}", model=args.model
                )
            )
            for core in (0, 1)
        ]
        site = folder / "site.yaml"
        site.write_text(
            "".join(f"- {{name: a{i}, url: {a.control_url}, token_env: T{i}}}\n" for i, a in enumerate(appliances))
        )
        tokens = {f"T{i}": a.token for i, a in enumerate(appliances)}
        model = appliances[0].state().served_name
        gateway = stack.enter_context(
            running_gateway(
                site,
                folder / "gw",
                f"gateway.ttft_slo_s={args.slo_ttft_s}",
                models=[model],
                env=tokens,
                check_interval_ms=250,
                within_s=60,
            )
        )
        plain_url, plain_config = plain_haproxy(folder, appliances)
        plain = run_haproxy(plain_config)
        stack.callback(stop_process, plain, 10)
        streams = sum(a.state().max_concurrency or 1 for a in appliances)
        # Through plain HAProxy, which passes /tokenize on (the gateway serves only /v1/): as many streams as the
        # engines run at once, so none queues at either balancer.
        rate = capacity(plain_url, workload, streams, args.capacity_s)
        print(f"site capacity: {rate:.2f} requests/s (closed loop of {streams}, {args.capacity_s:g} s)")
        plan = step_plan(args.steps, args.step_s, rate, args.classes)
        through_gateway = step_run(gateway, "gateway", workload, plan)
        through_plain = step_run(plain_url, "plain HAProxy", workload, plan)
        added = added_latency_ms(gateway, [a.engine_url for a in appliances], model, args.pairs)
    print()
    print("\n".join(targets(through_gateway, through_plain, added, wait_s)))
    print(f"plot: {write_step_plot([through_gateway, through_plain], args.plot)}")


if __name__ == "__main__":
    main()
