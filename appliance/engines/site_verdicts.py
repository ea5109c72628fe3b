"""Which site configs change verdict when the tt pin moves to another recorded plugin state, and why.

Each site (conf/site and --site-dir) is composed once and judged twice, under the pinned state and under
the target; a site whose fit bucket or findings differ is listed with the findings that appeared or went.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from appliance.compat.fit import fit_of
from appliance.compat.matrix import CompatibilityMatrix
from appliance.compat.resolve import resolve_config
from appliance.compat.state_set import PluginStates
from appliance.compat.validate import validate
from appliance.config.compose import group_options
from appliance.config.schema import ComposedConfig
from appliance.errors import ConfigError, Problem
from appliance.host.discovery import HostFacts

__all__ = ["SiteChange", "site_changes"]


@dataclass(frozen=True, slots=True)
class SiteChange:
    """One site's verdict before and after the move, and the findings that differ."""

    site: str
    before: str
    after: str
    appeared: tuple[Problem, ...]
    gone: tuple[Problem, ...]

    @property
    def changed(self) -> bool:
        return self.before != self.after or bool(self.appeared or self.gone)


def site_changes(
    states: PluginStates,
    target: str,
    matrix: CompatibilityMatrix,
    host_facts: Callable[[], HostFacts],
    overrides: Sequence[str] = (),
    site_dir: Path | None = None,
) -> tuple[SiteChange, ...]:
    """Every site judged under the pinned state and under `vllm=<target>`."""
    changes = []
    for name in group_options("site", site_dir):
        try:
            composed = resolve_config([*overrides, f"site={name}"], matrix, host_facts, site_dir=site_dir)
        except ConfigError as error:
            before = after = _judged(error.problems)
            changes.append(SiteChange(name, before[0], after[0], (), ()))
            continue
        before, after = (_judge(composed, matrix, states, against) for against in (None, f"vllm={target}"))
        appeared = tuple(p for p in after[1] if _key(p) not in {_key(q) for q in before[1]})
        gone = tuple(p for p in before[1] if _key(p) not in {_key(q) for q in after[1]})
        changes.append(SiteChange(name, before[0], after[0], appeared, gone))
    return tuple(changes)


def _judge(
    composed: ComposedConfig, matrix: CompatibilityMatrix, states: PluginStates, against: str | None
) -> tuple[str, tuple[Problem, ...]]:
    try:
        return _judged(validate(composed, matrix, states, against).warnings)
    except ConfigError as error:
        return _judged(error.problems)


def _judged(problems: Sequence[Problem]) -> tuple[str, tuple[Problem, ...]]:
    fit = fit_of(problems)
    ok = "invalid" if any(p.severity == "error" for p in problems) else "valid"
    return f"{ok}, {fit.bucket}", tuple(problems)


def _key(problem: Problem) -> tuple[str, str, str]:
    """Findings are the same across states when code, key and severity match (messages name the state)."""
    return problem.code, problem.key, problem.severity
