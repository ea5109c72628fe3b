"""What the site renders (Ansible, Prometheus) read of one appliance of a site file.

`appliance.control.site_file.SiteEntry` is one; deploy and control are sibling layers, so the renders take this
shape instead of importing it.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Appliance"]


class Appliance(Protocol):
    """An appliance of the site file: its name, its control API's URL, the variable naming its token, its CA, and
    the tt-telemetry exporter of its host."""

    @property
    def name(self) -> str: ...
    @property
    def url(self) -> str: ...
    @property
    def token_env(self) -> str: ...
    @property
    def ca_file(self) -> str | None: ...
    @property
    def tt_telemetry(self) -> str | None: ...
