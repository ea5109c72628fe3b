"""Kubernetes manifests for one validated config: `appliance serve` in a Deployment.

Tenstorrent boards come through Dynamic Resource Allocation (a ResourceClaimTemplate for the
`tenstorrent.com` device class, counted and selected by board name from the mesh), as the TIS
chart v0.2 does, so the pod needs neither privileged mode nor a /dev/tenstorrent hostPath. The
resolved config travels in a ConfigMap read as the host-local layer; secrets are Secret refs.
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
from appliance.plan import LaunchPlan, build_plan

__all__ = ["DEVICE_CLASS", "POD_OVERRIDES", "K8sManifests", "render_k8s"]

DEVICE_CLASS = "tenstorrent.com"
CONFIG_FILE = "/etc/tt-appliance/config.yaml"
CACHE_DIR = "/var/lib/tt-appliance/cache"
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
        """One file per document, named after its kind."""
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        for doc in self.documents:
            path = out / f"{doc['kind'].lower()}.yaml"
            path.write_text(yaml.dump(doc, Dumper=_Dumper, sort_keys=False))
            paths.append(path)
        return tuple(paths)


def render_k8s(validated: ValidatedConfig, *, image: str, name: str | None = None) -> K8sManifests:
    """ConfigMap, ResourceClaimTemplate (tt), Deployment and Service for a config."""
    plan = build_plan(validated)
    name = name or _dns_name(f"tt-appliance-{plan.site}")
    meta = _meta(name, plan)
    docs: list[Mapping[str, Any]] = [_config_map(name, validated, meta)]
    if plan.engine == "tt":
        docs.append(_claim_template(name, validated, meta))
    docs += [_deployment(name, plan, image, meta), _service(name, plan, meta)]
    return K8sManifests(name, tuple(docs))


def _dns_name(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63].rstrip("-")


def _meta(name: str, plan: LaunchPlan) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": "tt-appliance", "app.kubernetes.io/instance": name}
    return {"labels": labels, "annotations": {"tt-appliance/config-hash": plan.config_hash}}


def _config_map(name: str, validated: ValidatedConfig, meta: dict[str, Any]) -> dict[str, Any]:
    resolved = yaml.safe_dump(to_jsonable_python(validated.config, fallback=dict), sort_keys=True)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-config", **meta},
            "data": {Path(CONFIG_FILE).name: "# @package _global_\n" + resolved}}  # fmt: skip


def _claim_template(name: str, validated: ValidatedConfig, meta: dict[str, Any]) -> dict[str, Any]:
    mesh = validated.config.mesh
    request = {
        "deviceClassName": DEVICE_CLASS,
        "allocationMode": "ExactCount",
        "count": mesh.devices or mesh.boards,
        "selectors": [{"cel": {"expression": f'device.attributes["{DEVICE_CLASS}"].boardName == "{mesh.board_name}"'}}],
    }
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": f"{name}-boards", **meta},
            "spec": {"spec": {"devices": {"requests": [{"name": "boards", "exactly": request}]}}}}  # fmt: skip


def _deployment(name: str, plan: LaunchPlan, image: str, meta: dict[str, Any]) -> dict[str, Any]:
    tt, sup = plan.engine == "tt", plan.supervisor
    pod: dict[str, Any] = {
        "containers": [_container(name, plan, image)],
        "volumes": _volumes(name, tt),
        # Out of rotation (deregister_s), the drain (shutdown_timeout_s) and the group kill (stop_grace_s),
        # with room for the appliance's exit.
        "terminationGracePeriodSeconds": int(sup.deregister_s + sup.shutdown_timeout_s + sup.stop_grace_s) + 15,
    }
    if tt:
        pod |= {"hostIPC": True, "resourceClaims": [{"name": "boards", "resourceClaimTemplateName": f"{name}-boards"}]}
    selector = {"app.kubernetes.io/instance": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, **meta},
        # Devices are exclusive: a surge pod would wait for boards the old pod still holds.
        "spec": {"replicas": 1, "strategy": {"type": "Recreate"}, "selector": {"matchLabels": selector},
                 "template": {"metadata": meta, "spec": pod}},
    }  # fmt: skip


def _container(name: str, plan: LaunchPlan, image: str) -> dict[str, Any]:
    tt = plan.engine == "tt"
    choices = [f"{g}={plan.choices[g]}" for g in GROUPS if g != "site" and g in plan.choices]
    resources: dict[str, Any] = {"requests": {"memory": _MEMORY[plan.engine]}}
    if tt:
        # Kubernetes requires hugepage requests and limits to be equal.
        resources["requests"]["hugepages-1Gi"] = _HUGEPAGES
        resources |= {"limits": {"hugepages-1Gi": _HUGEPAGES}, "claims": [{"name": "boards"}]}
    mounts = [{"name": "config", "mountPath": str(Path(CONFIG_FILE).parent), "readOnly": True},
              {"name": "cache", "mountPath": CACHE_DIR}, {"name": "state", "mountPath": "/run/tt-appliance"},
              {"name": "logs", "mountPath": "/var/log/tt-appliance"}]  # fmt: skip
    if tt:
        mounts.append({"name": "hugepages", "mountPath": "/dev/hugepages-1G"})
    return {
        "name": "appliance",
        "image": image,
        "command": ["appliance", "serve", *choices],
        "env": [{"name": "APPLIANCE_HOST_FILE", "value": CONFIG_FILE}, *_secret_env(name, plan)],
        "ports": [
            {"name": "openai", "containerPort": plan.port},
            {"name": "control", "containerPort": plan.control.port},
        ],
        "resources": resources,
        "volumeMounts": mounts,
        **_probes(plan),
        # The drain runs before the kubelet's SIGTERM: readiness turns 503, endpoints drop the pod,
        # in-flight requests finish; SIGTERM then finds the engine stopped.
        "lifecycle": {"preStop": {"exec": {"command": _drain_command(plan)}}},
    }


def _secret_env(name: str, plan: LaunchPlan) -> list[dict[str, Any]]:
    """Secret refs only: the key in `<name>-secrets` is the variable's own name."""
    wanted = {
        plan.control.token_env: False,
        **{source: target == "HF_TOKEN" for target, source in plan.secret_env.items()},
    }
    return [{"name": var, "valueFrom": {"secretKeyRef": {"name": f"{name}-secrets", "key": var, "optional": optional}}}
            for var, optional in wanted.items()]  # fmt: skip


