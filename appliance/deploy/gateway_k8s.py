"""Kubernetes manifests for a site's gateway: `appliance gateway` in a Deployment, with its Service and NetworkPolicy.

The site file and the resolved `gateway` section travel in a ConfigMap, the section read as the host-local layer (as
the appliance's config is). Secrets come by name, as read-only files: the control tokens the site file names
(token_env) from `<name>-secrets`, read through APPLIANCE_SECRETS_DIR, and each client's key from `<name>-clients`, at
the key_file the ConfigMap names. HAProxy's run folder (haproxy.cfg, the 0600 keys map) is a memory-backed emptyDir:
the root filesystem stays read-only and no key reaches the node's disk. The pod is hardened as the appliance's
(k8s_policy) and carries the labels the appliances' NetworkPolicies admit to their engine and control ports.

Admission is per gateway: each replica admits each engine's whole `max_concurrency`, so replicas above one admit
that many times more than the engines run (docs: Traffic a site absorbs).
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import yaml
from pydantic_core import to_jsonable_python

from appliance.config.schema import GatewayConfig
from appliance.deploy import k8s_policy
from appliance.deploy.gateway_clients import check_client_name
from appliance.deploy.k8s import SECRETS_DIR, K8sManifests
from appliance.deploy.site_appliance import Appliance

__all__ = ["CLIENTS_DIR", "CONFIG_DIR", "GATEWAY_CLIENT", "RUN_DIR", "render_gateway_k8s"]

CONFIG_DIR = "/etc/tt-appliance-gateway"
RUN_DIR = "/run/tt-appliance-gateway"
CLIENTS_DIR = "/run/secrets/tt-appliance-gateway-clients"
GATEWAY_CLIENT = "tt-appliance/gateway-client"
"""Label a pod or a namespace (e.g. the ingress controller's) with `"true"` to let it reach the gateway."""
_APPLIANCES = {"app.kubernetes.io/name": "tt-appliance"}
_PROBE_PERIOD_S = 10
# The parent process (Python) and HAProxy, whose buffers grow with the requests in flight (one body each).
_RESOURCES = {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}}


def render_gateway_k8s(
    site_text: str,
    entries: Sequence[Appliance],
    gateway: GatewayConfig,
    *,
    namespace: str,
    name: str,
    image: str,
    port: int,
    replicas: int = 1,
) -> K8sManifests:
    """ServiceAccount, ConfigMap, Deployment, Service and NetworkPolicy for the gateway of the site `site_text` lists
    (`entries`, parsed), all in `namespace`; ConfigError naming a client that cannot be a Secret's key."""
    for client in gateway.clients:
        check_client_name(client)
    config = _config_map(name, site_text, gateway)
    labels = {"app.kubernetes.io/name": "tt-appliance-gateway", "app.kubernetes.io/instance": name}
    digest = hashlib.sha256(yaml.safe_dump(config["data"]).encode()).hexdigest()[:12]
    meta = {"namespace": namespace, "labels": labels, "annotations": {"tt-appliance/config-hash": digest}}
    config["metadata"] |= meta
    docs: list[Mapping[str, Any]] = [
        k8s_policy.service_account(name, meta),
        config,
        _deployment(name, meta, image, port, replicas, entries, gateway),
        _service(name, meta, port),
        _network_policy(name, meta, port, entries),
    ]
    return K8sManifests(name, tuple(docs))


def _config_map(name: str, site_text: str, gateway: GatewayConfig) -> dict[str, Any]:
    clients = {c: dataclasses.replace(limits, key_file=f"{CLIENTS_DIR}/{c}") for c, limits in gateway.clients.items()}
    resolved = to_jsonable_python(dataclasses.replace(gateway, clients=clients), fallback=dict)
    layer = "# @package _global_\n" + yaml.safe_dump({"gateway": resolved}, sort_keys=True)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-config"},
        "data": {"site.yaml": site_text, "gateway.yaml": layer},
    }


