"""Where a vision engine may fetch images from: the site's media policy, as the plan sets it.

vLLM fetches an `image_url` itself. Left to its defaults (vLLM 0.32, vllm/multimodal/media/connector.py and
vllm/envs.py) it fetches any http(s) host, follows redirects, retries and downloads up to 256 MB per item, so a
client of the OpenAI port could make the serving host reach addresses only it can reach. The plan closes that with
vLLM's own options (an empty `--allowed-media-domains` means "any host" to vLLM, so the list is passed only when
the site names hosts) and routes every fetch through the appliance's media gate (runtime/media_gate.py), which
admits only the listed hosts at permitted addresses.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from appliance.errors import Problem

__all__ = [
    "DOWNLOAD_CAP_VAR",
    "MEDIA_GATE_VAR",
    "check_media_env",
    "NO_LOCAL_MEDIA",
    "MediaPolicy",
    "media_policy",
    "proxy_env",
]

MEDIA_GATE_VAR = "APPLIANCE_MEDIA_GATE_{port}"
"""The appliance's own variable naming the media gate of the engine on OpenAI port `port`, set by `serve` (and
`serve slots=`) before it spawns that engine."""
_CLOSED = "http://127.0.0.1:9"
"""The proxy of an engine started with no gate (a config probe): the discard port, nothing fetched."""
DOWNLOAD_CAP_VAR = "VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB"
_PROXY_VARS = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")
"""What aiohttp (trust_env=True) and requests read; the lower-case form wins in urllib's getproxies."""
_NO_PROXY_VARS = ("no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY")
_OWNED_ENV = {
    "VLLM_MEDIA_URL_ALLOW_REDIRECTS": "serving.media_redirects",
    DOWNLOAD_CAP_VAR: "serving.max_image_pixels",
    **dict.fromkeys((*_PROXY_VARS, *_NO_PROXY_VARS), "serving.allowed_media_domains"),
}

NO_LOCAL_MEDIA = "no-local-media"
"""The empty folder under the state directory the engine is given when the site names none: vLLM answers a
`file://` URL outside its folder with a 400, where it answers one without any folder with a 500."""

_MIB = 1 << 20
_RGBA_BYTES = 4


@dataclass(frozen=True, slots=True)
class MediaPolicy:
    """What a vision engine may fetch: the hosts, redirects, the download cap and the local folder."""

    allowed_hosts: tuple[str, ...]
    redirects: bool
    max_download_mb: int
    """The largest image the processor keeps, uncompressed RGBA, plus 1 MiB of headers: no honest encoding of an
    image the plan serves is larger (VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB)."""
    local_dir: str
    """The one folder `file://` URLs may name (the site's, or the appliance's empty one)."""
    site_local_dir: bool
    """local_dir is the site's serving.local_media_dir, not the appliance's empty folder."""
    engine_caps: bool = True
    """The engine's vLLM reads VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB (0.32 does, 0.26.0 does not: the gate's cap is
    then the only one)."""

    def line(self) -> str:
        hosts = (
            f"remote URLs from {', '.join(self.allowed_hosts)} only, through the appliance's media gate"
            f"{', redirects followed and checked' if self.redirects else ', no redirects'}"
            if self.allowed_hosts
            else "remote URLs refused (serving.allowed_media_domains is empty)"
        )
        local = f"file:// under {self.local_dir} only" if self.site_local_dir else "no local files"
        return f"media: inline data: URLs; {hosts}; {local}; at most {self.max_download_mb} MB per image"

    def engine_env(self) -> dict[str, str]:
        """vLLM's media variables (vllm/envs.py): redirects as the site allows, the download cap; no proxy bypass
        (an operator's NO_PROXY=127.0.0.1 would let a URL past the gate)."""
        env = {"VLLM_MEDIA_URL_ALLOW_REDIRECTS": "1" if self.redirects else "0"}
        if self.engine_caps:
            env[DOWNLOAD_CAP_VAR] = str(self.max_download_mb)
        return env | dict.fromkeys(_NO_PROXY_VARS, "")

    def expected(self) -> dict[str, object]:
        """What the engine's config code and environment should settle on (the probe's keys)."""
        expected: dict[str, object] = {
            "allowed_media_domains": list(self.allowed_hosts) or None,
            "allowed_local_media_path": self.local_dir,
            "media_url_allow_redirects": self.redirects,
        }
        if self.engine_caps:
            expected["max_media_download_size_mb"] = self.max_download_mb
        return expected


def check_media_env(env: Mapping[str, str]) -> Iterator[Problem]:
    """engine.env may not loosen the media policy: the plan sets these variables from serving.*."""
    for name in env:
        if name in _OWNED_ENV:
            yield Problem(
                code="env-owned-by-config",
                key=f"engine.env.{name}",
                message=f"{name} is set from {_OWNED_ENV[name]}",
                fix=f"Remove engine.env.{name} and set {_OWNED_ENV[name]} instead",
                change=(f"~engine.env.{name}",),
            )


def proxy_env(port: int, base: Mapping[str, str]) -> dict[str, str]:
    """Every HTTP(S) fetch of the engine on `port` through its media gate, as `base` names it (none named: a config
    probe, which fetches nothing: through a closed port)."""
    return dict.fromkeys(_PROXY_VARS, base.get(MEDIA_GATE_VAR.format(port=port), _CLOSED))


def media_policy(
    hosts: tuple[str, ...],
    redirects: bool,
    local_dir: str | None,
    largest_pixels: int,
    state_dir: str,
    engine_caps: bool,
) -> MediaPolicy:
    """The policy for a vision plan whose largest kept image has `largest_pixels`."""
    folder = Path(local_dir).expanduser().resolve() if local_dir else Path(state_dir) / NO_LOCAL_MEDIA
    return MediaPolicy(
        allowed_hosts=hosts,
        redirects=redirects,
        max_download_mb=math.ceil((largest_pixels * _RGBA_BYTES + _MIB) / _MIB),
        local_dir=str(folder),
        site_local_dir=local_dir is not None,
        engine_caps=engine_caps,
    )
