"""Check, or build, the tiny model's checkpoint for the cpu engine (the recipe `serve` runs).

Run it with the ENGINE interpreter::

    .engines/cpu/bin/python build/models/make_tiny_model.py --out DIR

An intact DIR (its content hash is the one `tiny.yaml` records) is left alone, and the check
imports nothing heavy: torch, tokenizers and safetensors load only when a build is due. A build is
made beside DIR and swapped in whole; one that does not reproduce the recorded hash replaces nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml
from checkpoint_dir import BuildMismatch, build_into, ensure_checkpoint

RECORD = Path(__file__).with_name("tiny.yaml")


def build(out: Path, expect: str) -> str:
    """Write the checkpoint into `out` (atomically); its content hash."""
    import tiny_weights  # torch, tokenizers and safetensors: only when a build is due

    return build_into(out, tiny_weights.write_seeded, expect=expect)


def main(argv: list[str] | None = None) -> int:
    """Check or build the folder; print it with its hash and whether it was built."""
    parser = argparse.ArgumentParser(description="Check, or build, the tiny deterministic random-weight Llama.")
    parser.add_argument("--out", type=Path, required=True, help="checkpoint directory to check or (re)build")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    expect = yaml.safe_load(RECORD.read_text(encoding="utf-8"))["built_sha256"]
    try:
        digest, built = ensure_checkpoint(out, expect, lambda: build(out, expect))
    except BuildMismatch as err:
        print(f"the build produced {err.digest}, but {RECORD} records built_sha256 {expect}; if the cpu "
              "engine's pins changed on purpose, record the new hash", file=sys.stderr)  # fmt: skip
        return 1
    print(f"{args.out} {digest} {'built' if built else 'intact'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
