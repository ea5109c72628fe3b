"""A systemd unit for one config: `appliance serve` as a Type=notify service.

`serve` reports READY=1 once the engine answers, STATUS= on every lifecycle change and
STOPPING=1 when it begins to drain (appliance/notify.py), so `systemctl start` returns only when
the engine can serve and the start timeout is the config's readiness budget.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from appliance.plan import LaunchPlan

__all__ = ["SystemdUnit", "render_systemd"]

_BOOT_MARGIN_S = 300  # imports, host checks and generating the embedded model before the budget starts


@dataclass(frozen=True, slots=True)
class SystemdUnit:
    name: str
    """File name, e.g. tt-appliance-lab-t3k.service."""
    text: str
    env_file: str
    """Where the secrets go (0600, never in the unit): the control token, the hub token, the API key."""


def render_systemd(
    plan: LaunchPlan,
    overrides: Sequence[str],
    *,
    appliance: str,
    site_dir: Path | None = None,
    title: tuple[str, str] | None = None,
) -> SystemdUnit:
    """The unit file that runs `appliance serve overrides...` for `plan`'s config.

    `title` (name suffix, description) names a unit serving several slots instead of `plan`'s model.
    """
    suffix, description = title or ("", f"{plan.checkpoint} on {plan.mesh} (site {plan.site})")
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"tt-appliance-{plan.site}" + (f"-{suffix}" if suffix else ""))
    env_file = f"/etc/tt-appliance/{stem}.env"
    argv = [appliance, "serve", *overrides, *(["--site-dir", str(site_dir)] if site_dir else [])]
    secrets = sorted({plan.control.token_env, *plan.secret_env.values()})
    sup = plan.supervisor
    sections = {
        "Unit": [
            ("Description", f"TT serving appliance: {description}"),
            ("After", "network-online.target"),
            ("Wants", "network-online.target"),
        ],
        "Service": [
            ("Type", "notify"),
            ("NotifyAccess", "main"),  # the engine's workers must not speak for the service
            ("ExecStart", _escape(shlex.join(argv))),
            ("EnvironmentFile", f"-{env_file}"),
            ("TimeoutStartSec", str(math.ceil(plan.ready_timeout_s) + _BOOT_MARGIN_S)),
            ("TimeoutStopSec", str(math.ceil(sup.shutdown_timeout_s + sup.stop_grace_s) + 30)),
            # SIGTERM to the appliance only: it drains the engine and then kills the engine's group itself.
            ("KillMode", "mixed"),
            ("SuccessExitStatus", "143"),
            ("Restart", "on-failure"),
            ("RestartSec", "10"),
        ],
        "Install": [("WantedBy", "multi-user.target")],
    }
    lines = [f"# config {plan.config_hash}; secrets ({', '.join(secrets)}) go in {env_file} (mode 0600)"]
    for section, entries in sections.items():
        lines += ["", f"[{section}]", *(f"{key}={value}" for key, value in entries)]
    return SystemdUnit(f"{stem}.service", "\n".join(lines) + "\n", env_file)


def _escape(command: str) -> str:
    """systemd expands % specifiers and $VARS in ExecStart; the command means them literally."""
    return command.replace("%", "%%").replace("$", "$$")
