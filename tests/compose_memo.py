"""One Hydra composition per distinct input for the whole test session.

`compose_config` spends most of its time in Hydra (about 0.45 s a call here), and the suite composes
the same override sets again and again: in its own tests and through the commands it runs in-process.
The memo sits at Hydra's boundary (`appliance.config.compose._compose`), so every step after it (the
secret scan, the schema, the constraints, provenance) still runs on every call, and each distinct
input is still composed by the real Hydra once. What else decides a composition is part of the key:
the overrides and the environment variables conf/ reads (`oc.env`). A composition with an extra
search-path root (a site directory or host file, usually under a test's tmp_path, whose files may
change) is never memoized, nor is a refusal: both are composed every time.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from appliance.resources import conf_dir

__all__ = ["memoized"]

Compose = Callable[[tuple[str, ...], Path | None], tuple[dict[str, Any], dict[str, str]]]


def conf_environment() -> tuple[str, ...]:
    """The environment variables conf/ interpolates with `oc.env`."""
    text = "\n".join(p.read_text() for p in sorted(conf_dir().rglob("*.yaml")))
    return tuple(sorted(set(re.findall(r"oc\.env:(\w+)", text))))


def memoized(real: Compose) -> Compose:
    """`real` with its results kept per (overrides, environment conf/ reads); callers get a deep copy."""
    names = conf_environment()
    kept: dict[tuple[tuple[str, ...], tuple[str | None, ...]], tuple[dict[str, Any], dict[str, str]]] = {}

    def compose(overrides: tuple[str, ...], extra_root: Path | None) -> tuple[dict[str, Any], dict[str, str]]:
        if extra_root is not None:
            return real(overrides, extra_root)
        key = (tuple(overrides), tuple(os.environ.get(n) for n in names))
        if key not in kept:
            kept[key] = real(overrides, extra_root)
        return copy.deepcopy(kept[key])

    return compose
