"""Kubernetes manifests for one validated config: `appliance serve` in a Deployment.

Tenstorrent boards come through Dynamic Resource Allocation (a ResourceClaimTemplate for the
`tenstorrent.com` device class, counted and selected by board name from the mesh), as the TIS
chart v0.2 does, so the pod needs neither privileged mode nor a /dev/tenstorrent hostPath. The
resolved config travels in a ConfigMap read as the host-local layer; the Secret is mounted as files
that `serve` reads through APPLIANCE_SECRETS_DIR. Every manifest goes in `site.namespace`; what the
pod may do and who may reach it is in `k8s_policy`.

A pinned checkpoint (`model.revision`) is fetched by an init container, `fetch-weights` (`appliance fetch`), into
the node's model store and verified against the site's weights lock (`k8s_weights`): the engine's container starts
only once the weights are there.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic_core import to_jsonable_python

from appliance.compat.validate import ValidatedConfig
from appliance.config.compose import GROUPS
from appliance.deploy import k8s_policy
from appliance.deploy.k8s_weights import (
    FETCH_CONTAINER,
    PodFetch,
    lock_config_map,
    pod_fetch,
    weights_mounts,
    weights_volumes,
)
from appliance.plan import LaunchPlan, build_plan

__all__ = ["DEVICE_CLASS", "POD_OVERRIDES", "SECRETS_DIR", "K8sManifests", "dns_name", "render_k8s"]

DEVICE_CLASS = "tenstorrent.com"
CONFIG_FILE = "/etc/tt-appliance/config.yaml"
GATES_FILE = "/etc/tt-appliance/gates/gates.yaml"
_GATES_BUDGET_S = 600  # the eval and the workload run, twice their defaults' time on a loaded host
CACHE_DIR = "/var/lib/tt-appliance/cache"
SECRETS_DIR = "/run/secrets/tt-appliance"
# Applied before the operator's overrides: the pod listens on its own IP and keeps state in volumes.
POD_OVERRIDES = (
    "serving.host=0.0.0.0",
    "control.host=0.0.0.0",
    f"paths.cache_dir={CACHE_DIR}",
    "paths.state_dir=/run/tt-appliance",
    "paths.log_dir=/var/log/tt-appliance",
)
_PROBE_PERIOD_S = 10
READINESS_PERIOD_S = 2
"""Readiness is probed often: `supervisor.deregister_s` must cover one period plus endpoint propagation."""
_HUGEPAGES = "32Gi"  # what the TIS chart requests for every board shape
_MEMORY = {"cpu": "4Gi", "tt": "32Gi"}  # cpu: the tiny model's engine peaks near 3 GB (build/cpu/NOTES.md)
# CPU (request, limit): the limit well above the request, since CFS throttling stalls the engine's
# scheduler loop in bursts; tt: the host side of eight chips' dispatch, tokenizing and detokenizing.
_CPU = {"cpu": ("2", "4"), "tt": ("8", "32")}


class _Dumper(yaml.SafeDumper):
    """Plain YAML for kubectl: no anchors for shared label maps, the config file as a literal block."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_Dumper.add_representer(str, _represent_str)


@dataclass(frozen=True, slots=True)
class K8sManifests:
    name: str
    documents: tuple[Mapping[str, Any], ...]

    def yaml(self) -> str:
        return yaml.dump_all(self.documents, Dumper=_Dumper, sort_keys=False)

    def write(self, out: Path) -> tuple[Path, ...]:
        """One file per document, named after its kind (a second of a kind after its own name too:
        `configmap-gates.yaml`)."""
        out.mkdir(parents=True, exist_ok=True)
        paths: list[Path] = []
        for doc in self.documents:
            path = out / f"{doc['kind'].lower()}.yaml"
            if path in paths:
                path = path.with_stem(f"{path.stem}{doc['metadata']['name'].removeprefix(self.name)}")
            path.write_text(yaml.dump(doc, Dumper=_Dumper, sort_keys=False))
            paths.append(path)
        return tuple(paths)


