"""What the Kubernetes manifests restrict: the pod's identity and privileges, who may reach its ports,
and the checkov checks the workload cannot meet, each skipped on its resource with the reason.

The pod runs as an unprivileged uid with a read-only root filesystem, no capabilities and the
runtime's seccomp profile; it gets no service-account token (it never talks to the API server).
The NetworkPolicy admits, by label, only the balancer in front to the engine port, and the balancer
and the site's consoles to the control port.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from appliance.plan import LaunchPlan

__all__ = [
    "CONTROL_CLIENT",
    "DNS",
    "ENGINE_CLIENT",
    "UID",
    "checkov_skips",
    "container_security",
    "network_policy",
    "peers",
    "pod_security",
    "port",
    "service_account",
]

UID = 10001
"""The appliance's uid and gid in the pod: above the host's system and login ranges (checkov CKV_K8S_40)."""
ENGINE_CLIENT = "tt-appliance/engine-client"
"""Label a pod (in the namespace) or a namespace (every pod in it, e.g. the ingress controller's) with
`"true"` to let it reach the engine port: the gateway and the ingress."""
CONTROL_CLIENT = "tt-appliance/control-client"
"""Label a pod or a namespace with `"true"` to let it reach the control port: the site's consoles, and
`appliance gateway`, whose HAProxy checks `/readyz` there (it carries both labels)."""
DNS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}
"""The cluster's DNS, as an egress peer."""


def peers(label: str) -> list[dict[str, Any]]:
    """The pods, and the namespaces (every pod in them), labelled `label: "true"`."""
    match = {"matchLabels": {label: "true"}}
    return [{"podSelector": match}, {"namespaceSelector": match}]


def port(number: int, protocol: str = "TCP") -> dict[str, Any]:
    return {"port": number, "protocol": protocol}


def pod_security() -> dict[str, Any]:
    # fsGroup reaches the emptyDirs and the Secret volume (kubelet gives the group read), not a hostPath.
    return {
        "runAsNonRoot": True,
        "runAsUser": UID,
        "runAsGroup": UID,
        "fsGroup": UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security() -> dict[str, Any]:
    # The boards come through DRA as device nodes (tt-kmd makes them 0666): no capability is needed.
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def service_account(name: str, meta: Mapping[str, Any]) -> dict[str, Any]:
    """An identity of the pod's own with no RBAC bindings, so it is not the namespace's `default`."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name, **meta},
        "automountServiceAccountToken": False,
    }


def network_policy(name: str, plan: LaunchPlan, meta: Mapping[str, Any]) -> dict[str, Any]:
    """Ingress by label to each port; egress to the cluster DNS, HTTPS (the hub's weights and tokenizer) and a site
    mirror's port.

    Kubelet probes come from the node, which most CNIs (Calico, Cilium, the kubenet/bridge plugins) let
    through whatever the policy says; on one that does not, add the nodes' CIDR as an ipBlock to the
    control port's peers. The preStop drain talks to 127.0.0.1, which no policy filters.
    """
    spec = {
        "podSelector": {"matchLabels": {"app.kubernetes.io/instance": name}},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [
            {"from": peers(ENGINE_CLIENT), "ports": [port(plan.port)]},
            {"from": peers(CONTROL_CLIENT), "ports": [port(plan.control.port)]},
        ],
        # Hub downloads (weights, tokenizer, the embedded recipes' pinned wheels) go out on 443, and the weights
        # fetch to a site mirror on its port, to addresses no selector names; a site with local weights can drop it.
        "egress": [
            {"to": [DNS], "ports": [port(53, "UDP"), port(53)]},
            {"ports": [port(number) for number in sorted({443, *_mirror_port(plan)})]},
        ],
    }
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, **meta},
        "spec": spec,
    }


def _mirror_port(plan: LaunchPlan) -> tuple[int, ...]:
    """The port of the site mirror the pod's weights fetch reads over HTTP, if any."""
    source = urlsplit(plan.weights.source if plan.weights else "")
    if source.scheme not in ("http", "https"):
        return ()
    return (source.port or (443 if source.scheme == "https" else 80),)


def checkov_skips(image: str, *, boards: bool = False) -> dict[str, str]:
    """checkov's own skip annotations for a Deployment: the checks its workload cannot meet, and why. `boards`: its
    pod opens Tenstorrent boards."""
    skips = []
    if "@sha256:" not in image:
        skips.append(f"CKV_K8S_43=the image is named by tag ({image}); render with --image <name>@sha256:<digest>")
    if boards:
        skips.append(
            "CKV_K8S_18=tt-umd arbitrates chip access with mutexes in the host's /dev/shm, shared with "
            "tt-smi and other runtimes on the node (hostIPC, as the TIS chart v0.2 sets)"
        )
    return {f"checkov.io/skip{i}": skip for i, skip in enumerate(skips, start=1)}
