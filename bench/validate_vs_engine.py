"""Benchmark: how fast a bad config is refused, by `appliance validate` vs by the CPU engine itself.

Each mistake is made the same way in both, on the embedded tiny model, and both run as cold
processes side by side in one run:
- an over-long context (65536 tokens; the model and its row allow 2048);
- a KV pool too small for the context (--kv-cache-memory-bytes 524288: 496 usable tokens < 2048;
  VLLM_CPU_KVCACHE_SPACE is unset for it, since vLLM lets that variable overwrite the flag).
Target: validate < 1 s and >= 30x faster than the engine's own refusal.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from appliance.compat.matrix import load_matrix
from appliance.compat.validate import validate
from appliance.config.compose import compose_config
from appliance.plan import LaunchPlan, build_plan
from appliance.runtime.spawn import engine_environment
from appliance.serve import ensure_model

MISTAKES: dict[str, tuple[list[str], dict[str, str]]] = {
    # name: (appliance overrides, engine flag -> value)
    "over-long context": (["serving.max_context=65536"], {"--max-model-len": "65536"}),
    "too-small KV pool": (
        [
            "~engine.env.VLLM_CPU_KVCACHE_SPACE",
            "engine.extra_args=[--gpu-memory-utilization,0.2,--enforce-eager,--kv-cache-memory-bytes,524288]",
        ],
        {"--kv-cache-memory-bytes": "524288"},
    ),
}


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, timeout=900, check=False)
    return time.perf_counter() - start, done.returncode


def engine_argv(plan: LaunchPlan, flags: dict[str, str]) -> list[str]:
    argv = list(plan.argv)
    for flag, value in flags.items():
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    return argv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="validate runs per mistake (the engine runs once)")
    args = parser.parse_args()
    plan = build_plan(validate(compose_config(["mesh=cpu", "engine=cpu", "model=tiny"]), load_matrix()))
    ensure_model(plan)
    env = dict(os.environ)
    for name, (overrides, flags) in MISTAKES.items():
        command = [sys.executable, "-m", "appliance.cli", "validate", "mesh=cpu", "model=tiny", *overrides]
        runs = [timed(command, env) for _ in range(args.rounds)]
        if any(code != 2 for _, code in runs):
            raise SystemExit(f"{name}: validate did not refuse the config")
        engine_env = engine_environment(plan, env)
        if "--kv-cache-memory-bytes" in flags:
            engine_env.pop("VLLM_CPU_KVCACHE_SPACE")
        engine_s, engine_code = timed(engine_argv(plan, flags), engine_env)
        validate_s = min(t for t, _ in runs)
        print(f"{name}:")
        print(f"  appliance validate (cold process, best of {args.rounds}): {validate_s:6.2f} s  exit 2")
        print(f"  CPU engine refusing it:                          {engine_s:6.2f} s  exit {engine_code}")
        print(f"  speed-up {engine_s / validate_s:5.1f}x  (target >= 30x, validate < 1 s)")


if __name__ == "__main__":
    main()