def render_k8s(
    validated: ValidatedConfig, *, image: str, name: str | None = None, replicas: int = 1, gates: str | None = None
) -> K8sManifests:
    """ServiceAccount, ConfigMap, ResourceClaimTemplate (tt), Deployment, Service and NetworkPolicy, all in
    `site.namespace`; with `gates` (a gate file's text, `serve --gates`), their ConfigMap too: each new pod is
    ready only once it passed them, so a rollout waits on the gates and stalls at the first pod that fails one."""
    plan = build_plan(validated)
    name = name or dns_name(f"tt-appliance-{plan.site}")
    meta = {"namespace": validated.config.site.namespace, **_meta(name, plan)}
    docs: list[Mapping[str, Any]] = [k8s_policy.service_account(name, meta), _config_map(name, validated, meta)]
    if gates is not None:
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"{name}-gates", **meta},
                "data": {Path(GATES_FILE).name: gates},
            }
        )
    fetch = pod_fetch(validated, plan)
    if fetch is not None:
        docs.append(lock_config_map(name, fetch, meta))
    if plan.engine == "tt":
        docs.append(_claim_template(name, validated, meta))
    docs += [_deployment(name, plan, image, meta, replicas, gates is not None, fetch), _service(name, plan, meta)]
    docs.append(k8s_policy.network_policy(name, plan, meta))
    return K8sManifests(name, tuple(docs))


def dns_name(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63].rstrip("-")


def _meta(name: str, plan: LaunchPlan) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": "tt-appliance", "app.kubernetes.io/instance": name}
    return {"labels": labels, "annotations": {"tt-appliance/config-hash": plan.config_hash}}


def _config_map(name: str, validated: ValidatedConfig, meta: dict[str, Any]) -> dict[str, Any]:
    resolved = yaml.safe_dump(to_jsonable_python(validated.config, fallback=dict), sort_keys=True)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-config", **meta},
        "data": {Path(CONFIG_FILE).name: "# @package _global_\n" + resolved},
    }


def _claim_template(name: str, validated: ValidatedConfig, meta: dict[str, Any]) -> dict[str, Any]:
    mesh = validated.config.mesh
    request = {
        "deviceClassName": DEVICE_CLASS,
        "allocationMode": "ExactCount",
        "count": mesh.devices or mesh.boards,
        "selectors": [{"cel": {"expression": f'device.attributes["{DEVICE_CLASS}"].boardName == "{mesh.board_name}"'}}],
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": f"{name}-boards", **meta},
        "spec": {"spec": {"devices": {"requests": [{"name": "boards", "exactly": request}]}}},
    }


def _deployment(
    name: str, plan: LaunchPlan, image: str, meta: dict[str, Any], replicas: int, gated: bool, fetch: PodFetch | None
) -> dict[str, Any]:
    tt, sup = plan.engine == "tt", plan.supervisor
    pod: dict[str, Any] = {
        "serviceAccountName": name,
        "automountServiceAccountToken": False,
        "securityContext": k8s_policy.pod_security(),
        # The engine never starts before its weights are in the store and match the site's lock.
        **({"initContainers": [_fetch_container(plan, image, fetch)]} if fetch else {}),
        "containers": [_container(name, plan, image, gated, fetch)],
        "volumes": _volumes(name, plan, gated) + (weights_volumes(name, fetch) if fetch else []),
        # Out of rotation (deregister_s), the drain (shutdown_timeout_s) and the group kill (stop_grace_s),
        # with room for the appliance's exit.
        "terminationGracePeriodSeconds": int(sup.deregister_s + sup.shutdown_timeout_s + sup.stop_grace_s) + 15,
    }
    if tt:
        pod |= {"hostIPC": True, "resourceClaims": [{"name": "boards", "resourceClaimTemplateName": f"{name}-boards"}]}
    selector = {"app.kubernetes.io/instance": name}
    template = {"labels": meta["labels"], "annotations": meta["annotations"]}
    annotations = meta["annotations"] | k8s_policy.checkov_skips(image, boards=plan.engine == "tt")
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, **meta, "annotations": annotations},
        "spec": {
            "replicas": replicas,
            "strategy": _strategy(plan),
            "selector": {"matchLabels": selector},
            # A boot, the gates and the old pod's drain, with room: past it the rollout is marked failed.
            "progressDeadlineSeconds": int(plan.ready_timeout_s + _GATES_BUDGET_S + sup.shutdown_timeout_s) + 60,
            "template": {"metadata": template, "spec": pod},
        },
    }


def _strategy(plan: LaunchPlan) -> dict[str, Any]:
    """One pod at a time. Devices are exclusive: a tt pod can start only on boards an old pod gave back, so none
    surges (the old pod goes first); a cpu pod surges one and the old pod serves until the new one is ready."""
    one = {"maxSurge": 0, "maxUnavailable": 1} if plan.engine == "tt" else {"maxSurge": 1, "maxUnavailable": 0}
    return {"type": "RollingUpdate", "rollingUpdate": one}


