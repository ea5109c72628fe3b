"""The option each config group ends up with, found before composing: what `auto` resolution needs.

Composing is most of a verdict's cost (Hydra builds the defaults tree, OmegaConf merges every file),
and pinning mesh=auto and engine=auto needs only the choices. When no file the defaults tree reaches
has a defaults list of its own, the choices are the command line's selections over conf/config.yaml's
defaults, read straight from the files; otherwise (a site that overrides /mesh, a malformed or missing
file) Hydra's defaults list decides, still without merging anything.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from appliance.config.compose import CONF_DIR, GROUPS, composition_inputs, defaults_choices
from appliance.config.composition_cache import CODE, cached_composition
from appliance.data_files import cached, parse_yaml

__all__ = ["group_choices", "mesh_arch"]

_SELECTION = re.compile(rf"^(?P<group>{'|'.join(GROUPS)})=(?P<option>.+)$")
_PLAIN_DEFAULT = re.compile(r"^(?:optional )?(?P<group>[a-z_]+)$")


def group_choices(
    selections: Sequence[str], *, site_dir: Path | None = None, host_file: Path | None = None
) -> dict[str, str]:
    """Group -> option under the group `selections` (`mesh=t3k`, `+model=llama`), as Hydra would choose.

    Cached like a composition, by the same inputs: a warm call reads no file and never imports Hydra.
    """
    normalized, site_dir, host_file = composition_inputs(selections, site_dir, host_file)
    return cached_composition(
        "choices", normalized, site_dir, host_file, lambda: _choices(normalized, site_dir, host_file), dict
    )


def mesh_arch(option: str) -> str:
    """The `arch` a mesh option's own file declares (what engine=auto follows), cached by the file's bytes."""
    path = CONF_DIR / "mesh" / f"{option}.yaml"
    return cached("mesh-arch", [path], CODE, lambda: _arch(path), str, per_key=True)


def _choices(normalized: Sequence[str], site_dir: Path | None, host_file: Path | None) -> dict[str, str]:
    plain = _plain_choices(normalized, site_dir, host_file)
    return plain if plain is not None else defaults_choices(normalized, site_dir, host_file)


def _arch(path: Path) -> str:
    data = _read(path)
    return str(data.get("arch")) if data else ""


def _plain_choices(normalized: Sequence[str], site_dir: Path | None, host_file: Path | None) -> dict[str, str] | None:
    """The choices when no reached file has its own defaults list; None when only Hydra can tell."""
    chosen = _primary_defaults()
    if chosen is None:
        return None
    picked = [m for o in normalized if (m := _SELECTION.match(o))]
    if len({m["group"] for m in picked}) < len(picked) or any(m["group"] not in chosen for m in picked):
        return None  # a group chosen twice, or one the primary lists no default for: Hydra's error
    chosen |= {m["group"]: m["option"] for m in picked}
    for group, option in chosen.items():
        files = [p for p in _candidates(group, option, site_dir, host_file) if p.is_file()]
        if not files and group != "local":
            return None  # an unknown option: Hydra names the choices
        contents = [_read(p) for p in files]
        if any(c is None or "defaults" in c for c in contents):
            return None
    return chosen


def _primary_defaults() -> dict[str, str] | None:
    """conf/config.yaml's defaults list as group -> option, if it is a plain one (no overrides, packages)."""
    primary = _read(CONF_DIR / "config.yaml")
    entries = primary.get("defaults") if primary else None
    if not isinstance(entries, list):
        return None
    chosen: dict[str, str] = {}
    for entry in entries:
        if entry == "_self_":
            continue
        item = next(iter(entry.items())) if isinstance(entry, dict) and len(entry) == 1 else None
        m = _PLAIN_DEFAULT.match(str(item[0])) if item else None
        if item is None or m is None or not isinstance(item[1], str):
            return None
        chosen[m["group"]] = item[1]
    return chosen


def _candidates(group: str, option: str, site_dir: Path | None, host_file: Path | None) -> list[Path]:
    """Every file Hydra's search path could read for `group=option` (compose links the site dir and host file)."""
    found = [CONF_DIR / group / f"{option}.yaml"]
    if group == "site" and site_dir is not None:
        found.append(site_dir / f"{option}.yaml")
    if group == "local" and option == "host" and host_file is not None:
        found.append(host_file)
    return found


def _read(path: Path) -> dict[str, Any] | None:
    """A mapping file's content; None when it is unreadable or not a mapping (Hydra then reports it)."""
    import yaml  # here: a cached verdict reads no YAML

    try:
        data = parse_yaml(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else ({} if data is None else None)
