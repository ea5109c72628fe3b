"""Check, or build, the tiny model's checkpoint for the cpu engine (the recipe `serve` runs).

Run it with the ENGINE interpreter::

    .engines/cpu/bin/python build/models/make_tiny_model.py --out DIR

An intact DIR (its content hash is the one `tiny.yaml` records) is left alone, and the check
imports nothing heavy: torch, tokenizers and safetensors load only when a build is due. A build is
made beside DIR and swapped in whole; one that does not reproduce the recorded hash replaces nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from checkpoint_dir import generated_main


def writer() -> Callable[[Path], None]:
    import tiny_weights  # torch, tokenizers and safetensors: only when a build is due

    return tiny_weights.write_seeded


if __name__ == "__main__":
    sys.exit(
        generated_main(
            Path(__file__).with_name("tiny.yaml"),
            writer,
            "the tiny deterministic random-weight Llama",
        )
    )
