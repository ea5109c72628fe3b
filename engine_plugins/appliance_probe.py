"""Runs inside an engine's interpreter (stdlib only, Python 3.10+) and prints one JSON line.

`env` lists what is installed without importing vLLM; `ttnn` imports ttnn and counts chips.
The appliance runs this file by path with `python -I probe.py env|ttnn MARKER`, so nothing of the appliance is imported
and the repository on sys.path cannot shadow the engine's packages.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import platform
import sys
from typing import Any

__all__ = ["PLUGIN_GROUPS", "count_chips", "inspect_env"]

PLUGIN_GROUPS = ("vllm.platform_plugins", "vllm.general_plugins")


def inspect_env() -> dict[str, Any]:
    """Distributions, the vllm package's location and provider, and vLLM plugin entry points."""
    spec = importlib.util.find_spec("vllm")  # finds the package without executing it
    locations = list(spec.submodule_search_locations or []) if spec else []
    direct_urls = {}
    for dist in md.distributions():
        text = dist.read_text("direct_url.json")
        if text:
            direct_urls[dist.metadata["Name"]] = json.loads(text)
    return {
        "python": platform.python_version(),
        "distributions": {d.metadata["Name"]: d.version for d in md.distributions()},
        "vllm_path": locations[0] if locations else None,
        "vllm_providers": md.packages_distributions().get("vllm", []),
        "entry_points": [
            {"group": group, "name": ep.name, "value": ep.value} for group in PLUGIN_GROUPS for ep in _group(group)
        ],
        "direct_urls": direct_urls,
    }


def count_chips() -> dict[str, Any]:
    """Import ttnn and count chips; ttnn's "No chips detected in the cluster" means 0, not a failure."""
    try:
        import ttnn  # type: ignore[import-not-found]  # only in TT environments
    except Exception as err:  # any import failure is the finding itself
        return {"imported": False, "error": f"{type(err).__name__}: {err}"}
    found: dict[str, Any] = {"imported": True, "version": _version("ttnn")}
    try:
        found["chips"] = ttnn.GetNumAvailableDevices()
        found["pcie_chips"] = ttnn.GetNumPCIeDevices()
    except RuntimeError as err:
        if "No chips detected in the cluster" not in str(err):
            return found | {"error": " ".join(str(err).split("backtrace:")[0].split())}
        found |= {"chips": 0, "pcie_chips": 0, "note": "No chips detected in the cluster"}
    return found


def _group(group: str) -> list[md.EntryPoint]:
    return list(md.entry_points().select(group=group))


def _version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


if __name__ == "__main__":
    # argv: mode, then the marker the caller looks for (imports such as ttnn's may print too).
    mode, marker = sys.argv[1:3]
    result = inspect_env() if mode == "env" else count_chips()
    sys.stdout.write("\n" + marker + json.dumps(result) + "\n")