def _drain_command(plan: LaunchPlan) -> list[str]:
    sup = plan.supervisor
    url = f"http://127.0.0.1:{plan.control.port}"
    wait = int(sup.deregister_s + sup.shutdown_timeout_s + sup.stop_grace_s)
    return ["appliance", "drain", "--url", url, "--token-env", plan.control.token_env, "--wait", str(wait)]


def _probes(plan: LaunchPlan) -> dict[str, Any]:
    """Startup covers the readiness budget (an hour of tensor-cache builds on TT); liveness is the appliance."""

    def probe(path: str, port: str, failures: int, period: int = _PROBE_PERIOD_S) -> dict[str, Any]:
        return {"httpGet": {"path": path, "port": port}, "periodSeconds": period, "timeoutSeconds": 5,
                "failureThreshold": failures}  # fmt: skip

    return {
        "startupProbe": probe("/health", "openai", math.ceil(plan.ready_timeout_s / _PROBE_PERIOD_S)),
        # /readyz is 503 from the moment a drain begins, while the engine still serves for deregister_s.
        "readinessProbe": probe("/readyz", "control", 1, READINESS_PERIOD_S),
        "livenessProbe": probe("/livez", "control", 3),
    }


def _volumes(name: str, tt: bool) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": f"{name}-config"}},
        # Tensor caches take up to an hour to build: keep them on the node across pod restarts.
        {"name": "cache", "hostPath": {"path": f"/var/lib/tt-appliance/{name}", "type": "DirectoryOrCreate"}},
        {"name": "state", "emptyDir": {}},
        {"name": "logs", "emptyDir": {}},
    ]
    if tt:
        volumes.append({"name": "hugepages", "emptyDir": {"medium": "HugePages-1Gi"}})
    return volumes


def _service(name: str, plan: LaunchPlan, meta: dict[str, Any]) -> dict[str, Any]:
    ports = [{"name": "openai", "port": plan.port, "targetPort": "openai"},
             {"name": "control", "port": plan.control.port, "targetPort": "control"}]  # fmt: skip
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, **meta},
            "spec": {"selector": {"app.kubernetes.io/instance": name}, "ports": ports}}  # fmt: skip
