"""The appliance's exception family.

ApplianceError
├── ConfigError    the composed config is invalid; carries every Problem found
├── LaunchError    a valid plan cannot be started here (no device, lock held, no engine)
│   └── HostRefusal    every problem of this host with a valid plan (files, paths, ports, secrets, cores)
├── EngineError    the engine failed after it was started
└── ApiError       an appliance's control API could not be reached, refused, or answered nonsense
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "ApiError",
    "ApplianceError",
    "ConfigError",
    "EngineError",
    "HostRefusal",
    "LaunchError",
    "Problem",
    "Severity",
]

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    """One finding about a config: what is wrong, where, and what to do instead."""

    code: str
    key: str
    message: str
    fix: str = ""
    severity: Severity = "error"
    rule: str = ""
    """The plugin-state rule behind it (build/tt/plugin-states), when there is one."""
    change: tuple[str, ...] = ()
    """The overrides that carry out `fix`, as an operator would type them. Empty when no setting of this config
    can fix it: the fix then says what would (a record, another host, another plugin state)."""

    def render(self) -> str:
        """The one-line form the CLI prints."""
        text = f"{self.severity}[{self.code}] {self.key}: {self.message}"
        return f"{text}. {self.fix}" if self.fix else text


class ApplianceError(Exception):
    """Base of every error the appliance reports to an operator."""


class ConfigError(ApplianceError):
    """The config cannot be served; every problem found is listed, not just the first."""

    def __init__(self, problems: tuple[Problem, ...]) -> None:
        self.problems = problems
        super().__init__("\n".join(p.render() for p in problems))


class LaunchError(ApplianceError):
    """A valid plan cannot be started on this host."""


class HostRefusal(LaunchError):
    """A valid config this host cannot launch now; every problem found, each one line (exit 3, not 2)."""

    def __init__(self, problems: tuple[Problem, ...]) -> None:
        self.problems = problems
        super().__init__("\n".join(p.render() for p in problems))


class EngineError(ApplianceError):
    """The engine process failed after it was spawned."""


class ApiError(ApplianceError):
    """A control API call failed; the message names the appliance and the reason, on one line."""

    def __init__(self, appliance: str, reason: str, status: int | None = None) -> None:
        self.appliance = appliance
        self.reason = reason
        self.status = status
        """The HTTP status the appliance answered with; None when it was not reached."""
        super().__init__(f"{appliance}: {reason}")
