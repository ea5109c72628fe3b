"""A site's appliances, as the console addresses them: the site file.

Site file, YAML: a list of appliances, each

    - name: lab-t3k-01                 # shown in the fleet view
      url: http://10.0.4.21:8100       # its control API
      token_env: LAB_T3K_01_TOKEN      # env var holding its control token (default APPLIANCE_TOKEN)
      ca_file: /etc/tt-appliance/ca.pem # verifies an https url (default: the system's trust store)
      tt_telemetry: http://10.0.4.21:8080/metrics  # its host's tt-telemetry exporter, where the site runs it

Tokens are named, never written in the file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ConfigDict, TypeAdapter, ValidationError

from appliance.control.client import Target
from appliance.data_files import parse_yaml
from appliance.errors import ConfigError, Problem

__all__ = ["SiteEntry", "load_site_file", "target"]


@dataclass(frozen=True, slots=True)
class SiteEntry:
    __pydantic_config__ = ConfigDict(extra="forbid")

    name: str
    url: str
    token_env: str = "APPLIANCE_TOKEN"
    ca_file: str | None = None
    tt_telemetry: str | None = None
    """The tt-telemetry exporter of the appliance's host: `render prometheus` scrapes it and alerts on its series."""


_SITE = TypeAdapter(list[SiteEntry])


def load_site_file(path: Path) -> tuple[SiteEntry, ...]:
    """The appliances a site file lists; ConfigError naming the file and key otherwise."""
    try:
        data = parse_yaml(path.read_text())
    except OSError as err:
        raise _site_error(path, "", f"cannot read it: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise _site_error(path, "", f"not valid YAML: {err}".splitlines()[0]) from None
    try:
        entries = tuple(_SITE.validate_python(data))
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise _site_error(path, where, first["msg"].lower()) from None
    if not entries:
        raise _site_error(path, "", "lists no appliances")
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise _site_error(path, "name", f"names must be unique, got {names}")
    return entries


def target(entry: SiteEntry, environ: Mapping[str, str] = os.environ) -> Target:
    """The entry as the client addresses it, its token read from the variable it names."""
    return Target(entry.name, entry.url.rstrip("/"), environ.get(entry.token_env, ""), entry.ca_file)


def _site_error(path: Path, key: str, message: str) -> ConfigError:
    fix = "Each entry needs name and url, and may set token_env (see `appliance console --help`)"
    return ConfigError((Problem(code="site-file", key=f"{path}{':' + key if key else ''}", message=message, fix=fix),))
