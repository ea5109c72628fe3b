"""Run `vllm bench serve` from Python and print its result dict as JSON on the last line.

Runs in the CPU engine's interpreter (`.engines/cpu/bin/python -I bench/vllm_bench_serve.py ARGS`):
its `vllm` console script fails on package metadata (build/cpu/NOTES.md), so the benchmark is
driven through vllm.benchmarks.serve.add_cli_args and main with the same arguments.
"""

from __future__ import annotations

import json
import sys

from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser

if __name__ == "__main__":
    parser = FlexibleArgumentParser(description="vllm bench serve")
    add_cli_args(parser)
    result = main(parser.parse_args(sys.argv[1:]))
    print(json.dumps({k: v for k, v in result.items() if isinstance(v, (int, float, str))}))
