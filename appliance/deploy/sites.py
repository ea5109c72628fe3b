"""The fleet's sites: what each one overrides, and what each would boot.

A site is a `site=<name>` option from conf/site or the fleet's --site-dir. Its effective overrides
are read from compose's provenance (the keys its file set last) plus the config groups it switched,
so the listing shows exactly what the site changes, not what its file happens to repeat.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic_core import to_jsonable_python

from appliance.compat.matrix import CompatibilityMatrix
from appliance.compat.resolve import resolve_config
from appliance.compat.validate import validate
from appliance.config.compose import CONF_DIR, GROUPS, compose_config, group_options
from appliance.errors import ConfigError, Problem
from appliance.host.discovery import HostFacts
from appliance.plan import LaunchPlan, build_plan

__all__ = ["SitePlan", "SiteSummary", "list_sites", "plan_sites"]


@dataclass(frozen=True, slots=True)
class SiteSummary:
    name: str
    file: str
    groups: Mapping[str, str]
    """Config groups the site switches away from the package defaults, e.g. {"mesh": "t3k"}."""
    overrides: Mapping[str, Any]
    """Dotted key -> value, for every key the site's file set last."""


@dataclass(frozen=True, slots=True)
class SitePlan:
    name: str
    plan: LaunchPlan | None
    """What the site would boot; None when it does not validate."""
    problems: tuple[Problem, ...]
    """Errors when it does not validate, else the plan's warnings."""

    @property
    def ok(self) -> bool:
        return self.plan is not None


def list_sites(site_dir: Path | None = None) -> tuple[SiteSummary, ...]:
    """Every site with its effective overrides; a site that does not compose raises ConfigError."""
    baseline = compose_config([], site_dir=site_dir).choices
    summaries = []
    for name in group_options("site", site_dir):
        composed = compose_config([f"site={name}"], site_dir=site_dir)
        source = _site_source(name, site_dir)
        values = to_jsonable_python(composed.config, fallback=dict)
        keys = sorted(k for k, origin in composed.provenance.items() if origin == source)
        choices = composed.choices
        groups = {g: choices[g] for g in GROUPS if g != "site" and g in choices and baseline.get(g) != choices[g]}
        summaries.append(
            SiteSummary(name, source, MappingProxyType(groups), MappingProxyType({k: _lookup(values, k) for k in keys}))
        )
    return tuple(summaries)


def plan_sites(
    overrides: Sequence[str],
    matrix: CompatibilityMatrix,
    host_facts: Callable[[], HostFacts],
    site_dir: Path | None = None,
) -> tuple[SitePlan, ...]:
    """Per site, the launch plan for `overrides` at that site, or why there is none.

    One process for every site: the matrix, the plugin states and the host are read once.
    """
    plans, host = [], cache(host_facts)
    for name in group_options("site", site_dir):
        try:
            composed = resolve_config([*overrides, f"site={name}"], matrix, host, site_dir=site_dir)
            plan = build_plan(validate(composed, matrix))
        except ConfigError as err:
            plans.append(SitePlan(name, None, err.problems))
        else:
            plans.append(SitePlan(name, plan, plan.warnings))
    return tuple(plans)


def _site_source(name: str, site_dir: Path | None) -> str:
    """The file compose records as the site's provenance (conf/site wins over --site-dir, as in Hydra)."""
    packaged = CONF_DIR / "site" / f"{name}.yaml"
    if packaged.is_file() or site_dir is None:
        return str(packaged.relative_to(CONF_DIR.parent))
    return str((site_dir / f"{name}.yaml").resolve())


def _lookup(tree: Mapping[str, Any], key: str) -> Any:
    node: Any = tree
    for part in key.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node
