"""Build make targets as concurrent set-up steps with one progress display (`make serve`, `make test`).

Usage: run_steps.py --make MAKE --logs DIR "TITLE=TARGET" ...

Each TARGET is built by its own `make -s TARGET`, all at once (they are independent environments),
its output in DIR/<target's last name>.log. Run with the tools venv's interpreter (.tools/setup, which
holds rich); it imports the appliance's step runner straight from the checkout. Exit 1 when a step
failed, after one line per failed step naming its log.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from rich.console import Console  # noqa: E402

from appliance.engines.steps import SetupStep, StepFailed, run_steps  # noqa: E402


def step_for(spec: str, make: str, logs: Path) -> SetupStep:
    title, _, target = spec.partition("=")
    slug = re.sub(r"[^A-Za-z0-9]+", "-", title).strip("-").lower()
    # `make -q` first: a target already built says so, where `make -s` would print nothing.
    script = '"$0" -q "$1" && echo "up to date: $1" || "$0" -s --no-print-directory "$1"'
    return SetupStep(title, ("sh", "-c", script, make, target), logs / f"{slug}.log", dict(os.environ))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--make", default="make")
    parser.add_argument("--logs", type=Path, required=True)
    parser.add_argument("steps", nargs="+", metavar="TITLE=TARGET")
    args = parser.parse_args()
    console = Console(stderr=True)
    try:
        run_steps([step_for(spec, args.make, args.logs) for spec in args.steps], console)
    except StepFailed as failed:
        console.print(str(failed), markup=False, highlight=False, soft_wrap=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
