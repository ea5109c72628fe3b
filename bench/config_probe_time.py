"""Benchmark: the config-time probe against a bare script that only runs vLLM's parser and config code.

Side by side, alternating, on the same argv and environment (the embedded tiny model's plan, `appliance plan
--json model=tiny`), each a cold process of the CPU engine's interpreter:
- bare: `make_arg_parser` on vLLM's FlexibleArgumentParser, `parse_args`, `AsyncEngineArgs.from_cli_args`,
  `create_engine_config`, nothing else;
- probe: `engine_plugins/appliance_probe.py config` as `appliance plan --probe` and `serve` run it (the same three
  steps, plus the effective values, the log capture and the JSON line);
- floor: `python -c "import vllm"`.
Target (issue 30): the probe within 1.2x of the bare script. Run from the repository root, on a quiet host:
`PYTHONPATH=. .venv/bin/python bench/config_probe_time.py [--repeat N]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from appliance.engines.config_probe import engine_args
from appliance.engines.engine_env import PROBE_SCRIPT
from appliance.plan import LaunchPlan

BARE = """
import sys
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.usage.usage_lib import UsageContext
from vllm.utils.argparse_utils import FlexibleArgumentParser

args = make_arg_parser(FlexibleArgumentParser()).parse_args(sys.argv[1:])
AsyncEngineArgs.from_cli_args(args).create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
"""


def tiny_plan() -> tuple[LaunchPlan, dict[str, str]]:
    """The embedded tiny model's plan, built first if need be, and the engine's environment for it."""
    from appliance.compat.matrix import load_matrix
    from appliance.compat.validate import validate
    from appliance.config.compose import compose_config
    from appliance.plan import build_plan
    from appliance.runtime.spawn import engine_environment
    from appliance.serve import ensure_model

    plan = build_plan(validate(compose_config(["model=tiny", "mesh=cpu"]), load_matrix()))
    ensure_model(plan)
    return plan, engine_environment(plan, os.environ)


def seconds(argv: list[str], env: dict[str, str], cwd: str) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    plan, env = tiny_plan()
    engine = list(engine_args(plan))
    with tempfile.TemporaryDirectory() as cwd:
        bare_script = Path(cwd) / "bare.py"
        bare_script.write_text(BARE)
        commands = {
            "floor": [plan.python, "-c", "import vllm"],
            "bare": [plan.python, str(bare_script), *engine],
            "probe": [plan.python, str(PROBE_SCRIPT), "config", "@@", "--", *engine],
        }
        for argv in commands.values():  # warm the page cache and the bytecode once
            seconds(argv, env, cwd)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.repeat):
            for name, argv in commands.items():
                times[name].append(seconds(argv, env, cwd))
    med = {name: statistics.median(values) for name, values in times.items()}
    load = os.getloadavg()
    print(
        f"config-time probe on the CPU engine, median of {args.repeat} alternating cold runs "
        f"(load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} cores)"
    )
    for name, value in med.items():
        spread = f"{min(times[name]):.2f}-{max(times[name]):.2f}"
        print(f"  {name:<6} {value:6.2f} s  (range {spread} s)")
    ratio = med["probe"] / med["bare"]
    print(f"  probe / bare = {ratio:.3f}x (target <= 1.2x)")
    print(json.dumps({"median_s": med, "ratio": ratio, "repeat": args.repeat}))
    return 0 if ratio <= 1.2 else 1


if __name__ == "__main__":
    sys.exit(main())
