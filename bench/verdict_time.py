"""Benchmark: how long a verdict takes, beside the interpreter and Hydra import floors, in one run.

Every figure is a cold process of the installed `appliance` console script (median of --repeat):
- floors: `python -c pass` and `python -c "from hydra import compose, initialize_config_dir"`;
- `appliance validate +model=llama mesh=n150 serving.max_context=131072` (refused, exit 2): the first
  call, each with an empty APPLIANCE_CACHE_DIR, and the cached call (parsed matrix, plugin states and
  the composition on disk), and a call with an override set the cache has not seen (data parsed already,
  the merge of the same group selections and the schema's validator cached): what it adds to a cached
  call, beside what importing Hydra costs;
- `appliance plan --all-sites +model=llama mesh=n150` over a site dir of N generated sites (N = 1, 4,
  16, plus the 3 shipped ones), cached: how the cost grows per site against N cold runs.
Every child runs without PYTHONDONTWRITEBYTECODE (this sandbox sets it, no operator's shell does), after
one warm-up run of each command that writes the bytecode, so no figure includes compiling the sources.
Targets (issue 16): the verdict <= 0.3 s cold on a quiet machine and <= 1.8x the Hydra floor.
Run from the repository root: `.venv/bin/python bench/verdict_time.py`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

APPLIANCE = str(Path(sys.executable).parent / "appliance")
VERDICT = ["validate", "+model=llama", "mesh=n150", "serving.max_context=131072"]
HYDRA = "from hydra import compose, initialize_config_dir"
SITES = (1, 4, 16)


def run_s(argv: list[str], cache: Path) -> float:
    """Wall seconds of one process with its cache dir at `cache`, writing bytecode as an operator's would."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"APPLIANCE_CACHE_DIR": str(cache)}
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def median_s(repeat: int, once: Callable[[int], float]) -> float:
    return statistics.median(once(i) for i in range(repeat))


def repeated_s(repeat: int, argv: list[str], cache: Path) -> float:
    """The median of `repeat` runs of the same command against one cache."""
    return median_s(repeat, lambda _: run_s(argv, cache))


def site_dir(root: Path, count: int) -> Path:
    """`count` site files, each its own name and context, as a fleet's site dir holds them."""
    folder = root / f"sites-{count}"
    folder.mkdir()
    for i in range(count):
        text = f"# @package _global_\nsite:\n  name: gen-{i:02d}\nserving:\n  max_context: {2048 + 64 * i}\n"
        (folder / f"gen-{i:02d}.yaml").write_text(text)
    return folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="runs per figure; the median is shown (default 5)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="verdict-bench-") as tmp:
        root = Path(tmp)
        warm = root / "warm"
        run_s([APPLIANCE, *VERDICT], root / "bytecode")  # the warm-up: a miss imports every module, compiled once
        run_s([sys.executable, "-c", HYDRA], warm)
        run_s([APPLIANCE, *VERDICT], warm)  # fills the cache for the cached figures
        python = repeated_s(args.repeat, [sys.executable, "-c", "pass"], warm)
        hydra = repeated_s(args.repeat, [sys.executable, "-c", HYDRA], warm)
        first = median_s(args.repeat, lambda i: run_s([APPLIANCE, *VERDICT], root / f"cold-{i}"))
        cached = repeated_s(args.repeat, [APPLIANCE, *VERDICT], warm)
        # An override set the cache has not seen, the matrix and plugin states parsed already: an operator's next edit.
        unseen = median_s(args.repeat, lambda i: run_s([APPLIANCE, *VERDICT, f"serving.port={8100 + i}"], warm))
        print(f"interpreter floor (python -c pass)  {python:6.3f} s")
        print(f"Hydra import floor                  {hydra:6.3f} s")
        print(f"validate, first call (empty cache)  {first:6.3f} s  {first / hydra:4.2f}x Hydra floor")
        print(f"validate, cached call               {cached:6.3f} s  {cached / hydra:4.2f}x Hydra floor")
        print(f"validate, an unseen override set    {unseen:6.3f} s  {unseen / hydra:4.2f}x Hydra floor")
        print(f"target: <= 0.300 s and <= 1.80x the Hydra floor ({1.8 * hydra:.3f} s here)")
        # What bounds the unseen set: it is a cached verdict plus Hydra's import (for its override grammar and step).
        print(
            f"an unseen set adds {unseen - cached:.3f} s to a cached verdict; Hydra's import alone is "
            f"{hydra - python:.3f} s"
        )
        times = {}
        for count in SITES:
            argv = [
                APPLIANCE,
                "plan",
                "--all-sites",
                "+model=llama",
                "mesh=n150",
                "--site-dir",
                str(site_dir(root, count)),
            ]
            run_s(argv, warm)  # writes plan's bytecode and the sites' compositions: the figure is the cached run
            times[count] = repeated_s(args.repeat, argv, warm)
            print(
                f"plan --all-sites, {count:2d}+3 sites         {times[count]:6.3f} s  "
                f"({count + 3} cold runs: ~{(count + 3) * cached:.2f} s)"
            )
        per_site = (times[SITES[-1]] - times[SITES[0]]) / (SITES[-1] - SITES[0])
        print(
            f"plan --all-sites grows by {per_site:.3f} s per site over a fixed {times[SITES[0]] - 4 * per_site:.3f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
