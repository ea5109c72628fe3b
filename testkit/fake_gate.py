"""A stand-in for the CPU engine's interpreter as `serve` starts it behind its verdict (preflight/engine_gate.py).

`fake_gate.py PROBE gate MARKER -- ARGS` is the probe's gate: told `judge`, it prints a verdict (refused when ARGS
hold `--refuse`; no verdict and exit 1 with `--crash`; none at all with `--hang`), and told `go` becomes
testkit/fake_engine.py with ARGS in this same process (exec). `fake_gate.py -m MODULE ARGS` is the plain command line a
restart runs: the fake engine at once.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

FAKE_ENGINE = Path(__file__).with_name("fake_engine.py")
GATE_ONLY = ("--refuse", "--crash", "--hang")


def become_engine(args: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, str(FAKE_ENGINE), *(a for a in args if a not in GATE_ONLY)])


def told(word: str) -> bool:
    return sys.stdin.readline().strip() == word


def gate(marker: str, args: list[str]) -> None:
    print("INFO a line the engine logs while it imports", flush=True)
    if not told("judge"):
        sys.exit(0)
    if "--crash" in args:
        print("boom", file=sys.stderr, flush=True)
        sys.exit(1)
    if "--hang" in args:
        time.sleep(3600)
    refused = "--refuse" in args
    verdict = {"vllm": "0.0.0-fake", "accepted": not refused, "effective": {}, "logged": []}
    print(marker + json.dumps(verdict | ({"refusal": "ValueError: refused on request"} if refused else {})), flush=True)
    if not refused and told("go"):
        become_engine(args)


if __name__ == "__main__":
    if sys.argv[1] == "-m":
        become_engine(sys.argv[3:])
    else:
        gate(sys.argv[3], sys.argv[5:])
