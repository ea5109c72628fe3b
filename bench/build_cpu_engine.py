"""Benchmark: the cpu engine built from scratch, from the hash-locked pins, as a fresh machine would.

`appliance build engine=cpu paths.engines_dir=<tmp>` with empty uv and pip caches, then the same command
again (the stamp makes it a no-op), then `appliance manifest` against the new venv. Prints wall times
and whether the pins hold. Needs network access to PyPI (or its mirror) and about 2 GB of disk.
Target: the fresh build under 180 s on 2 cores, the rerun under 5 s (mostly the manifest probe).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(command: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    return time.monotonic() - started, done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the built venv and print where it is")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-build-cpu-"))
    caches = {"PIP_CACHE_DIR": str(work / "pip-cache"), "UV_CACHE_DIR": str(work / "uv-cache")}
    env = os.environ | caches | {"APPLIANCE_ENGINES_DIR": str(work / "engines")}
    build = [sys.executable, "-m", "appliance.cli", "build", "engine=cpu"]
    try:
        fresh, first = timed(build, env)
        if first.returncode != 0:
            print(first.stdout, first.stderr[-3000:], sep="\n")
            return 1
        rerun, _ = timed(build, env)
        _, manifest = timed([sys.executable, "-m", "appliance.cli", "manifest", "mesh=cpu", "--json"], env)
        record = json.loads(manifest.stdout)
        print(f"fresh build (empty caches):    {fresh:.1f} s wall")
        print(f"rerun with unchanged pins:     {rerun:.1f} s wall")
        print(f"manifest: {len(record['distributions'])} distributions, pins hold: {record['ok']}")
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            subprocess.run(["rm", "-rf", str(work)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