def _container(name: str, plan: LaunchPlan, image: str, gated: bool, fetch: PodFetch | None) -> dict[str, Any]:
    tt = plan.engine == "tt"
    resources = _resources(plan, devices=tt)
    # The root filesystem is read-only: everything the appliance and the engine write is a volume.
    mounts = [
        {"name": "config", "mountPath": str(Path(CONFIG_FILE).parent), "readOnly": True},
        {"name": "secrets", "mountPath": SECRETS_DIR, "readOnly": True},
        {"name": "cache", "mountPath": CACHE_DIR},
        {"name": "state", "mountPath": "/run/tt-appliance"},
        {"name": "logs", "mountPath": "/var/log/tt-appliance"},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    if tt:
        mounts.append({"name": "hugepages", "mountPath": "/dev/hugepages-1G"})
    mounts += _tls_mounts(plan)
    if gated:
        mounts.append({"name": "gates", "mountPath": str(Path(GATES_FILE).parent), "readOnly": True})
    if fetch is not None:  # `serve` checks the store against the lock; the engine reads the store, never writes it
        mounts += weights_mounts(fetch, fetching=False)
    return {
        "name": "appliance",
        "image": image,
        # Each start asks the registry, so a node's cached copy is never run without the pull credentials.
        "imagePullPolicy": "Always",
        "command": ["appliance", "serve", *(["--gates", GATES_FILE] if gated else []), *_choices(plan)],
        "env": _env(secrets=True),
        "ports": [
            {"name": "openai", "containerPort": plan.port},
            {"name": "control", "containerPort": plan.control.port},
        ],
        "resources": resources,
        "securityContext": k8s_policy.container_security(),
        "volumeMounts": mounts,
        **_probes(plan),
        # The drain runs before the kubelet's SIGTERM: readiness turns 503, endpoints drop the pod,
        # in-flight requests finish; SIGTERM then finds the engine stopped.
        "lifecycle": {"preStop": {"exec": {"command": _drain_command(plan)}}},
    }


def _fetch_container(plan: LaunchPlan, image: str, fetch: PodFetch) -> dict[str, Any]:
    """`appliance fetch` of the pod's config into the node's store, hardened as the appliance's container."""
    # The cache as the appliance mounts it: the disk check reads whether the tensor cache is built (then it needs no
    # room beside the weights), and the default store's mount point lies inside it, where the runtime makes it.
    mounts = [
        {"name": "config", "mountPath": str(Path(CONFIG_FILE).parent), "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "cache", "mountPath": CACHE_DIR},
        *weights_mounts(fetch, fetching=True),
    ]
    return {
        "name": FETCH_CONTAINER,
        "image": image,
        "imagePullPolicy": "Always",
        "command": ["appliance", "fetch", *_choices(plan)],
        "env": _env(secrets=False),
        "resources": _resources(plan, devices=False),
        "securityContext": k8s_policy.container_security(),
        "volumeMounts": mounts,
    }


def _choices(plan: LaunchPlan) -> list[str]:
    """The group choices: the ConfigMap's host-local layer holds every value."""
    return [f"{g}={plan.choices[g]}" for g in GROUPS if g != "site" and g in plan.choices]


def _env(*, secrets: bool) -> list[dict[str, str]]:
    # HOME and USER for the engine's own caches (~/.cache) and getpass: uid 10001 has no passwd entry.
    env = {
        "APPLIANCE_HOST_FILE": CONFIG_FILE,
        **({"APPLIANCE_SECRETS_DIR": SECRETS_DIR} if secrets else {}),
        "HOME": "/tmp",
        "USER": "tt-appliance",
    }
    return [{"name": key, "value": value} for key, value in env.items()]


def _resources(plan: LaunchPlan, *, devices: bool) -> dict[str, Any]:
    cpu, memory = _cpu(plan), _MEMORY[plan.engine]
    resources: dict[str, Any] = {
        "requests": {"cpu": cpu[0], "memory": memory},
        "limits": {"cpu": cpu[1], "memory": memory},
    }
    if devices:
        # Kubernetes requires hugepage requests and limits to be equal.
        resources["requests"]["hugepages-1Gi"] = resources["limits"]["hugepages-1Gi"] = _HUGEPAGES
        resources["claims"] = [{"name": "boards"}]
    return resources


def _cpu(plan: LaunchPlan) -> tuple[str, str]:
    """(request, limit). Kubernetes weighs a container by its CPU request (`cpu.shares` = millicores x 1.024), so
    engine.host_share's weight is the request (10 -> 100m, the weight's 102 shares): Burstable, below the node's
    control plane and the pods that asked for more, with the limit kept for bursts."""
    request, limit = _CPU[plan.engine]
    share = plan.host_share
    return (f"{share.weight * 10}m" if share else request), limit


def _secret_volume(name: str, plan: LaunchPlan) -> dict[str, Any]:
    """`<name>-secrets` as files named after the variables (its keys): the control token and every
    secret the plan passes are required, the hub token optional (public checkpoints need none)."""
    wanted = {
        plan.control.token_env: False,
        **{source: target == "HF_TOKEN" for target, source in plan.secret_env.items()},
    }

    def source(optional: bool) -> dict[str, Any]:
        items = [{"key": var, "path": var} for var, opt in wanted.items() if opt is optional]
        return {"secret": {"name": f"{name}-secrets", "items": items, "optional": optional}}

    sources = [source(optional) for optional in (False, True) if optional in wanted.values()]
    # 0400 (256): kubelet adds group read for fsGroup, so the files are root:10001 0440.
    return {"name": "secrets", "projected": {"defaultMode": 0o400, "sources": sources}}


def _drain_command(plan: LaunchPlan) -> list[str]:
    sup = plan.supervisor
    url = f"{plan.control.scheme}://127.0.0.1:{plan.control.port}"
    wait = int(sup.deregister_s + sup.shutdown_timeout_s + sup.stop_grace_s)
    token = f"{SECRETS_DIR}/{plan.control.token_env}"
    tls = plan.control.tls
    verify = ["--ca-file", tls.ca_file] if tls is not None and tls.ca_file else []  # the hook verifies the API
    return ["appliance", "drain", "--url", url, "--token-file", token, *verify, "--wait", str(wait)]


def _probes(plan: LaunchPlan) -> dict[str, Any]:
    """Startup covers the readiness budget (an hour of tensor-cache builds on TT); liveness is the appliance."""

    def probe(path: str, port: str, failures: int, period: int = _PROBE_PERIOD_S) -> dict[str, Any]:
        # The kubelet speaks HTTPS to a TLS control port but verifies no certificate (Kubernetes probes never do);
        # the preStop hook does, with control.tls.ca_file.
        scheme = {"scheme": "HTTPS"} if port == "control" and plan.control.tls is not None else {}
        return {
            "httpGet": {"path": path, "port": port, **scheme},
            "periodSeconds": period,
            "timeoutSeconds": 5,
            "failureThreshold": failures,
        }

    return {
        "startupProbe": probe("/health", "openai", math.ceil(plan.ready_timeout_s / _PROBE_PERIOD_S)),
        # /readyz is 503 from the moment a drain begins, while the engine still serves for deregister_s.
        "readinessProbe": probe("/readyz", "control", 1, READINESS_PERIOD_S),
        "livenessProbe": probe("/livez", "control", 3),
    }


def _volumes(name: str, plan: LaunchPlan, gated: bool) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": f"{name}-config"}},
        _secret_volume(name, plan),
        # Tensor caches take up to an hour to build: keep them on the node across pod restarts. fsGroup
        # does not reach a hostPath and kubelet would create a missing one root-owned: the node's
        # directory must exist, writable by uid 10001 (docs: guides/builds-and-deployment.md).
        {"name": "cache", "hostPath": {"path": f"/var/lib/tt-appliance/{name}", "type": "Directory"}},
        {"name": "state", "emptyDir": {}},
        {"name": "logs", "emptyDir": {}},
        {"name": "tmp", "emptyDir": {}},
    ]
    if plan.engine == "tt":
        volumes.append({"name": "hugepages", "emptyDir": {"medium": "HugePages-1Gi"}})
    if gated:
        volumes.append({"name": "gates", "configMap": {"name": f"{name}-gates"}})
    if plan.control.tls is not None:
        # A kubernetes.io/tls Secret (tls.crt, tls.key; ca.crt for control.tls.ca_file), 0400 like the others.
        volumes.append({"name": "control-tls", "secret": {"secretName": f"{name}-control-tls", "defaultMode": 0o400}})
    return volumes


def _tls_mounts(plan: LaunchPlan) -> list[dict[str, Any]]:
    """`<name>-control-tls`'s files at the paths control.tls names (each file on its own: they may differ in dir)."""
    tls = plan.control.tls
    if tls is None:
        return []
    files = {"tls.crt": tls.cert_file, "tls.key": tls.key_file, **({"ca.crt": tls.ca_file} if tls.ca_file else {})}
    return [{"name": "control-tls", "mountPath": path, "subPath": key, "readOnly": True} for key, path in files.items()]


def _service(name: str, plan: LaunchPlan, meta: dict[str, Any]) -> dict[str, Any]:
    ports = [
        {"name": "openai", "port": plan.port, "targetPort": "openai"},
        {"name": "control", "port": plan.control.port, "targetPort": "control"},
    ]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, **meta},
        "spec": {"selector": {"app.kubernetes.io/instance": name}, "ports": ports},
    }
