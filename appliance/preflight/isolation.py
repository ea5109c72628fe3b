"""Core isolation: the installed vLLM core must hold no vendor-specific code.

A Tenstorrent symbol inside vLLM's own package means a patched core (a fork by another name):
every upstream release then needs that patch re-applied. Vendor code belongs in the plugin,
which vLLM loads through its entry points.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["VENDOR_SYMBOLS", "Finding", "IsolationScan", "scan_core"]

# Names that only Tenstorrent code uses: the device libraries, the plugin, its platform and model
# classes, and the environment the TT runtime reads. A bare "tt" string is left out on purpose:
# it is also a language code (Tatar) in speech-model tables.
VENDOR_SYMBOLS = re.compile(
    r"\bttnn\b|\btt_metal\b|\btt-metal\b|\bTT_METAL_\w+|[Tt]enstorrent|TENSTORRENT|\bvllm_tt_plugin\b"
    r"|\bvllm-tt-plugin\b|\btt_model_registry\b|\bTTPlatform\b|\bTT_VISIBLE_DEVICES\b|\bMESH_DEVICE\b"
    r"|\bTT[A-Z]\w*(?:ForCausalLM|ForConditionalGeneration)\b"
)
# Literal fragments of those names: substring tests are far cheaper than the regex, which then
# runs only on the lines that contain one (vLLM has ~2,600 source files, 39 MB).
_FRAGMENTS = (
    "ttnn",
    "tt_metal",
    "tt-metal",
    "TT_METAL_",
    "enstorrent",
    "ENSTORRENT",
    "tt_plugin",
    "tt-plugin",
    "tt_model_registry",
    "TTPlatform",
    "TT_VISIBLE_DEVICES",
    "MESH_DEVICE",
    "ForCausalLM",
    "ForConditionalGeneration",
)
MAX_LISTED = 50


@dataclass(frozen=True, slots=True)
class Finding:
    path: str
    """Path relative to the scanned package's parent (vllm/platforms/tt.py)."""
    line: int
    symbol: str
    text: str


@dataclass(frozen=True, slots=True)
class IsolationScan:
    root: str
    files: int
    findings: tuple[Finding, ...]
    """The first MAX_LISTED hits, in path order."""
    total: int


def scan_core(package: Path) -> IsolationScan:
    """Every vendor symbol in the Python sources under `package` (an installed `vllm` directory)."""
    findings: list[Finding] = []
    total = files = 0
    for source in sorted(package.rglob("*.py")):
        if "__pycache__" in source.parts:
            continue
        files += 1
        text = source.read_text(encoding="utf-8", errors="replace")
        if not any(fragment in text for fragment in _FRAGMENTS):
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if not any(fragment in line for fragment in _FRAGMENTS):
                continue
            for match in VENDOR_SYMBOLS.finditer(line):
                total += 1
                if len(findings) < MAX_LISTED:
                    where = str(source.relative_to(package.parent))
                    findings.append(Finding(where, number, match.group(), line.strip()[:160]))
    return IsolationScan(str(package), files, tuple(findings), total)
