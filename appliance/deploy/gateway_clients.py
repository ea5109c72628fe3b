"""The site endpoint's clients: API keys read from their files, and the rules that hold each to its limits.

A key travels by file only (`gateway.clients.<name>.key_file`, owner-only): it is read at start and written into one
HAProxy map (key -> client name) in the gateway's run folder, mode 0600. Nothing else (the config, the
rendered haproxy.cfg, a message) ever holds it: the rules name clients, never keys. HAProxy looks the bearer
token up in that map (configuration manual 7.3.1, `map`) and tracks the client's name in a stick table
(4.2 `stick-table`, `http-request track-sc0`) whose `http_req_rate` and `conn_cur` hold each client to its rate
and concurrency (7.3.3 `sc_http_req_rate`, `sc_conn_cur`).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from appliance.config.schema import GatewayClient
from appliance.deploy.gateway_answers import Answer, return_line
from appliance.errors import ConfigError, Problem

__all__ = [
    "KEYS_MAP",
    "ClientKey",
    "check_client_name",
    "client_classes",
    "client_rules",
    "client_table",
    "keys_map",
    "read_client_keys",
]

KEYS_MAP = "keys.map"
_TABLE = "clients"
_CLIENT_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")  # written into ACL patterns and the stick table's keys


@dataclass(frozen=True, slots=True)
class ClientKey:
    """One client: its name, its limits, and its key (never shown)."""

    name: str
    limits: GatewayClient
    key: str = field(repr=False)


def read_client_keys(clients: Mapping[str, GatewayClient]) -> tuple[ClientKey, ...]:
    """Each client's key from its file; ConfigError naming the key (`gateway.clients.<name>.key_file`) and the
    file, never its content, when a file is unreadable, open to others, empty, or shared with another client."""
    read = tuple(ClientKey(name, limits, _read_key(name, Path(limits.key_file))) for name, limits in clients.items())
    seen: dict[str, str] = {}
    for client in read:
        if client.key in seen:
            _refuse(
                client.name, f"holds the same key as client {seen[client.key]}", "Give each client a key of its own"
            )
        seen[client.key] = client.name
    return read


def keys_map(clients: tuple[ClientKey, ...]) -> str:
    """The HAProxy map: one `<key> <client>` line each."""
    return "".join(f"{c.key} {c.name}\n" for c in clients)


def client_rules(clients: tuple[ClientKey, ...], folder: Path) -> list[str]:
    """The frontend's rules for clients: 401 without a listed key, 429 past a client's rate or concurrency."""
    if not clients:
        return []
    unknown = Answer(401, "a valid API key is required (Authorization: Bearer <key>)", code="invalid_api_key")
    rate = Answer(
        429, "request rate limit of this API key reached", "rate_limit_error", code="rate_limit", retry_after_s=1
    )
    busy = Answer(
        429, "concurrent request limit of this API key reached", "rate_limit_error", code="rate_limit", retry_after_s=1
    )
    lines = [
        f"    http-request set-var(txn.client) http_auth_bearer,map({folder / KEYS_MAP})",
        return_line(unknown, "unless { var(txn.client) -m found }"),
        f"    http-request track-sc0 var(txn.client) table {_TABLE}",
    ]
    for c in clients:
        this = f"if {{ var(txn.client) -m str {c.name} }}"
        lines.append(f"    http-request set-var(txn.rate_limit) int({c.limits.rate_per_s}) {this}")
        lines.append(f"    http-request set-var(txn.concurrency_limit) int({c.limits.max_concurrency}) {this}")
    # sub() takes a variable (manual 7.3.1): each client's own limit, in one rule for all clients.
    lines.append(return_line(rate, "if { sc_http_req_rate(0),sub(txn.rate_limit) gt 0 }"))
    lines.append(return_line(busy, "if { sc_conn_cur(0),sub(txn.concurrency_limit) gt 0 }"))
    return lines


def client_table(clients: tuple[ClientKey, ...]) -> list[str]:
    """The stick table the clients are tracked in: a request rate over one second and requests in flight."""
    if not clients:
        return []
    return [
        "",
        f"backend {_TABLE}",
        f"    stick-table type string len 64 size {max(16, 2 * len(clients))} expire 60s "
        "store http_req_rate(1s),conn_cur",
    ]


def client_classes(clients: tuple[ClientKey, ...]) -> list[str]:
    """A client's own priority class, which wins over the header's."""
    return [
        f"    http-request set-var(txn.class) str({c.limits.priority}) if {{ var(txn.client) -m str {c.name} }}"
        for c in clients
        if c.limits.priority
    ]


def check_client_name(name: str) -> None:
    """ConfigError unless `name` can name the client in HAProxy's rules (and a file, a credential, a Secret's key)."""
    if not _CLIENT_NAME.fullmatch(name):
        _refuse(name, f"the client name {name!r} is not 1-64 letters, digits, . _ or -", "Rename the client")


def _read_key(name: str, path: Path) -> str:
    check_client_name(name)
    try:
        info = path.stat()
        text = path.read_text()
    except OSError as err:
        _refuse(name, f"{path}: cannot read it: {err.strerror}", f"Write the client's key into {path} (mode 0600)")
    if _open_to_others(info):
        mode = stat.S_IMODE(info.st_mode)
        _refuse(name, f"{path} is open to group or others (mode {mode:04o})", f"chmod 600 {path}")
    key = text.strip()
    if not key or any(ch.isspace() or not ch.isprintable() for ch in key):
        _refuse(name, f"{path} must hold one key: one line of printable characters without spaces", "Rewrite it")
    return key


def _open_to_others(info: os.stat_result) -> bool:
    """Whether a user other than the gateway's may read or change the key. One exception to owner-only: a root-owned
    file the gateway's own group may only read, which is how kubelet mounts a Secret for the pod's fsGroup (0440)."""
    mode = stat.S_IMODE(info.st_mode)
    mounted = info.st_uid == 0 != os.geteuid() and info.st_gid == os.getegid() and mode & 0o077 == 0o040
    return bool(mode & 0o077) and not mounted


def _refuse(name: str, message: str, fix: str) -> NoReturn:
    key = f"gateway.clients.{name}.key_file"
    raise ConfigError((Problem(code="gateway-client", key=key, message=message, fix=fix),))
