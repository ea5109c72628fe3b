"""Upstream vLLM releases, from a list the fleet keeps or a package index, and a pin's lag behind them."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from packaging.version import InvalidVersion, Version
from pydantic import ConfigDict, TypeAdapter

from appliance.data_files import load_data_file
from appliance.errors import ConfigError, EngineError, Problem
from appliance.resources import build_dir

__all__ = ["PYPI_VLLM", "RELEASES_FILE", "Lag", "Release", "ReleaseList", "index_releases", "lag", "load_releases"]

RELEASES_FILE = build_dir() / "vllm-releases.yaml"
PYPI_VLLM = "https://pypi.org/pypi/vllm/json"


@dataclass(frozen=True, slots=True)
class Release:
    __pydantic_config__ = ConfigDict(extra="forbid")

    version: str
    date: dt.date | None = None


@dataclass(frozen=True, slots=True)
class ReleaseList:
    __pydantic_config__ = ConfigDict(extra="forbid")

    source: str
    releases: tuple[Release, ...]

    def newest(self) -> Release:
        return max(self.releases, key=lambda r: Version(r.version))

    def find(self, version: str) -> Release | None:
        return next((r for r in self.releases if Version(r.version) == Version(version)), None)


@dataclass(frozen=True, slots=True)
class Lag:
    pinned: str
    newest: Release
    minor_versions: int
    """Minor release lines newer than the pin's (0.26 behind 0.28.0: 2)."""
    days: int | None
    """Days between the pinned release and the newest one; None when a date is unknown."""


_FILE: TypeAdapter[ReleaseList] = TypeAdapter(ReleaseList)


def load_releases(path: Path = RELEASES_FILE) -> ReleaseList:
    """The fleet's release list (YAML: source, releases: [{version, date}]); ConfigError naming the file."""
    releases = load_data_file(path, _FILE, "releases", "release list")
    if not releases.releases:
        raise ConfigError((Problem(code="releases-invalid", key=str(path), message="lists no release"),))
    try:
        releases.newest()  # every version must parse
    except InvalidVersion as err:
        raise ConfigError((Problem(code="releases-invalid", key=str(path), message=str(err)),)) from None
    return releases


def index_releases(url: str = PYPI_VLLM, timeout_s: float = 10.0) -> ReleaseList:
    """Final, unyanked releases and their first upload dates from a PyPI-style JSON API."""
    try:
        reply = httpx.get(url, timeout=timeout_s, follow_redirects=True)
        reply.raise_for_status()
        document: dict[str, Any] = reply.json()
    except (httpx.HTTPError, ValueError) as err:
        raise EngineError(f"package index {url} unreachable: {err}") from None
    found = []
    for version, files in document.get("releases", {}).items():
        live = [f for f in files if not f.get("yanked")]
        if not live or not _final(version):
            continue
        first = min(str(f.get("upload_time_iso_8601") or f.get("upload_time", "")) for f in live)
        found.append(Release(version, dt.date.fromisoformat(first[:10]) if first else None))
    if not found:
        raise EngineError(f"package index {url} lists no release")
    return ReleaseList(url, tuple(found))


def lag(pinned: str, releases: ReleaseList) -> Lag:
    """How far `pinned` (a version, local labels such as +empty ignored) trails the newest release."""
    pin = Version(Version(pinned).base_version)
    newest = releases.newest()
    lines = {Version(r.version).release[:2] for r in releases.releases if Version(r.version) > pin}
    lines.discard(pin.release[:2])
    own = releases.find(pin.base_version)
    days = (newest.date - own.date).days if own and own.date and newest.date else None
    return Lag(pinned, newest, len(lines), max(days, 0) if days is not None else None)


def _final(version: str) -> bool:
    try:
        parsed = Version(version)
    except InvalidVersion:
        return False
    return not (parsed.is_prerelease or parsed.is_devrelease)
