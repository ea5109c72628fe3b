"""The on-disk key of a composition: everything that decides what conf/ and the overrides compose to.

A warm verdict reads its composition (after the secret scan, the schema and the constraints) from
`appliance.data_files.cached` instead of importing Hydra and building the config schema. The key
covers every input, so a stale entry cannot be read:
- the overrides in Hydra's spelling;
- every file of conf/ (its path and bytes), of the site dir and the host file when given (by their
  resolved paths, which provenance shows, and bytes; never the throwaway search-path root);
- the value (or absence) of every environment variable those files and the overrides read with
  `oc.env`; an input calling another resolver that reads the world (Hydra's `now`, `hydra:`), or
  `oc.env` with a computed name, or setting Hydra's search path (files outside the key), is not
  cached at all, nor is anything where a Hydra plugin package (`hydra_plugins`, which may add search
  paths) is installed;
- the source of the modules that find the group choices, compose, scan secrets, parse the schema and
  check constraints, the hydra-core, omegaconf, PyYAML, pydantic and annotated-types versions (their
  version modules) and the interpreter.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

from appliance.data_files import cache_key, cached
from appliance.resources import conf_dir

__all__ = ["CODE", "cached_composition", "composition_key", "composition_sources", "conf_environment"]

T = TypeVar("T")

CODE = (
    "appliance.config.compose",
    "appliance.config.composition_cache",
    "appliance.config.choices",
    "appliance.config.problems",
    "appliance.config.secrets",
    "appliance.config.schema",
    "appliance.config.bounds",
    "appliance.config.constraints",
    "appliance.config.value_overrides",
    "appliance.data_files",
    "appliance.resources",
    "hydra",
    "omegaconf.version",
    "yaml",
    "pydantic.version",
    "annotated_types",
)
"""The modules whose source a cached composition depends on (a package's `__init__` holds its version)."""

# Resolvers that compute from their arguments alone; `oc.env` is keyed by the values it reads.
_PURE_RESOLVERS = frozenset(
    {"oc.env", "oc.select", "oc.decode", "oc.create", "oc.deprecated", "oc.dict.keys", "oc.dict.values"}
)
_RESOLVER = re.compile(r"\$\{\s*([\w.]+)\s*:")
_ENV_NAMED = re.compile(r"\$\{\s*oc\.env\s*:\s*['\"]?([A-Za-z_]\w*)['\"]?\s*[,}]")


def cached_composition(
    kind: str,
    normalized: Sequence[str],
    site_dir: Path | None,
    host_file: Path | None,
    build: Callable[[], T],
    expected: type[T],
    trusted: Collection[type] = (),
) -> T:
    """`build()`'s result for this composition's inputs: from the cache when every input is as it was.

    `trusted`: the classes beside the project's dataclasses that reading the entry back may construct.
    """
    inputs = _inputs(normalized, site_dir, host_file, None)
    if inputs is None:
        return build()
    return cached(kind, inputs[0], CODE, build, expected, facts=inputs[1], per_key=True, trusted=trusted)


def composition_key(
    normalized: Sequence[str], site_dir: Path | None, host_file: Path | None, conf: Path | None = None
) -> str | None:
    """The cache key of composing `normalized` (over `conf`, else conf/); None when it is not cached."""
    inputs = _inputs(normalized, site_dir, host_file, conf)
    return None if inputs is None else cache_key(inputs[0], CODE, inputs[1])


def _inputs(
    normalized: Sequence[str], site_dir: Path | None, host_file: Path | None, conf: Path | None
) -> tuple[list[Path], list[str]] | None:
    """The files and the other facts a composition depends on; None when it must not be cached."""
    try:
        sources = composition_sources(site_dir, host_file, conf)
        texts = [*(p.read_text() for p in sources or ()), *normalized]
    except (OSError, UnicodeDecodeError):
        return None  # an unreadable file: Hydra says which
    if sources is None:
        return None
    names = conf_environment(texts)
    if names is None or any("searchpath" in t for t in texts) or importlib.util.find_spec("hydra_plugins"):
        return None  # a search path, or a plugin that adds one, reaches files outside the key
    facts = [repr(("override", o)) for o in normalized]
    facts += [repr(("env", n, os.environ.get(n))) for n in names]
    facts += [repr((what, str(p.resolve()) if p else None)) for what, p in (("site", site_dir), ("host", host_file))]
    return sources, facts


def composition_sources(site_dir: Path | None, host_file: Path | None, conf: Path | None = None) -> list[Path] | None:
    """Every file a composition may read: conf/ (or `conf`), then the site dir's and the host file, resolved.

    None when a folder holds a link to another folder: Hydra would follow it, the key would not.
    """
    files = _files(conf or conf_dir())
    site = _files(site_dir.resolve()) if site_dir is not None else []
    if files is None or site is None:
        return None
    files += sorted({p.resolve() for p in site})
    if host_file is not None:
        files.append(host_file.resolve())
    return files


def conf_environment(texts: Iterable[str]) -> tuple[str, ...] | None:
    """The environment variables `texts` interpolate with `oc.env`; None when the world decides otherwise.

    None: a resolver outside the pure ones is called, or `oc.env` is given a computed name.
    """
    names: set[str] = set()
    for text in texts:
        resolvers = _RESOLVER.findall(text)
        named = _ENV_NAMED.findall(text)
        if any(r not in _PURE_RESOLVERS for r in resolvers) or resolvers.count("oc.env") != len(named):
            return None
        names.update(named)
    return tuple(sorted(names))


def _files(folder: Path) -> list[Path] | None:
    found = sorted(folder.rglob("*"))
    if any(p.is_symlink() and p.is_dir() for p in found):
        return None
    return [p for p in found if p.is_file()]
