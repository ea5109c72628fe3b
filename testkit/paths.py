"""Where the test-support files lie: the checkout, the recorded data and the engine-side scripts."""

from __future__ import annotations

from pathlib import Path

TESTKIT = Path(__file__).resolve().parent
ROOT = TESTKIT.parent
DATA = TESTKIT / "data"
"""Recorded real data: engine logs, /metrics pages, sysfs trees, tt-smi output (each folder's README says how)."""
ENGINE_SIDE = TESTKIT / "engine_side"
"""Scripts run inside an engine environment's own interpreter (they import vLLM)."""
