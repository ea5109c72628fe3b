"""Ports opened beyond this host: warnings validate gives before anything listens.

The appliance serves plain HTTP. Off loopback, the engine's OpenAI port should require an API key
and the control API's bearer token travels in the clear; TLS belongs to whatever fronts the host
(an ingress, a TLS-terminating balancer such as `appliance gateway`'s HAProxy, or an SSH tunnel).
"""

from __future__ import annotations

import ipaddress

from appliance.config.schema import ApplianceConfig
from appliance.errors import Problem

__all__ = ["check_exposure"]


def check_exposure(cfg: ApplianceConfig) -> list[Problem]:
    """Warnings for a non-loopback engine port without an API key and a non-loopback control API."""
    found = []
    if not _loopback(cfg.serving.host) and not cfg.serving.api_key_env:
        found.append(
            Problem(
                code="open-without-api-key",
                key="serving.host",
                message=f"the OpenAI API binds {cfg.serving.host} with no API key: "
                "anyone who reaches the port can use the model",
                fix="Set serving.api_key_env=<VAR> (the key stays in that variable), "
                "or bind 127.0.0.1 behind a balancer",
                severity="warning",
            )
        )
    if not _loopback(cfg.control.host) and cfg.control.tls is None:
        found.append(
            Problem(
                code="control-plain-http",
                key="control.host",
                message=f"the control API binds {cfg.control.host}: "
                "its bearer token and drain/restart travel as plain HTTP",
                fix="Set control.tls (cert_file, key_file, ca_file), or keep control.host=127.0.0.1",
                severity="warning",
            )
        )
    return found


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere
