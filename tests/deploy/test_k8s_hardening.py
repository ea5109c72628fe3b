"""The Kubernetes manifests pass checkov (every check it skips is skipped in the manifest, with a reason),
live in the site's namespace, admit only labelled peers, and carry secrets as files `serve` reads; the weights
fetch's init container is held to the same."""

from __future__ import annotations

from typing import Any

import pytest

from appliance.compat.matrix import CompatibilityMatrix
from appliance.config.compose import compose_config
from appliance.deploy.k8s import POD_OVERRIDES, SECRETS_DIR, render_k8s
from appliance.deploy.k8s_policy import CONTROL_CLIENT, ENGINE_CLIENT
from appliance.errors import ConfigError
from testkit.helpers import checkov_report
from tests.deploy.test_deploy import kinds, pinned, rendered, validated

DIGEST = "registry.example/tt-appliance@sha256:" + "0" * 64
# Rendered side by side under distinct names, so checkov's graph checks cannot pair one render's pod
# with another's NetworkPolicy.
RENDERS = {
    "t3k": (("+model=llama", "mesh=t3k"), "tt-appliance:0.1.0"),
    "lab-t3k": (("site=lab-t3k", "+model=llama"), "tt-appliance:0.1.0"),
    "cpu": (("mesh=cpu",), "tt-appliance:0.1.0"),
    "cpu-digest": (("mesh=cpu",), DIGEST),
    "cpu-tls": (("mesh=cpu", "control.tls={cert_file: /etc/tt/tls.crt, key_file: /etc/tt/tls.key}"), DIGEST),
    "cpu-pinned": ((), DIGEST),  # a pinned checkpoint (test_deploy.pinned): the init container that fetches it
}


@pytest.fixture(scope="module")
def checkov(matrix: CompatibilityMatrix, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One checkov run (`--framework kubernetes`) over every render: its JSON report."""
    out, locks = tmp_path_factory.mktemp("k8s"), tmp_path_factory.mktemp("weights-locks")
    for name, (overrides, image) in RENDERS.items():
        more = pinned(locks) if name == "cpu-pinned" else ()
        render_k8s(validated(matrix, *overrides, *more), image=image, name=f"tt-{name}").write(out / name)
    return checkov_report(out)


def test_checkov_fails_no_check_on_any_render(checkov: dict[str, Any]) -> None:
    summary = checkov["summary"]
    failed = [(c["check_id"], c["resource"], c["file_path"]) for c in checkov["results"]["failed_checks"]]
    assert failed == [] and summary["parsing_errors"] == 0
    assert summary["passed"] >= 90 * len(RENDERS) and summary["resource_count"] >= 6 * len(RENDERS)


def test_every_skipped_check_is_the_workloads_own_with_its_reason(checkov: dict[str, Any]) -> None:
    skipped: dict[str, set[str]] = {}
    for check in checkov["results"]["skipped_checks"]:
        assert len(check["check_result"].get("suppress_comment", "")) > 20, check["check_id"]
        assert check["resource"].startswith("Deployment.")
        skipped.setdefault(check["file_path"].split("/")[-2], set()).add(check["check_id"])
    # The digest when the image is a tag; hostIPC for the boards' host-wide locks (tt only).
    assert skipped == {
        "t3k": {"CKV_K8S_43", "CKV_K8S_18"},
        "lab-t3k": {"CKV_K8S_43", "CKV_K8S_18"},
        "cpu": {"CKV_K8S_43"},
    }


def test_every_namespaced_manifest_goes_in_the_site_namespace(matrix: CompatibilityMatrix) -> None:
    for overrides, namespace in [
        (("mesh=cpu",), "tt-appliance"),
        (("site=lab-t3k", "+model=llama"), "tt-lab"),
        (("mesh=cpu", "site.namespace=inference"), "inference"),
    ]:
        manifests = render_k8s(validated(matrix, *overrides), image="x:1")
        assert {doc["metadata"]["namespace"] for doc in manifests.documents} == {namespace}
        assert len(manifests.documents) >= 5


def test_a_namespace_that_is_no_dns_label_is_refused() -> None:
    with pytest.raises(ConfigError, match="site.namespace"):
        compose_config(["site.namespace=Lab_T3K"])


def test_the_network_policy_admits_only_labelled_peers_on_each_port(matrix: CompatibilityMatrix) -> None:
    docs = kinds(rendered(matrix, "lab-t3k"))
    policy = docs["NetworkPolicy"]["spec"]
    assert policy["podSelector"] == docs["Deployment"]["spec"]["selector"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    admitted = {rule["ports"][0]["port"]: rule["from"] for rule in policy["ingress"]}
    for port, label in [(8000, ENGINE_CLIENT), (8100, CONTROL_CLIENT)]:
        match = {"matchLabels": {label: "true"}}
        assert admitted[port] == [{"podSelector": match}, {"namespaceSelector": match}]
    assert len(policy["ingress"]) == 2 and all(len(rule["ports"]) == 1 for rule in policy["ingress"])
    assert {p["port"] for rule in policy["egress"] for p in rule["ports"]} == {53, 443}


def test_secrets_mount_as_read_only_files_and_never_as_variables(matrix: CompatibilityMatrix) -> None:
    docs = kinds(rendered(matrix, "lab-t3k"))
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert "secretKeyRef" not in str(pod) and "envFrom" not in container
    env = {e["name"]: e["value"] for e in container["env"]}
    mount = next(m for m in container["volumeMounts"] if m["name"] == "secrets")
    assert env["APPLIANCE_SECRETS_DIR"] == mount["mountPath"] == SECRETS_DIR and mount["readOnly"] is True
    volume = next(v for v in pod["volumes"] if v["name"] == "secrets")["projected"]
    assert volume["defaultMode"] == 0o400
    keys = {s["secret"]["optional"]: [i["key"] for i in s["secret"]["items"]] for s in volume["sources"]}
    assert keys == {False: ["APPLIANCE_TOKEN", "LAB_OPENAI_KEY"], True: ["HF_TOKEN"]}
    assert all(i["key"] == i["path"] for s in volume["sources"] for i in s["secret"]["items"])
    drain = container["lifecycle"]["preStop"]["exec"]["command"]
    assert drain[drain.index("--token-file") + 1] == f"{SECRETS_DIR}/APPLIANCE_TOKEN"


def test_the_root_filesystem_is_read_only_and_every_written_path_is_a_volume(matrix: CompatibilityMatrix) -> None:
    pod = kinds(rendered(matrix, "lab-t3k"))["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True and pod["securityContext"]["runAsNonRoot"]
    writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
    paths = {o.split("=", 1)[1] for o in POD_OVERRIDES if o.startswith("paths.")}
    home = next(e["value"] for e in container["env"] if e["name"] == "HOME")
    assert paths | {"/tmp", home} <= writable
    assert pod["automountServiceAccountToken"] is False and pod["serviceAccountName"] == "tt-appliance-lab-t3k"
