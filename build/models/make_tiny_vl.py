"""Check, or build, the tiny vision model's checkpoint for the cpu engine (the recipe `serve` runs).

Run it with the ENGINE interpreter::

    .engines/cpu/bin/python build/models/make_tiny_vl.py --out DIR

Like make_tiny_model.py: an intact DIR (the hash `tiny_vl.yaml` records) is left alone without importing
torch; a build (tiny_vl_weights.py) is made beside DIR and swapped in only when it reproduces the hash.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from checkpoint_dir import generated_main


def writer() -> Callable[[Path], None]:
    import tiny_vl_weights  # torch, tokenizers and transformers: only when a build is due

    return tiny_vl_weights.write_seeded


if __name__ == "__main__":
    sys.exit(
        generated_main(
            Path(__file__).with_name("tiny_vl.yaml"),
            writer,
            "the tiny random-weight Qwen2.5-VL",
        )
    )
