"""A pod's pinned checkpoint: what its `fetch-weights` init container reads and writes, and what the engine's
container reads of it.

The model store is a hostPath at the store's own path, so every pod on a node shares what the node holds and a
rollback's revision is still there; the init container writes it, the engine's container mounts it read-only. The
site's weights lock travels in a ConfigMap, read at render time where `--site-dir` is: every pod checks what it
fetched against the one lock instead of trusting what it first received. A token, where the site names a file for
it (`site.weights.token_file`), is the Secret's key named after `site.hf_token_env`, mounted at that path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.compat.validate import ValidatedConfig
from appliance.errors import ConfigError, Problem
from appliance.plan import LaunchPlan, weights_dirs
from appliance.weights.layout import lock_path

__all__ = ["FETCH_CONTAINER", "PodFetch", "lock_config_map", "pod_fetch", "weights_mounts", "weights_volumes"]

FETCH_CONTAINER = "fetch-weights"
_LOCK_KEY, _TOKEN_KEY = "lock.json", "token"


@dataclass(frozen=True, slots=True)
class PodFetch:
    """What the pod's weights fetch reads and writes, at the pod's paths."""

    store: str
    locks_dir: str
    lock_item: str
    """The lock's path under `locks_dir`."""
    lock: str
    """The site's weights lock, as its file holds it."""
    token_env: str
    """The Secret's key holding the token (named after its variable)."""
    token_file: str | None
    mirror_dir: str | None
    """A mirror that is a mounted folder on the nodes."""


def pod_fetch(validated: ValidatedConfig, plan: LaunchPlan) -> PodFetch | None:
    """The pod's fetch of `plan`'s pinned checkpoint (None: nothing pinned); a ConfigError when the site has no lock
    for it."""
    from appliance.preflight.weights_check import recorded_lock
    from appliance.weights.source import FolderSource, open_source

    weights = plan.weights
    if weights is None:
        return None
    if recorded_lock(weights) is None:
        raise ConfigError(
            (
                Problem(
                    code="weights-lock-missing",
                    key="model.revision",
                    message=f"{weights.checkpoint}@"
                    f"{weights.revision}: no weights lock at {weights.lock_file} to ship with the pods",
                    fix="Record it with `appliance fetch --site-dir <sites> ...` once, then render with "
                    "the same --site-dir",
                ),
            )
        )
    pod_locks = weights_dirs(validated.config, None)[1]  # the pod has no site directory
    source = open_source(weights.source)
    return PodFetch(
        store=weights.store,
        locks_dir=str(pod_locks),
        lock_item=str(lock_path(Path(), weights.checkpoint, weights.revision)),
        lock=Path(weights.lock_file).read_text(),
        token_env=weights.token_env,
        token_file=weights.token_file,
        mirror_dir=source.location if isinstance(source, FolderSource) else None,
    )


def lock_config_map(name: str, fetch: PodFetch, meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-weights-lock", **meta},
        "data": {_LOCK_KEY: fetch.lock},
    }


def weights_mounts(fetch: PodFetch, *, fetching: bool) -> list[dict[str, Any]]:
    """The store (written only by the fetch) and the lock; the fetch's token and mounted mirror."""
    mounts = [
        {"name": "weights", "mountPath": fetch.store, "readOnly": not fetching},
        {"name": "weights-lock", "mountPath": fetch.locks_dir, "readOnly": True},
    ]
    if fetching and fetch.token_file is not None:
        mounts.append({"name": "weights-token", "mountPath": fetch.token_file, "subPath": _TOKEN_KEY, "readOnly": True})
    if fetching and fetch.mirror_dir is not None:
        mounts.append({"name": "weights-mirror", "mountPath": fetch.mirror_dir, "readOnly": True})
    return mounts


def weights_volumes(name: str, fetch: PodFetch) -> list[dict[str, Any]]:
    """The node's model store (it must exist, writable by uid 10001, as the cache's directory), the site's lock, the
    token (0400, like the other secrets) and a mounted mirror."""
    volumes: list[dict[str, Any]] = [
        {"name": "weights", "hostPath": {"path": fetch.store, "type": "Directory"}},
        {
            "name": "weights-lock",
            "configMap": {"name": f"{name}-weights-lock", "items": [{"key": _LOCK_KEY, "path": fetch.lock_item}]},
        },
    ]
    if fetch.token_file is not None:
        item = {"key": fetch.token_env, "path": _TOKEN_KEY}
        volumes.append(
            {
                "name": "weights-token",
                "secret": {"secretName": f"{name}-secrets", "items": [item], "defaultMode": 0o400},
            }
        )
    if fetch.mirror_dir is not None:
        volumes.append({"name": "weights-mirror", "hostPath": {"path": fetch.mirror_dir, "type": "Directory"}})
    return volumes
