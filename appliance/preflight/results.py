"""A preflight check's result and how results are built and weighed: what every check module returns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from appliance.compat.validate import ValidatedConfig
from appliance.host.discovery import HostFacts
from appliance.plan import LaunchPlan

__all__ = ["CheckResult", "CheckStatus", "HostCheckInput", "check", "worst"]

CheckStatus = Literal["pass", "warn", "fail", "unknown"]
_RANK: Mapping[CheckStatus, int] = {"pass": 0, "warn": 1, "unknown": 2, "fail": 3}


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check's outcome, standing on its own in a report."""

    id: str
    title: str
    status: CheckStatus
    summary: str
    evidence: Mapping[str, Any]
    """Versions, paths and counts the status was decided on (JSON values)."""
    fix: str = ""
    blocking: bool = False
    """`appliance serve` refuses to start when a blocking check fails."""


@dataclass(frozen=True, slots=True)
class HostCheckInput:
    validated: ValidatedConfig
    plan: LaunchPlan
    host: HostFacts


def check(
    id: str, title: str, status: CheckStatus, summary: str, fix: str = "", *, blocking: bool = False, **evidence: Any
) -> CheckResult:
    """Build a CheckResult; keyword arguments become its evidence."""
    return CheckResult(
        id, title, status, summary, MappingProxyType(evidence), fix if status != "pass" else "", blocking
    )


def worst(results: tuple[CheckResult, ...]) -> CheckStatus:
    """fail > unknown > warn > pass: an unproven check weighs more than a known warning."""
    return max((r.status for r in results), key=_RANK.__getitem__, default="pass")
