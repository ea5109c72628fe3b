"""Engine environments built beside each other, named by their pins' hash, and the old ones freed.

An upgrade to new pins never installs into the running environment: `build/<engine>/`'s pin files hash to a
name, `<engines dir>/<engine>-<hash>`, and the recipe builds that directory (or finds it built). After an upgrade
passes, only the current and the previous generation's environments are kept (the previous is what a rollback
boots), plus the bootstrap `<engines dir>/<engine>` that `make` builds; every other `<engine>-<hash>` is removed.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path

from appliance.errors import LaunchError
from appliance.plan import LaunchPlan

__all__ = ["build_environment", "environment_dir", "pins_hash", "prune_environments"]

log = logging.getLogger(__name__)
_HASHED = re.compile(r"^(cpu|tt)-[0-9a-f]{12}$")


def pins_hash(recipe: Path) -> str:
    """The hash of a recipe directory's files (pins, locks, install script; notes excluded), 12 hex digits."""
    digest = hashlib.sha256()
    for path in sorted(p for p in recipe.iterdir() if p.is_file() and p.suffix != ".md"):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def environment_dir(engines_dir: Path, engine: str, build_dir: Path) -> Path:
    return engines_dir / f"{engine}-{pins_hash(build_dir / engine)}"


def build_environment(engines_dir: Path, engine: str, build_dir: Path) -> Path:
    """The interpreter of the environment `build_dir`'s pins describe, built beside the others if it is not yet."""
    recipe = build_dir / engine
    if engine != "cpu":
        raise LaunchError(
            f"engine={engine}: build its environment on the host with `appliance build`, then upgrade "
            "with engine.python=<that environment>/bin/python"
        )
    if not (recipe / "install.sh").is_file():
        raise LaunchError(f"{recipe} has no install.sh: --build-dir must hold a recipe like build/")
    target = environment_dir(engines_dir, engine, build_dir)
    log.info("building the %s engine environment %s from %s", engine, target, recipe)
    uv = Path(sys.executable).with_name("uv")  # a dependency of the appliance: the recipe installs with it
    env = os.environ | ({"UV": str(uv)} if uv.is_file() else {})
    code = subprocess.run(["bash", str(recipe / "install.sh"), str(target)], env=env, check=False).returncode
    if code != 0:
        raise LaunchError(f"building {target} from {recipe} failed (exit {code}); the running generation is untouched")
    return target / "bin" / "python"


def prune_environments(plan: LaunchPlan, keep: Collection[str]) -> str:
    """Remove the hashed environments beside `plan`'s that no kept interpreter lives in; what was freed, in words."""
    engines_dir = Path(plan.python).parents[2]
    kept = {Path(python).parents[1] for python in keep}
    freed = []
    for env in sorted(engines_dir.iterdir()) if engines_dir.is_dir() else ():
        if _HASHED.match(env.name) and env.is_dir() and env not in kept:
            size = sum(f.stat().st_size for f in env.rglob("*") if f.is_file() and not f.is_symlink())
            shutil.rmtree(env)
            freed.append(f"{env.name} ({size / 2**30:.1f} GiB)")
    return f"; removed {', '.join(freed)}" if freed else ""
