"""Benchmark: how many more decode stalls phase-exclusive scheduling causes than mixed scheduling.

Runs `loadtest --compare-scheduler`'s comparison (the real CPU engine booted by `appliance serve`
with engine.scheduler=default, then =phased; the same arrivals on both) on `stall-probe`, several
rounds, and prints each run's stall count, stall time and share of inter-token time, and the ratio.
`--workload vision --model tiny_vl` runs it with images, and prints the stalls in an image prefill too.
Claim (README, load testing): phased stalls at least 20 per run and at least 3x mixed. Exit 1 if a
round breaks it. Stall *time* is printed but not claimed: a host that freezes for seconds (a shared
2-core VM does) makes any gap it lands in long, under either scheduler; the count is what the
scheduler decides.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

from appliance.config.compose import compose_config
from appliance.loadtest.generator import RunWindow
from appliance.loadtest.report import LoadReport
from appliance.loadtest.schedcompare import compare_schedulers

MIN_PHASED, MIN_RATIO = 20, 3.0


def describe(label: str, report: LoadReport) -> str:
    stalls = report.stalls
    share = f"{100 * stalls.share_of_itl:5.1f} % of inter-token time"
    sent = f"{report.sent} sent" + (f", {stalls.image_count} in an image prefill" if "image" in report.by_kind else "")
    return f"  {label:6s} {stalls.count:5d} stalls  {stalls.total_s:7.2f} s stalled  {share}  ({sent})"


def holds(mixed: LoadReport, phased: LoadReport) -> bool:
    return phased.stalls.count >= MIN_PHASED and phased.stalls.count >= MIN_RATIO * mixed.stalls.count


async def round_of(overrides: list[str], log_dir: Path) -> tuple[LoadReport, LoadReport]:
    workload = compose_config(overrides).config.workload
    window = RunWindow(workload.duration_s, workload.max_requests)
    mixed, phased = await compare_schedulers(overrides, workload, window, log_dir)
    return mixed, phased


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workload", default="stall-probe")
    parser.add_argument("--model", help="model option to serve (default: the config's), e.g. tiny_vl for vision")
    args = parser.parse_args()
    overrides = [f"workload={args.workload}", *([f"model={args.model}"] if args.model else [])]
    broken = 0
    for n in range(1, args.rounds + 1):
        with tempfile.TemporaryDirectory(prefix="scheduler-stalls-") as tmp:
            mixed, phased = asyncio.run(round_of(overrides, Path(tmp)))
        ratio = phased.stalls.count / mixed.stalls.count if mixed.stalls.count else float("inf")
        verdict = "holds" if holds(mixed, phased) else "BROKEN"
        print(f"round {n}: phased/mixed stall count {ratio:.1f}x, claim {verdict}")
        print(describe("mixed", mixed))
        print(describe("phased", phased))
        broken += not holds(mixed, phased)
    claim = f"phased >= {MIN_PHASED} stalls and >= {MIN_RATIO:.0f}x mixed"
    print(f"claim ({claim}): {args.rounds - broken}/{args.rounds} rounds")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
