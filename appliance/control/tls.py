"""TLS for the control API: what the server is given and what clients verify with (preflight/tls_files.py judges
the server's files before anything binds).

Off by default (`control.tls: null`): on one host the API stays on loopback with plain HTTP and a bearer token.
Across hosts (the fleet console, the gateway's health checks, a Kubernetes preStop hook) the token would travel
in the clear, so `control.tls` serves the same API over TLS from the same server.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

from appliance.config.schema import ControlTls

__all__ = ["client_context", "uvicorn_tls"]


def uvicorn_tls(tls: ControlTls | None) -> Mapping[str, Any]:
    """The uvicorn.Config arguments that serve the control API over TLS (none for plain HTTP)."""
    return {} if tls is None else {"ssl_certfile": tls.cert_file, "ssl_keyfile": tls.key_file}


def client_context(ca_file: str | None) -> ssl.SSLContext | None:
    """What a client verifies an https control API with: `ca_file`, else the system's trust store (None)."""
    return None if ca_file is None else ssl.create_default_context(cafile=ca_file)
