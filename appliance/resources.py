"""Every path to the data the appliance ships: conf/, models/, build/ and engine_plugins/.

A wheel carries those folders as package data under `appliance/_data/` (pyproject.toml's
force-include), read here through importlib.resources, so an installed appliance works from any
directory. An editable install runs from the source checkout, where they are the repository's
own top-level folders; nothing else in the package builds a path from `__file__`.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from pathlib import Path

__all__ = [
    "build_dir",
    "conf_dir",
    "default_engines_dir",
    "engine_plugins_dir",
    "engine_build_command",
    "models_dir",
    "source_checkout",
]


@cache
def _shipped(name: str) -> Path:
    packaged = Path(str(files("appliance"))) / "_data" / name
    if packaged.is_dir():
        return packaged
    checkout = source_checkout()
    if checkout is None:
        raise FileNotFoundError(
            f"the appliance's {name}/ data is missing from {packaged.parent}: reinstall the package"
        )
    return checkout / name


@cache
def source_checkout() -> Path | None:
    """The repository root when running from a source checkout (editable install), else None."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() and (root / "conf").is_dir() else None


def conf_dir() -> Path:
    """The Hydra config tree (primary config.yaml and one folder per group)."""
    return _shipped("conf")


def models_dir() -> Path:
    """The compatibility matrix, one YAML file per model family."""
    return _shipped("models")


def build_dir() -> Path:
    """Engine recipes, pins, lock files, plugin states and recorded contracts."""
    return _shipped("build")


def engine_plugins_dir() -> Path:
    """Code that runs inside an engine's interpreter (put on its PYTHONPATH or run as a script)."""
    return _shipped("engine_plugins")


def engine_build_command(engine: str) -> str:
    """What builds an engine environment: the checkout's make target, or the installed appliance's own command."""
    return f"make engine-{engine}" if source_checkout() is not None else f"appliance build engine={engine}"


def default_engines_dir(cache_dir: str) -> Path:
    """Where engine environments live when `paths.engines_dir` is unset.

    A checkout keeps them in `.engines/` beside its sources (what `make` builds); an installed
    appliance has no such folder of its own, so they go under the cache directory.
    """
    checkout = source_checkout()
    return checkout / ".engines" if checkout is not None else Path(cache_dir) / "engines"
