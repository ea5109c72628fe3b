"""Benchmark: how long one appliance is out of rotation for an upgrade, step by step, and for a rolled-back one.

One `appliance serve` of the embedded default (SmolLM2-135M-Instruct, CPU engine) on free ports, then in one run:
1. pass: `appliance upgrade serving.max_concurrency=8` with the default gates (the basic eval set, a 15 s run of
   the chat workload), which passes;
2. rollback: `appliance upgrade model=tiny`, whose noise answers fail the eval gate: the old generation boots again.
For each, the time from the drain's start (out of rotation) to the gates passed, or to the old generation serving
again, and each step's share, read from the appliance's own upgrade record (/state). Run from the repository root,
on a quiet host: `PYTHONPATH=. .venv/bin/python bench/upgrade_time.py`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from pathlib import Path

from appliance.control.upgrade_documents import UpgradeDocument
from testkit.appliance_process import ROOT, running_appliance


def upgrade(control_url: str, token: str, *change: str) -> None:
    """`appliance upgrade` as an operator runs it, its step lines shown as they come."""
    subprocess.run(
        [str(ROOT / ".venv" / "bin" / "appliance"), "upgrade", "--url", control_url, *change],
        env=os.environ | {"APPLIANCE_TOKEN": token},
        check=False,
    )


def report(name: str, record: UpgradeDocument) -> None:
    steps = record.steps
    start = steps[0].started
    end = max(s.ended or s.started for s in steps)
    print(f"{name}: {record.outcome}, out of rotation {end - start:.1f} s (drain start to the end of the last step)")
    for step in steps:
        took = (step.ended or step.started) - step.started
        print(f"  {step.name:<16} {took:6.1f} s  {took / (end - start):5.0%}")


def main() -> None:
    argparse.ArgumentParser(description=__doc__).parse_args()  # --help, and no stray arguments
    with tempfile.TemporaryDirectory() as tmp, running_appliance(Path(tmp), model="smollm2") as served:
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        for name, change in (("pass", ("serving.max_concurrency=8",)), ("rollback", ("model=tiny",))):
            upgrade(served.control_url, served.token, *change)
            record = served.state().upgrade
            assert record is not None
            report(name, record)
        print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
