"""Benchmark: what `appliance check` costs, stage by stage, and what serve's blocking subset adds.

Runs each stage several times in this process (the real engine environments, this host) and the
whole command as a subprocess, and prints the median wall time of each. Targets on 2 cores: the
blocking host checks under 50 ms (serve runs them before every boot), the full check under 5 s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from appliance.compat.matrix import load_matrix
from appliance.compat.resolve import resolve_config
from appliance.compat.validate import validate
from appliance.engines.engine_env import inspect_engine, probe_ttnn
from appliance.host.discovery import discover_host
from appliance.plan import build_plan
from appliance.preflight.checks import host_checks
from appliance.preflight.isolation import scan_core
from appliance.preflight.results import HostCheckInput

ROOT = Path(__file__).resolve().parent.parent
RUNS = 5


def median_s(run: Callable[[], object], runs: int = RUNS) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> int:
    argparse.ArgumentParser(description=__doc__).parse_args()  # --help, and no stray arguments
    matrix = load_matrix()
    host = discover_host()
    validated = validate(resolve_config((), matrix, lambda: host), matrix)
    plan = build_plan(validated)
    cpu = str(ROOT / ".engines" / "cpu" / "bin" / "python")
    ttnn = ROOT / ".engines" / "ttnn" / "bin" / "python"
    vllm = inspect_engine(cpu).vllm_path
    stages: list[tuple[str, Callable[[], object]]] = [
        ("host discovery (sysfs, hugepages, memory)", discover_host),
        ("blocking host checks (what serve adds)", lambda: host_checks(HostCheckInput(validated, plan, host))),
        ("engine environment probe (subprocess)", lambda: inspect_engine(cpu)),
        ("core isolation scan of the installed vLLM", lambda: scan_core(Path(vllm or "."))),
    ]
    if ttnn.is_file():
        stages.append(("ttnn import + chip count (subprocess)", lambda: probe_ttnn(str(ttnn))))
    for name, run in stages:
        print(f"{median_s(run) * 1000:9.2f} ms  {name}")
    whole = median_s(
        lambda: subprocess.run(
            [sys.executable, "-m", "appliance.cli", "check", "--engine-url", "http://127.0.0.1:9"],
            capture_output=True,
            check=False,
        ),
        runs=3,
    )
    print(f"{whole * 1000:9.1f} ms  appliance check (whole command, no engine answering)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