def _deployment(
    name: str,
    meta: Mapping[str, Any],
    image: str,
    port: int,
    replicas: int,
    entries: Sequence[Appliance],
    gateway: GatewayConfig,
) -> dict[str, Any]:
    # The appliances' policies admit labelled peers only: the gateway forwards to engines and checks control APIs.
    labels = meta["labels"] | {k8s_policy.ENGINE_CLIENT: "true", k8s_policy.CONTROL_CLIENT: "true"}
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": f"{name}-config"}},
        _secret_volume("secrets", f"{name}-secrets", sorted({e.token_env for e in entries})),
        {"name": "run", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
        {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
    ]
    if gateway.clients:
        volumes.append(_secret_volume("clients", f"{name}-clients", sorted(gateway.clients)))
    pod = {
        "serviceAccountName": name,
        "automountServiceAccountToken": False,
        "securityContext": k8s_policy.pod_security(),
        "containers": [_container(image, port, bool(gateway.clients))],
        "volumes": volumes,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, **meta, "annotations": meta["annotations"] | k8s_policy.checkov_skips(image)},
        "spec": {
            "replicas": replicas,
            # The new gateway is ready before the old one goes: the site's endpoint never has no endpoint.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "selector": {"matchLabels": {"app.kubernetes.io/instance": name}},
            "template": {"metadata": {"labels": labels, "annotations": meta["annotations"]}, "spec": pod},
        },
    }


def _container(image: str, port: int, clients: bool) -> dict[str, Any]:
    env = {
        "APPLIANCE_HOST_FILE": f"{CONFIG_DIR}/gateway.yaml",
        "APPLIANCE_SECRETS_DIR": SECRETS_DIR,
        "HOME": "/tmp",  # uid 10001 has no passwd entry; its caches go to the tmp volume
    }
    mounts = [
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "secrets", "mountPath": SECRETS_DIR, "readOnly": True},
        *([{"name": "clients", "mountPath": CLIENTS_DIR, "readOnly": True}] if clients else []),
        {"name": "run", "mountPath": RUN_DIR},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    command = ["appliance", "gateway", "--site-file", f"{CONFIG_DIR}/site.yaml", "--listen", f"0.0.0.0:{port}"]
    return {
        "name": "gateway",
        "image": image,
        "imagePullPolicy": "Always",
        "command": [*command, "--out", RUN_DIR],
        "env": [{"name": key, "value": value} for key, value in env.items()],
        "ports": [{"name": "openai", "containerPort": port}],
        "resources": _RESOURCES,
        "securityContext": k8s_policy.container_security(),
        "volumeMounts": mounts,
        **_probes(clients),
    }


def _probes(clients: bool) -> dict[str, Any]:
    """HAProxy answers `GET /v1/models` itself, from the site it learned at start: ready and alive once it does. With
    API keys that route wants a key, which a probe could carry only by value in the manifest: the port is probed."""
    action = {"tcpSocket": {"port": "openai"}} if clients else {"httpGet": {"path": "/v1/models", "port": "openai"}}

    def probe(failures: int) -> dict[str, Any]:
        return {**action, "periodSeconds": _PROBE_PERIOD_S, "timeoutSeconds": 5, "failureThreshold": failures}

    return {"readinessProbe": probe(1), "livenessProbe": probe(3)}


def _secret_volume(volume: str, secret: str, keys: Sequence[str]) -> dict[str, Any]:
    """`secret`'s `keys` as files of their names, required; 0400, which kubelet makes 0440 for fsGroup (the gateway
    accepts a key file so mounted)."""
    items = [{"key": key, "path": key} for key in keys]
    return {"name": volume, "secret": {"secretName": secret, "items": items, "defaultMode": 0o400}}


def _service(name: str, meta: Mapping[str, Any], port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, **meta},
        "spec": {
            "selector": {"app.kubernetes.io/instance": name},
            "ports": [{"name": "openai", "port": port, "targetPort": "openai"}],
        },
    }


def _network_policy(name: str, meta: Mapping[str, Any], port: int, entries: Sequence[Appliance]) -> dict[str, Any]:
    """Ingress from labelled peers to the endpoint (kubelet's probes come from the node, which most CNIs let through);
    egress to the cluster DNS and the appliances: their pods in any namespace, on any port (the engines' ports are
    learned at start), and each appliance the site file lists by IP address. An appliance outside the cluster named
    by a host name needs its addresses added here."""
    appliances: list[dict[str, Any]] = [{"namespaceSelector": {}, "podSelector": {"matchLabels": _APPLIANCES}}]
    for host in sorted({urlsplit(e.url).hostname or "" for e in entries}):
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            continue
        appliances.append({"ipBlock": {"cidr": f"{address}/{address.max_prefixlen}"}})
    spec = {
        "podSelector": {"matchLabels": {"app.kubernetes.io/instance": name}},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [{"from": k8s_policy.peers(GATEWAY_CLIENT), "ports": [k8s_policy.port(port)]}],
        "egress": [
            {"to": [k8s_policy.DNS], "ports": [k8s_policy.port(53, "UDP"), k8s_policy.port(53)]},
            {"to": appliances},
        ],
    }
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, **meta},
        "spec": spec,
    }
