"""Values that are each in range but cannot work together, checked on every composition.

Single-value ranges live in the schema's types; these relate two keys, so a config that would only
fail at `serve` (two listeners on one port, a restart delay above its cap) is refused at `validate`.
"""

from __future__ import annotations

from appliance.config.schema import ApplianceConfig, GatewayConfig
from appliance.errors import Problem

__all__ = ["check_constraints"]

_ANY = ("0.0.0.0", "::", "")


def check_constraints(cfg: ApplianceConfig) -> list[Problem]:
    """Every relation between keys that does not hold, each naming the keys involved."""
    s, c, sup = cfg.serving, cfg.control, cfg.supervisor
    shared_address = s.host == c.host or bool({s.host, c.host} & set(_ANY))
    found = []
    if s.port == c.port and shared_address:
        found.append(
            Problem(
                code="port-collision",
                key="control.port",
                message=f"serving.port and control.port are both {s.port}",
                fix="Give the engine and the control API different ports",
            )
        )
    if sup.backoff_initial_s > sup.backoff_max_s:
        found.append(
            _above("supervisor.backoff_initial_s", sup.backoff_initial_s, "supervisor.backoff_max_s", sup.backoff_max_s)
        )
    if sup.hang_timeout_s < sup.health_interval_s:
        found.append(
            Problem(
                code="bad-value",
                key="supervisor.hang_timeout_s",
                message=f"{sup.hang_timeout_s} is below supervisor.health_interval_s ({sup.health_interval_s})",
                fix="A hang needs one missed probe: set hang_timeout_s >= health_interval_s",
            )
        )
    for name in ("prompt_tokens", "output_tokens"):
        dist = getattr(cfg.workload, name)
        if dist.min > dist.max:
            found.append(_above(f"workload.{name}.min", dist.min, f"workload.{name}.max", dist.max))
    for name in ("per_request", "sizes"):
        if not getattr(cfg.workload.images, name):
            found.append(
                Problem(
                    code="bad-value",
                    key=f"workload.images.{name}",
                    message="is an empty list",
                    fix=f"Give workload.images.{name} at least one entry",
                )
            )
    return found + _gateway_classes(cfg.gateway)


def _gateway_classes(gateway: GatewayConfig) -> list[Problem]:
    """Every class the gateway config names must be one of gateway.classes, listed once."""
    listed = ", ".join(gateway.classes)
    named = [("gateway.default_class", gateway.default_class)]
    named += [(f"gateway.sheddable[{i}]", name) for i, name in enumerate(gateway.sheddable)]
    named += [(f"gateway.clients.{c}.priority", k.priority) for c, k in gateway.clients.items() if k.priority]
    found = [
        Problem(
            code="bad-value",
            key=key,
            message=f"{name!r} is not a class of gateway.classes ({listed})",
            fix="Name one of gateway.classes, or add it there",
        )
        for key, name in named
        if name not in gateway.classes
    ]
    if not gateway.classes or len(set(gateway.classes)) != len(gateway.classes):
        found.append(
            Problem(
                code="bad-value",
                key="gateway.classes",
                message=f"[{listed}] must list at least one class, each once",
                fix="List the classes in the order they are admitted, highest first",
            )
        )
    return found


def _above(key: str, value: float, limit_key: str, limit: float) -> Problem:
    return Problem(
        code="bad-value", key=key, message=f"{value} is above {limit_key} ({limit})", fix=f"Set {key} <= {limit_key}"
    )
